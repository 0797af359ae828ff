"""Issue 37's hostile run, its misleading classes (item 6): what vsr says, and its exit status, name the real
cause."""

from __future__ import annotations

import pytest

from vsr.jobs.store import JobStore
from tests.jobs.test_worker import queue, spec_for
from tests.probe.cli_io import ProbeRunner


@pytest.fixture(scope="module")
def vsr_cli():
    return ProbeRunner()


def test_jobs_run_until_empty_exits_non_zero_when_a_job_it_ran_failed(vsr_cli, make_clip, tmp_path):
    """Every job failed, exit 0: a script (or CI) read the run as a success."""
    a, b = make_clip("a.mp4", frames=3, seed=1), make_clip("b.mp4", frames=3, seed=2)
    with JobStore(tmp_path / "q.db", create=True) as store:
        queue(store, spec_for(a, tmp_path / "a.mkv"), spec_for(b, tmp_path / "b.mkv"))
    a.unlink()
    ran = vsr_cli.run(["jobs", "run", "--until-empty", "--store", tmp_path / "q.db"], tmp_path / "ran")
    assert ran.rc == 1 and "Traceback" not in ran.err, ran.err
    assert any("job 1 failed" in ln for ln in ran.lines) and (tmp_path / "b.mkv").is_file()
    with JobStore(tmp_path / "q.db") as store:
        assert [r.state for r in store.jobs()] == ["failed", "done"]
    again = vsr_cli.run(["jobs", "run", "--until-empty", "--store", tmp_path / "q.db"], tmp_path / "again")
    assert again.rc == 0, again.err  # nothing run now: the earlier failure is not this run's


def one_error(ran) -> str:
    assert ran.rc == 2 and "Traceback" not in ran.err and len(ran.lines) == 1, ran.err
    assert ran.lines[0].startswith("vsr: error: "), ran.err
    return ran.lines[0]


@pytest.mark.parametrize("where", ["output", "--report"])
def test_a_path_under_a_file_says_the_file(vsr_cli, tmp_path, where):
    """``x.txt/r.json``: "folder does not exist" sent the user looking for a missing folder."""
    from tests.probe.test_probe_data_loss import RUN, clip

    src = clip(tmp_path, "in.mkv", 3)
    (tmp_path / "x.txt").write_text("notes\n")
    under = tmp_path / "x.txt" / "deeper" / ("r.json" if where == "--report" else "o.mkv")
    argv = ["upscale", src, under, *RUN] if where == "output" else \
        ["upscale", src, tmp_path / "o.mkv", *RUN, "--report", under]
    line = one_error(vsr_cli.run(argv, tmp_path / "ran"))
    assert f"{tmp_path / 'x.txt'} is a file, not a folder" in line and "does not exist" not in line


@pytest.mark.parametrize("kind", ["character device", "named pipe"])
def test_a_special_file_as_input_says_what_it_is(vsr_cli, tmp_path, kind):
    """``/dev/zero`` and a FIFO were "empty": their size is 0, their content is not."""
    import os

    from tests.probe.test_probe_data_loss import RUN

    if kind == "named pipe":
        os.mkfifo(tmp_path / "fifo")
    src = "/dev/zero" if kind == "character device" else tmp_path / "fifo"
    line = one_error(vsr_cli.run(["upscale", src, tmp_path / "o.mkv", *RUN], tmp_path / "ran"))
    assert f"is a {kind}" in line and "empty" not in line
    assert ("give - and feed it on standard input" in line) == (kind == "named pipe")


@pytest.mark.parametrize("on_stdin", [False, True])
def test_a_negative_header_width_reads_as_negative(vsr_cli, tmp_path, on_stdin):
    """FFmpeg logs a Y4M header's W-64 unsigned: 4294967232, "larger than FFmpeg decodes"."""
    from tests.probe.test_probe_data_loss import RUN

    y4m = b"YUV4MPEG2 W-64 H12 F25:1 Ip A1:1 C420jpeg\nFRAME\n" + bytes(300)
    (tmp_path / "neg.y4m").write_bytes(y4m)
    src = "-" if on_stdin else tmp_path / "neg.y4m"
    line = one_error(vsr_cli.run(["upscale", src, tmp_path / "o.mkv", *RUN], tmp_path / "ran",
                                 stdin=y4m if on_stdin else None))
    assert "picture size -64x12 is invalid" in line and "4294967232" not in line


def test_train_out_naming_a_file_is_one_line_before_any_data_is_read(vsr_cli, tmp_path):
    (tmp_path / "notes.txt").write_text("mine\n")
    line = one_error(vsr_cli.run(["train", "--config", "edvr-tiny", "--data", tmp_path / "missing", "--iters", "1",
                                  "--out", tmp_path / "notes.txt"], tmp_path / "ran"))
    assert "--out" in line and "notes.txt is a file" in line
    assert (tmp_path / "notes.txt").read_text() == "mine\n"


def test_fetch_where_a_folder_has_the_checkpoints_name_says_so_before_downloading(tmp_path, monkeypatch, capsys):
    """A folder at ``D/FILE``: the whole file was downloaded, then a raw IsADirectoryError."""
    from tests.model.file_server import FileServer, Served
    from tests.model.test_fetch import entry, fetch_cli, use

    data = b"a checkpoint's bytes" * 100
    monkeypatch.setenv("VSR_WEIGHTS_DIR", str(tmp_path / "weights"))
    with FileServer() as srv:
        srv.files = {"/w.pth": Served(data)}
        e = entry("tiny-folder", data, [srv.url("/w.pth")])
        use(monkeypatch, e)
        (tmp_path / "weights" / e.filename).mkdir(parents=True)
        code, _, err = fetch_cli(capsys, "tiny-folder")
        assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
        assert f"{tmp_path / 'weights' / e.filename} is a folder" in err
        assert srv.requests == []  # nothing downloaded
    assert sorted(p.name for p in (tmp_path / "weights").iterdir()) == [e.filename]


def test_y4m_with_an_encoder_setting_is_one_line_before_anything_is_written(vsr_cli, make_clip, tmp_path):
    """``--format y4m --crf 10`` named FFmpeg's wrapped_avframe and had already written Y4M's header to stdout."""
    from tests.probe.test_probe_data_loss import RUN

    src = make_clip("c.mp4", frames=2, width=16, height=12)
    ran = vsr_cli.run(["upscale", src, "-", "--format", "y4m", "--crf", "10", *RUN], tmp_path / "ran")
    line = one_error(ran)
    assert ran.out == b"" and "Y4M carries the frames uncompressed: --crf does not apply" in line
    assert "wrapped_avframe" not in line


@pytest.mark.parametrize("argv, said", [
    (["report", "{run}", "--html", ""], "--html is empty"),
    (["jobs", "report", "1", "--html", ""], "--html is empty"),
    (["preview", "{clip}", "--out", ""], "--out must end in .png or .html, not ''"),
])
def test_an_empty_page_name_is_one_line_not_a_silent_skip(vsr_cli, make_clip, tmp_path, argv, said):
    """An empty --html was taken as 'no page' (exit 0, nothing written); an empty preview --out likewise."""
    run = tmp_path / "r.json"
    run.write_text("{}")
    clip = make_clip("c.mp4", frames=2, width=16, height=12)
    argv = [a.format(run=run, clip=clip) for a in argv]
    line = one_error(vsr_cli.run(argv + ["--store", str(tmp_path / "q.db")] if argv[0] == "jobs" else argv,
                                 tmp_path / "ran"))
    assert said in line


@pytest.mark.parametrize("options, said", [
    (["--tile", "33", "--tile-overlap", "16"], "--tile 33: tiles are cut on EDVR's 4-pixel grid"),
    (["--tile-overlap", "15"], "--tile-overlap 15: an odd overlap puts tiles off EDVR's 4-pixel grid"),
])
def test_tiles_off_the_pyramids_grid_are_one_line(vsr_cli, make_clip, tmp_path, options, said):
    """--tile 33 --tile-overlap 16 differed from untiled by up to 116/255 (62/255 on REDS): tiles off the 4-pixel
    grid of EDVR's pyramid; a tile of 36 stays within 1/255 (docs/benchmarks-history.md has the measurement)."""
    from tests.probe.test_probe_data_loss import RUN

    src = make_clip("c.mp4", frames=2, width=16, height=12)
    line = one_error(vsr_cli.run(["upscale", src, tmp_path / "o.mkv", *RUN, *options], tmp_path / "ran"))
    assert said in line and not (tmp_path / "o.mkv").exists()
