"""`vsr jobs` from the command line: add, list, run, cancel, retry, report; outputs equal to a single pass;
bad inputs as one line (exit 2) or one failed job while the others finish."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import av
import numpy as np
import pytest

from vsr.cli import main

from tests.jobs.helpers import added_ids
from tests.data import CALENDAR, VIDEOS, need

REPO = Path(__file__).resolve().parents[2]
# the torch backend: the quickest to start (the default ONNX Runtime one is scripts/crash_jobs.py's)
TINY = ["--weights", "random", "--config", "edvr-tiny", "--backend", "torch", "--codec", "ffv1", "--threads", "1"]


def jobs(capsys, *args) -> tuple[int, str, str]:
    rc = main(["jobs", *map(str, args)])
    out = capsys.readouterr()
    return rc, out.out, out.err


def errors(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("vsr: error:")]


def run_workers(store: Path, *extra, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vsr", "jobs", "run", "--until-empty", "--store", str(store),
                           *map(str, extra)], capture_output=True, text=True, timeout=timeout, cwd=REPO)


def frames_of(path: Path) -> list[tuple[object, np.ndarray]]:
    with av.open(str(path)) as c:
        return [(f.pts * f.time_base, f.to_ndarray()) for f in c.decode(c.streams.video[0])]


def single_pass(src: Path, dst: Path) -> Path:
    """The same upscale as TINY in one `vsr upscale` pass (the library call)."""
    from vsr.backends import BackendRequest, TorchOptions
    from vsr.pipeline import upscale
    from vsr.video import EncoderSettings

    upscale(src, dst, backend=BackendRequest("random", "edvr-tiny", TorchOptions(threads=1)),
            encoder=EncoderSettings(codec="ffv1"))
    return dst


def same_frames(a: Path, b: Path) -> bool:
    fa, fb = frames_of(a), frames_of(b)
    return len(fa) == len(fb) and all(ta == tb and np.array_equal(x, y) for (ta, x), (tb, y) in zip(fa, fb))


@pytest.fixture
def clips(make_clip, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    a = make_clip("in/a.mp4", frames=7, seed=1)
    b = make_clip("in/b.mp4", frames=5, seed=2)
    (folder / "notes.txt").write_text("not a video")
    return a, b


def test_add_run_list_report(clips, tmp_path, capsys):
    a, b = clips
    store, out = tmp_path / "q.db", tmp_path / "out"
    rc, ids, err = jobs(capsys, "add", a.parent, "--out-dir", out, "--ext", "mkv", "--chunk-frames", 3,
                        "--store", store, *TINY)
    assert rc == 0, err
    assert added_ids(ids) == ["1", "2"]
    assert f"queued 2 jobs in the job store {store}" in ids
    rc, listing, _ = jobs(capsys, "list", "--store", store, "--json")
    rows = json.loads(listing)
    assert [(r["state"], r["chunks_done"], r["chunks_total"]) for r in rows] == [("queued", 0, 3), ("queued", 0, 2)]
    res = run_workers(store, "--lease", 5)
    assert res.returncode == 0, res.stderr
    assert "job 1 done" in res.stderr and "job 2 done" in res.stderr
    assert sorted(p.name for p in out.iterdir()) == ["a.mkv", "b.mkv"]  # no chunk folder, no partial left
    for src in (a, b):
        assert same_frames(out / f"{src.stem}.mkv", single_pass(src, tmp_path / f"ref-{src.stem}.mkv"))
    rc, text, _ = jobs(capsys, "list", "--store", store)
    assert text.splitlines()[0].split() == ["id", "state", "progress", "chunks", "fps", "ETA", "input", "error"]
    assert [line.split()[1:5] for line in text.splitlines()[1:]] == [["done", "100%", "(7/7)", "3/3"],
                                                                      ["done", "100%", "(5/5)", "2/2"]]
    rc, text, err = jobs(capsys, "report", 1, "--store", store, "--html", tmp_path / "job1.html")
    assert rc == 0 and text.startswith("job 1: 7 frames in ") and "chunks" in text
    assert "<svg" in (tmp_path / "job1.html").read_text()
    assert err.splitlines() == [f"vsr: wrote {tmp_path / 'job1.html'}"]  # every file vsr writes is said, as vsr report does
    rc, data, _ = jobs(capsys, "report", 2, "--store", store, "--json")
    summary = json.loads(data)["summary"]
    assert summary["frames"] == 5 and summary["bottleneck"] is not None


def test_a_missing_file_among_several_adds_nothing(clips, tmp_path, capsys):
    a, b = clips
    store = tmp_path / "q.db"
    rc, out, err = jobs(capsys, "add", a, tmp_path / "missing.mp4", b, "--out-dir", tmp_path / "out",
                        "--store", store, *TINY)
    assert rc == 2 and out == "" and errors(err) == [f"vsr: error: input does not exist: {tmp_path / 'missing.mp4'}"]
    assert len(err.splitlines()) == 1 and not store.exists()


def test_a_job_that_fails_while_the_others_finish(clips, make_clip, tmp_path, capsys):
    a, b = clips
    c = make_clip("c.mp4", frames=4, seed=3)
    store, out = tmp_path / "q.db", tmp_path / "out"
    assert jobs(capsys, "add", a, b, c, "--out-dir", out, "--ext", "mkv", "--store", store, *TINY)[0] == 0
    b.write_bytes(b"\x00" * 64)  # the input goes bad after it was queued
    res = run_workers(store, "--workers", 2)
    assert res.returncode == 1, res.stderr  # the others finish, and the run says one failed (issue 37)
    rows = json.loads(jobs(capsys, "list", "--json", "--store", store)[1])
    assert [r["state"] for r in rows] == ["done", "failed", "done"]
    assert rows[1]["error"] and "\n" not in rows[1]["error"] and not (out / "b.mkv").exists()
    assert "job 2 failed: " in res.stderr and "Traceback" not in res.stderr
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == ["a.mkv", "c.mkv"]


def test_cancel_then_retry(clips, tmp_path, capsys):
    a, _ = clips
    store, out = tmp_path / "q.db", tmp_path / "out"
    jobs(capsys, "add", a, "--out-dir", out, "--ext", "mkv", "--chunk-frames", 4, "--store", store, *TINY)
    assert jobs(capsys, "cancel", 1, "--store", store)[0] == 0
    assert run_workers(store).returncode == 0 and not (out / "a.mkv").exists()
    rc, _, err = jobs(capsys, "cancel", 1, "--store", store)
    assert rc == 2 and errors(err) == ["vsr: error: job 1 is cancelled; only a queued, running or waiting job can be "
                                       "cancelled"]
    assert jobs(capsys, "retry", 1, "--store", store)[0] == 0
    assert run_workers(store).returncode == 0 and (out / "a.mkv").is_file()
    rc, _, err = jobs(capsys, "retry", "x", "--store", store)
    assert rc == 2 and "a job id is a number" in err


def test_job_file_with_a_typo_is_one_line(clips, tmp_path, capsys):
    a, _ = clips
    jf = tmp_path / "batch.toml"
    jf.write_text(f'inputs = ["{a}"]\nout_dir = "out"\n[upscale]\nmemory-budgett = 2048\n')
    rc, out, err = jobs(capsys, "add", jf, "--store", tmp_path / "q.db", *TINY)
    assert rc == 2 and len(err.splitlines()) == 1
    assert "[upscale]: unknown key 'memory-budgett' (did you mean 'memory_budget'?)" in err


def test_job_file_options_override_the_command_line(clips, tmp_path, capsys):
    a, b = clips
    jf = tmp_path / "batch.toml"
    jf.write_text(f'inputs = ["{b}"]\nout_dir = "files"\next = "mkv"\nchunk_frames = 2\n[upscale]\nbatch = 2\n')
    store = tmp_path / "q.db"
    rc, ids, err = jobs(capsys, "add", a, jf, "--out-dir", tmp_path / "out", "--store", store, *TINY)
    assert rc == 0, err
    from vsr.jobs.spec import JobSpec
    from vsr.jobs.store import JobStore

    with JobStore(store) as s:
        first, second = (JobSpec.from_json(s.spec_json(int(i))) for i in added_ids(ids))
        assert len(s.chunks(int(added_ids(ids)[1]))) == 3  # 5 frames in chunks of 2
    assert first.output == str(tmp_path / "out" / "a.mp4") and first.runner.batch == 1
    assert second.output == str(tmp_path / "files" / "b.mkv") and second.runner.batch == 2
    assert second.encoder.codec == "ffv1"  # from the command line, which the file does not override


NEEDS_INT8 = "needs precision int8 (it calibrates the split plan's int8 segments)"


@pytest.mark.parametrize("keys, said", [
    ('precision = "fp32"\nint8_calibration = "cal"', f"int8_calibration {NEEDS_INT8}"),
    ('backend = "ort"\nprecision = "int8"\nint8-calibration = "cal"',
     "int8-calibration {tmp}/cal: no frames in it (give a folder of PNG, JPEG, TIFF, BMP or WebP frames)"),
    ('precision = "fp32"\nint8-scales = "exact"', "int8-scales needs precision int8 (it chooses the activation "
                                                   "scales of the split plan's int8 segments)"),
    ("tile = 33", "tile 33: tiles are cut on EDVR's 4-pixel grid (its pyramid halves the frame twice); give a "
                  "multiple of 4 (32 or 36)"),
    ("memory-budget = 3", "memory-budget must be between 256 and 1073741824, not 3"),
    ('frames = "10:20"', "frames 10:20: {tmp}/in/a.mp4 has only 7 frames"),  # (said when the chunks are planned)
    ("crf = 4\nencoder_options = {crf = 3}", "crf 4 and encoder_options crf=3 both set the encoder's crf: give one "
                                             "of them"),
])
def test_a_job_file_s_bad_value_names_its_key(clips, tmp_path, capsys, keys, said):
    """A job file's bad value was named as the command line's option (`--int8-calibration needs ...` for its
    int8_calibration key, `--tile 33: ...`): now as its own type errors are, by the key as the file spells it."""
    a, _ = clips
    (tmp_path / "cal").mkdir()
    jf = tmp_path / "batch.toml"
    jf.write_text(f'inputs = ["{a}"]\nout_dir = "out"\n[upscale]\n{keys}\n')
    store = tmp_path / "q.db"
    rc, out, err = jobs(capsys, "add", jf, "--store", store, *TINY)
    assert rc == 2 and out == "" and errors(err) == [
        f"vsr: error: job file {jf}: [upscale]: {said.format(tmp=tmp_path)}"], err
    assert not store.exists()


@pytest.mark.parametrize("keys, inputs, said", [
    ('frames = "10:20"', "x --frames y/--frames.mp4", "frames 10:20: {src} has only 7 frames"),  # a file's name
    ('frames = "10:20"', "x --frames y", "frames 10:20: {src} has only 7 frames"),  # a folder of videos
    ('backend = "ort"\nprecision = "int8"\nint8-calibration = "x --int8-calibration y"',
     "a.mp4", "int8-calibration {tmp}/x --int8-calibration y: no frames in it (give a folder of PNG, JPEG, TIFF, "
     "BMP or WebP frames)"),
])
def test_a_job_file_s_key_is_renamed_where_the_message_names_it_not_inside_a_path(clips, tmp_path, capsys, keys,
                                                                                   inputs, said):
    """The key's rename rewrote every spelling of the option in the message: an input, a folder of videos or a
    calibration folder whose name holds ``--frames`` was printed as another path (``x frames y``)."""
    a, _ = clips
    (tmp_path / "x --int8-calibration y").mkdir()
    src = tmp_path / "x --frames y" / "--frames.mp4"
    src.parent.mkdir()
    src.write_bytes(a.read_bytes())
    (tmp_path / "a.mp4").write_bytes(a.read_bytes())
    jf = tmp_path / "batch.toml"
    jf.write_text(f'inputs = ["{inputs}"]\nout_dir = "out"\n[upscale]\n{keys}\n')
    rc, out, err = jobs(capsys, "add", jf, "--store", tmp_path / "q.db", *TINY)
    assert rc == 2 and errors(err) == [f"vsr: error: job file {jf}: [upscale]: {said.format(tmp=tmp_path, src=src)}"]


def test_the_command_line_s_options_keep_their_names_beside_a_job_file(clips, tmp_path, capsys, monkeypatch):
    """Only what the job file set is named by its keys: the command line's --tile stays --tile; and where
    precision auto leaves the file's int8 keys unused, the warning names them."""
    monkeypatch.delenv("VSR_PRECISION", raising=False)
    a, _ = clips
    jf = tmp_path / "batch.toml"
    jf.write_text(f'inputs = ["{a}"]\nout_dir = "out"\n[upscale]\nbatch = 2\nint8_scales = "static"\n')
    store = tmp_path / "q.db"
    rc, out, err = jobs(capsys, "add", jf, "--store", store, *TINY, "--tile", "33")
    assert rc == 2 and errors(err) == ["vsr: error: --tile 33: tiles are cut on EDVR's 4-pixel grid (its pyramid "
                                       "halves the frame twice); give a multiple of 4 (32 or 36)"], err
    rc, out, err = jobs(capsys, "add", jf, "--store", store, *TINY)
    assert rc == 0 and [ln for ln in err.splitlines() if "int8" in ln] == [
        f"vsr: warning: job file {jf}: [upscale]: int8_scales is not used: precision auto runs this backend in fp32 "
        "(it has no int8 plan)"], err


def test_int8_scales_beside_fp32_queues_nothing(clips, tmp_path, capsys):
    """`vsr jobs add --precision fp32 --int8-scales static` queued fp32 jobs that dropped the option unsaid."""
    a, _ = clips
    store = tmp_path / "q.db"
    rc, out, err = jobs(capsys, "add", a, "--out-dir", tmp_path / "out", "--store", store, *TINY,
                        "--precision", "fp32", "--int8-scales", "static")
    assert rc == 2 and out == "" and errors(err) == [
        "vsr: error: --int8-scales needs --precision int8 (it chooses the activation scales of the split plan's "
        "int8 segments)"]
    assert not store.exists()


def test_an_int8_job_with_an_empty_calibration_folder_queues_nothing(clips, tmp_path, capsys):
    """It was queued, and every worker that ran it failed on the folder (docs/jobs.md: refused when added)."""
    a, _ = clips
    store, cal = tmp_path / "q.db", tmp_path / "cal"
    cal.mkdir()
    rc, out, err = jobs(capsys, "add", a, "--out-dir", tmp_path / "out", "--store", store, *TINY, "--backend", "ort",
                        "--precision", "int8", "--int8-calibration", cal)
    assert rc == 2 and out == "" and errors(err) == [
        f"vsr: error: --int8-calibration {cal}: no frames in it (give a folder of PNG, JPEG, TIFF, BMP or WebP frames)"]
    assert not store.exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize("case", ["corrupt", "locked", "missing"])
def test_a_store_that_cannot_be_used_is_one_line(clips, tmp_path, capsys, monkeypatch, case):
    store = tmp_path / "q.db"
    holder = None
    if case == "corrupt":
        store.write_bytes(b"garbage" * 200)
    elif case == "locked":
        from vsr.jobs.store import JobStore

        JobStore(store, create=True).close()
        holder = sqlite3.connect(store, isolation_level=None)
        holder.execute("PRAGMA locking_mode = EXCLUSIVE")
        holder.execute("BEGIN EXCLUSIVE")
        monkeypatch.setenv("VSR_JOBS_BUSY_TIMEOUT", "0.2")
    try:
        monkeypatch.setenv("VSR_JOBS", str(store))  # the store named by the environment
        for args in (["add", clips[0], "--out-dir", tmp_path / "out", *TINY], ["list"], ["run", "--until-empty"],
                     ["cancel", "1"]):
            if case == "missing" and args[0] == "add":
                continue  # add creates the store
            rc, out, err = jobs(capsys, *args)
            assert rc == 2 and len(err.splitlines()) == 1 and err.startswith("vsr: error: "), (args, err)
            assert str(store) in err
    finally:
        if holder is not None:
            holder.close()


def test_add_makes_a_store_of_an_empty_file(clips, tmp_path, capsys):
    """An empty file at the store's name (what SQLite creates first: an older vsr's add stopped by a full disk
    left one) was refused by add as "an SQLite file but not a vsr job store"; add makes the store in it."""
    store = tmp_path / "q.db"
    store.touch()
    rc, out, err = jobs(capsys, "add", clips[1], "--store", store, "--out-dir", tmp_path / "out", *TINY)
    assert rc == 0 and errors(err) == [] and len(added_ids(out)) == 1


def test_outputs_that_would_collide_or_exist(clips, make_clip, tmp_path, capsys):
    a, _ = clips
    other = tmp_path / "other"
    other.mkdir()
    twin = make_clip("other/a.mp4", frames=3)
    rc, _, err = jobs(capsys, "add", a, twin, "--out-dir", tmp_path / "out", "--store", tmp_path / "q.db", *TINY)
    assert rc == 2 and "would both be written to" in err
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "a.mp4").write_bytes(b"mine")
    rc, _, err = jobs(capsys, "add", a, "--out-dir", tmp_path / "out", "--store", tmp_path / "q.db", *TINY)
    assert rc == 2 and "output exists" in err and (tmp_path / "out" / "a.mp4").read_bytes() == b"mine"
    rc, _, err = jobs(capsys, "add", a, "--out-dir", tmp_path / "out", "--store", tmp_path / "q.db", *TINY,
                      "--chunk-frames", 0)
    assert rc == 2 and "--chunk-frames must be >= 1" in err


@pytest.mark.parametrize("existing", [False, True])
def test_an_output_that_is_the_job_store_is_refused(clips, tmp_path, capsys, existing):
    # the join would replace the queue itself with the video (the job then said done, its video lost)
    a, _ = clips
    store = tmp_path / "a.mkv"
    if existing:
        from vsr.jobs.store import JobStore

        JobStore(store, create=True).close()
    before = store.read_bytes() if existing else None
    rc, out, err = jobs(capsys, "add", a, "--out-dir", tmp_path, "--ext", "mkv", "--overwrite", "--store", store,
                        *TINY)
    assert rc == 2 and out == "" and errors(err) == [
        f"vsr: error: the output of {a}, {store}, is the job store's own file: give the job another --out-dir or "
        "--ext, or the store another name"]
    assert (store.read_bytes() if existing else store.exists()) == (before if existing else False)


def test_a_queued_job_whose_output_is_the_store_fails_and_the_store_stays(clips, tmp_path, capsys):
    """A job an older vsr queued (its add did not check) with the store as its output (--store a.mkv --ext mkv):
    its join replaced the queue with the video, said done.  Now the worker fails the job in one line naming
    both, and the store stays."""
    a, _ = clips
    store = tmp_path / "a.mkv"
    rc, _, err = jobs(capsys, "add", a, "--out-dir", tmp_path / "out", "--ext", "mkv", "--store", store, *TINY)
    assert rc == 0, err
    with sqlite3.connect(store) as db:  # as an older vsr queued it: the output is the store
        spec = json.loads(db.execute("SELECT spec FROM jobs").fetchone()[0])
        db.execute("UPDATE jobs SET spec = ?, output = ?",
                   (json.dumps({**spec, "output": str(store), "overwrite": True}), str(store)))
    db.close()
    res = run_workers(store)
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    message = (f"its output, {store}, is the job store's own file ({store}): add the job again with another "
               "--out-dir or --ext")
    assert f"vsr: job 1 failed: {message}" in res.stderr.splitlines(), res.stderr
    rc, listing, _ = jobs(capsys, "list", "--store", store, "--json")
    assert rc == 0 and [(r["state"], r["error"]) for r in json.loads(listing)] == [("failed", message)]


def test_a_report_page_is_never_written_over_the_store_s_log(tmp_path, capsys):
    from vsr.jobs.store import JobStore

    store = tmp_path / "q.db"
    JobStore(store, create=True).close()
    for side in ("-wal", "-shm"):
        page = tmp_path / f"q.db{side}"
        rc, _, err = jobs(capsys, "report", 1, "--store", store, "--html", page, "--overwrite")
        assert rc == 2 and errors(err) == [f"vsr: error: --html {page} is the input {page}: give the page a name of "
                                           "its own"]
        assert not page.exists()


@pytest.mark.parametrize("what", ["file", "dangling link", "file above"])
def test_an_out_dir_that_cannot_be_a_folder_says_what_is_in_the_way(clips, tmp_path, capsys, what):
    # (the line said "File exists", naming neither the file nor the link)
    a, _ = clips
    blocker = tmp_path / "out"
    if what == "dangling link":
        blocker.symlink_to(tmp_path / "gone")
    else:
        blocker.write_bytes(b"mine")
    out_dir = blocker / "deeper" if what == "file above" else blocker
    rc, out, err = jobs(capsys, "add", a, "--out-dir", out_dir, "--store", tmp_path / "q.db", *TINY)
    why = "is a symbolic link to nothing" if what == "dangling link" else "is a file, not a folder"
    assert rc == 2 and out == "" and errors(err) == [f"vsr: error: cannot create the output folder {out_dir}: "
                                                     f"{blocker} {why}"]
    assert not (tmp_path / "q.db").exists() and not (tmp_path / "gone").exists()


def test_a_broker_that_is_not_running_is_one_line(clips, tmp_path, capsys):
    broker = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    for args in (["add", clips[0], "--out-dir", tmp_path / "out", "--broker", broker, *TINY],
                 ["run", "--broker", broker], ["list", "--broker", broker]):
        rc, out, err = jobs(capsys, *args)
        assert rc == 2 and out == "" and len(err.splitlines()) == 1 and broker in err, (args, err)


def test_a_store_workers_option_with_broker_is_one_line_not_ignored(capsys):
    """``run --broker URL --until-empty`` ran a Celery worker that never ended (the option was ignored)."""
    broker = "redis://127.0.0.1:1/0"  # refused before the broker is reached
    for option in (["--until-empty"], ["--lease", "30"], ["--max-attempts", "3"]):
        rc, out, err = jobs(capsys, "run", "--broker", broker, *option)
        assert rc == 2 and out == "" and err == (f"vsr: error: {option[0]} is for workers on a job store: a Celery "
                                                 "worker (--broker) runs until it is stopped, and its broker hands "
                                                 "a lost chunk back (docs/jobs.md)\n"), err


def test_a_refused_add_leaves_no_new_output_folder(clips, tmp_path, capsys):
    """The folders --out-dir names are made to check the outputs; an input that turns out not to be a video
    (found when its chunks are planned) removes those the add made, and none it found."""
    a, _ = clips
    bad = tmp_path / "bad.mp4"
    bad.write_text("not a video\n")
    kept = tmp_path / "kept"
    kept.mkdir()
    store = tmp_path / "q.db"
    rc, out, err = jobs(capsys, "add", a, bad, "--out-dir", kept / "new" / "out", "--store", store, *TINY)
    assert rc == 2 and out == "" and errors(err) and "not a video file" in errors(err)[0]
    assert kept.is_dir() and list(kept.iterdir()) == [] and not store.exists()
    rc, ids, err = jobs(capsys, "add", a, "--out-dir", kept / "new" / "out", "--store", store, *TINY)
    assert rc == 0 and added_ids(ids) == ["1"] and (kept / "new" / "out").is_dir()


def test_add_chooses_each_input_s_weights_once_and_says_so(tmp_path, capsys):
    """Without --weights, each job gets the weights chosen for its input at add time (its key and every chunk
    use that file); a job file's weights = "real" is the bundled name, not a path beside the file."""
    h264 = VIDEOS / "h264_256x240_35fps_1s_noaudio.mp4"
    need(h264, CALENDAR / "lr" / "00000004.png")
    ffv1 = tmp_path / "calendar.mkv"
    subprocess.run(["ffmpeg", "-v", "error", "-framerate", "25", "-i", str(CALENDAR / "lr" / "%08d.png"), "-frames:v", "5",
                    "-c:v", "ffv1", str(ffv1)], check=True)
    jf = tmp_path / "job.toml"
    jf.write_text(f'inputs = ["{ffv1}"]\nout_dir = "forced"\n[upscale]\nweights = "real"\n')
    store = tmp_path / "q.db"
    fast = ["--backend", "torch", "--codec", "ffv1", "--threads", "1"]
    rc, ids, err = jobs(capsys, "add", h264, ffv1, jf, "--out-dir", tmp_path / "out", "--store", store, *fast)
    assert rc == 0, err
    said = [ln for ln in err.splitlines() if ln.startswith("vsr: weights")]
    assert len(said) == 2  # the job file's weights are given: no choice, no line
    assert said[0].startswith(f"vsr: weights for {h264.name}: real (h264 at 0.137 bits/pixel")
    assert said[1].startswith("vsr: weights for calendar.mkv: default (ffv1 at ")
    from vsr.jobs.spec import JobSpec
    from vsr.jobs.store import JobStore

    with JobStore(store) as s:
        specs = [JobSpec.from_json(s.spec_json(int(i))) for i in added_ids(ids)]
    assert [spec.backend.weights for spec in specs] == ["real", "default", "real"]
    # the key counts the chosen file: the same as naming it
    from vsr.backends import BackendRequest

    named = JobSpec(specs[0].input, specs[0].output, BackendRequest("real", None, specs[0].backend.options),
                    specs[0].encoder, specs[0].runner, specs[0].overwrite, specs[0].source)
    assert named.key == specs[0].key


@pytest.mark.parametrize("extra", [["--workers", "2", "--quiet"], ["--workers", "1"]])
def test_standard_error_gone_fails_no_job(clips, tmp_path, capsys, extra):
    """A worker's lines (a warning, "chunk done") to a standard error whose reader is gone (a killed `vsr jobs
    run` whose workers finish their claim, `2>&1 | head`) raised BrokenPipeError inside the chunk: the job
    failed with that as its error.  The lines are lost; the jobs end done, their outputs whole."""
    a, b = clips
    store, out = tmp_path / "q.db", tmp_path / "out"
    rc, _, err = jobs(capsys, "add", a, b, "--out-dir", out, "--ext", "mkv", "--chunk-frames", 3, "--store", store,
                      *TINY)
    assert rc == 0, err
    p = subprocess.Popen([sys.executable, "-m", "vsr", "jobs", "run", "--until-empty", "--store", str(store), *extra],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=REPO)
    p.stderr.close()  # its reader gone before the first line
    assert p.wait(timeout=300) == 0
    rc, listing, _ = jobs(capsys, "list", "--store", store, "--json")
    assert [(r["state"], r["error"]) for r in json.loads(listing)] == [("done", None), ("done", None)]
    for src in (a, b):
        assert same_frames(out / f"{src.stem}.mkv", single_pass(src, tmp_path / f"ref-{src.stem}.mkv"))


def test_add_says_a_deep_source_s_default_codec_once_per_job(make_clip, tmp_path, capsys):
    """`vsr upscale` says that a 10-bit source gets 10-bit HEVC by default (few players decode 10-bit H.264);
    `vsr jobs add` said nothing, and the user learnt it from the output.  Now once per job, not per chunk; not for
    an 8-bit source, nor where -c names the codec; and not before a refusal."""
    deep = make_clip("phone.mp4", width=64, height=48, frames=4, codec="libx265", pix_fmt="yuv420p10le",
                     matrix=1, range=1, primaries=1, transfer=1, options={"x265-params": "log-level=error"})
    plain = make_clip("plain.mp4", frames=4, seed=3)
    tiny = ["--weights", "random", "--config", "edvr-tiny", "--backend", "torch", "--threads", "1"]
    store = tmp_path / "q.db"
    rc, out, err = jobs(capsys, "add", deep, plain, "--out-dir", tmp_path / "out", "--store", store,
                        "--chunk-frames", "1", *tiny)
    assert rc == 0, err
    assert "(4 frames in 4 chunks)" in out
    said = [ln for ln in err.splitlines() if "codec" in ln]
    assert said == ["vsr: phone.mp4: codec: libx265, 10-bit HEVC, for the source's 10 bits (-c libx264 writes "
                    "10-bit H.264, High 10, which few players decode)"]
    rc, _, err = jobs(capsys, "add", deep, "--out-dir", tmp_path / "asked", "--store", store, "-c", "libx264", *tiny)
    assert rc == 0 and "codec" not in err, err
    rc, _, err = jobs(capsys, "add", deep, tmp_path / "missing.mp4", "--out-dir", tmp_path / "no", "--store", store,
                      *tiny)
    assert rc == 2 and err.splitlines() == errors(err) and len(errors(err)) == 1, err
