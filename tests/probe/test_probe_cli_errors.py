"""Issue 32's hostile probe, items 6, 7, 11 and 13, as a user meets them: each case through the real command line
(a ``vsr`` process, or :func:`vsr.cli.main` where a test server's catalogue must be patched in), with real files,
real FFmpeg, a real HTTP server on 127.0.0.1 and real SQLite.  Every refusal is one ``vsr: error:`` line with its
exit code and no traceback, and nothing is left behind that was not there before.

6: closed standard streams, an absurd ``--threads``, a huge Y4M header on a pipe, ``fetch --dir`` naming a file,
   a job's chunk folder swapped for a link while a chunk computes;
7: ``vsr models fetch``: a ``.part`` longer than the file, a proxy's garbage, ``--timeout 1e30``, no folder left by
   a failed download, a corrupt file in the cache, how to install a file downloaded elsewhere;
11: no abbreviated options, "did you mean" for commands, actions and options;
13: ``vsr jobs run`` says frames, fps, ETA and the jobs left; ``vsr jobs list`` does not wait behind a worker.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from vsr.cli import main

from tests.fuzz.cli_runner import CliRunner
from tests.model.file_server import PROXY_GARBAGE, FileServer, Served
from tests.model.test_fetch import cache, entry, fetch_cli, tiny, use  # noqa: F401 -- fixtures

REPO = Path(__file__).resolve().parents[2]
TINY = ["--weights", "random", "--config", "edvr-tiny", "--backend", "torch", "--threads", "1"]
HUGE_Y4M = b"YUV4MPEG2 W100000 H100000 F25:1 Ip A1:1 C420jpeg\nFRAME\n" + bytes(64)
ZERO_WIDE_Y4M = b"YUV4MPEG2 Wabc H12 F25:1 Ip A1:1 C420jpeg\nFRAME\n" + bytes(64)


@pytest.fixture(scope="module")
def runner():
    return CliRunner()


@pytest.fixture
def vsr(runner, tmp_path_factory):
    """``vsr(*ARGS, **setup) -> (exit code, stdout, stderr)`` of ``vsr ARGS`` in a process of its own
    (:class:`tests.fuzz.cli_runner.CliRunner`; ``setup``: its stdin bytes, closed descriptors, env, cwd)."""
    logs = tmp_path_factory.mktemp("logs")

    def run(*args, **setup) -> tuple[int, str, str]:
        n = len(list(logs.iterdir()))
        out, err = logs / f"{n}.out", logs / f"{n}.err"
        code, text = runner(list(args), err, timeout=300, stdout=None if 1 in setup.get("closed", ()) else str(out),
                            **setup)
        return code, out.read_text() if out.exists() else "", text
    return run


def one_error(err: str, *fragments: str) -> str:
    """The single ``vsr: error:`` line ``err`` must be, holding each of ``fragments``."""
    assert "Traceback" not in err and err.count("\n") == 1 and err.startswith("vsr: error: "), err
    for f in fragments:
        assert f in err, err
    return err.strip()


@contextmanager
def running_worker(runner, store: Path, log: Path):
    """``vsr jobs run --until-empty`` on ``store`` (standard error into ``log``) during the block, then waited
    for (killed if the block fails)."""
    worker = runner.start(["jobs", "run", "--until-empty", "--store", store], log)
    try:
        yield worker
        worker.join(300)
    finally:
        if worker.is_alive():
            worker.kill()


def listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.fixture
def clip(make_clip):
    return make_clip("in.mkv", width=16, height=12, frames=4)


# ---- 6: tracebacks and raw errors --------------------------------------------------------------------------

def test_a_closed_standard_output_is_one_line(vsr, clip, tmp_path):
    before = listing(tmp_path)
    rc, _, err = vsr("upscale", clip, "-", "--format", "matroska", *TINY, "--quiet", closed=(1,))
    assert rc == 2
    one_error(err, "standard output is closed")
    assert listing(tmp_path) == before


def test_a_closed_standard_input_is_one_line(vsr, tmp_path):
    rc, _, err = vsr("upscale", "-", tmp_path / "out.mkv", *TINY, "--quiet", closed=(0,))
    assert rc == 2
    one_error(err, "standard input is closed")
    assert listing(tmp_path) == []


@pytest.mark.parametrize("threads", ["100000", "0"])
def test_threads_outside_a_sane_range_is_refused_up_front(vsr, clip, tmp_path, threads):
    before = listing(tmp_path)
    rc, _, err = vsr("upscale", clip, tmp_path / "out.mkv", *TINY[:-2], "--threads", threads, "--quiet")
    assert rc == 2
    one_error(err, "--threads must be between 1 and ", f"not {threads}")
    assert listing(tmp_path) == before


@pytest.mark.parametrize("header, reason", [
    (HUGE_Y4M, "its picture size 100000x100000 is larger than FFmpeg decodes (about 268 million pixels"),
    (ZERO_WIDE_Y4M, "its picture size 0x12 is invalid")])
def test_a_y4m_header_ffmpeg_refuses_reads_the_same_on_a_pipe_as_in_a_file(vsr, tmp_path, header, reason):
    src = tmp_path / "in.y4m"
    src.write_bytes(header)
    rc_file, _, err_file = vsr("upscale", src, tmp_path / "a.mkv", *TINY, "--quiet")
    rc_pipe, _, err_pipe = vsr("upscale", "-", tmp_path / "b.mkv", *TINY, "--quiet", stdin=header)
    assert rc_file == rc_pipe == 2
    one_error(err_file, f"cannot read {src}: ", reason)
    one_error(err_pipe, "cannot read the video on standard input: ", reason)
    assert err_file.split(": its picture size")[1] == err_pipe.split(": its picture size")[1]
    assert listing(tmp_path) == ["in.y4m"]


def test_fetch_into_a_dir_that_is_a_file_is_one_line(vsr, tmp_path):
    (tmp_path / "afile").write_bytes(b"mine")
    rc, _, err = vsr("models", "fetch", "edvr-m-reds", "--dir", "afile", "--quiet", cwd=str(tmp_path),
                     env={"VSR_WEIGHTS_DIR": str(tmp_path / "cache")})
    assert rc == 2
    one_error(err, "cannot download into afile: it is not a folder")
    assert listing(tmp_path) == ["afile"] and (tmp_path / "afile").read_bytes() == b"mine"


def _chunk_partials(out: Path) -> list[Path]:
    try:
        return list(out.glob(".vsr-chunks/*/.00000.vsr-partial-*"))
    except FileNotFoundError:  # a chunk folder renamed into place between the glob's listing and its scan of it
        return []


def test_a_chunk_folder_swapped_for_a_link_while_its_chunk_computes_fails_the_job_in_one_line(vsr, runner, make_clip,
                                                                                              tmp_path):
    src = make_clip("in.mkv", width=48, height=32, frames=24)
    store, out, victim = tmp_path / "q.db", tmp_path / "out", tmp_path / "victim"
    victim.mkdir()
    rc, _, err = vsr("jobs", "add", src, "--out-dir", out, "--store", store, "--codec", "ffv1", *TINY)
    assert rc == 0, err
    with running_worker(runner, store, tmp_path / "worker.err") as worker:
        deadline = time.monotonic() + 120
        while not (partials := _chunk_partials(out)):
            assert worker.is_alive() and time.monotonic() < deadline, "the chunk never started"
            time.sleep(0.002)
        os.kill(worker.pid, signal.SIGSTOP)  # mid-chunk: its encoder writes into the open folder
        key = partials[0].parent
        shutil.rmtree(key)
        key.symlink_to(victim)
        os.kill(worker.pid, signal.SIGCONT)
    werr = (tmp_path / "worker.err").read_text()
    assert worker.exitcode == 1, werr  # the job it ran failed (issue 37)
    assert "Traceback" not in werr and "FileNotFoundError" not in werr, werr
    assert f"vsr: job 1 failed: the chunk folder {key} was deleted while the job used it" in werr
    rows = json.loads(vsr("jobs", "list", "--json", "--store", store)[1])
    assert rows[0]["state"] == "failed" and rows[0]["error"].startswith("the chunk folder ")
    assert listing(victim) == [] and not (out / src.name).exists()


# ---- 7: vsr models fetch ----------------------------------------------------------------------------------

@contextmanager
def serving(monkeypatch, data: bytes, modes: tuple[str, ...] = ()):
    """A server on 127.0.0.1 with ``data`` at ``/b.pth`` (its requests answered by ``modes`` first), and the
    catalogue holding it as ``tiny``: ``(server, catalogue entry)``."""
    with FileServer() as srv:
        srv.files = {"/b.pth": Served(data, modes=list(modes))}
        use(monkeypatch, e := entry("tiny", data, [srv.url("/b.pth")]))
        yield srv, e


def test_a_part_longer_than_the_file_is_started_over(cache, monkeypatch, capsys, tiny):
    data = tiny[1]
    with serving(monkeypatch, data) as (srv, e):
        cache.mkdir()
        (cache / (e.filename + ".part")).write_bytes(data + b"the rest of some other file")
        code, out, err = fetch_cli(capsys, "tiny")
        assert code == 0, err
        assert [(r.status, r.range) for r in srv.requests] == [(416, f"bytes={len(data) + 27}-"), (200, None)]
    assert listing(cache) == [e.filename] and (cache / e.filename).read_bytes() == data


def test_a_proxys_garbage_is_cut_short_and_escaped(cache, monkeypatch, capsys, tiny):
    with serving(monkeypatch, tiny[1], ("proxy",)):
        code, _, err = fetch_cli(capsys, "tiny")
    assert code == 1
    line = one_error(err, "127.0.0.1: HTTP 502 upstream \\x1b[2J\\x1b[31mfailed\u00e9 garbage", " garb...); ")
    assert "\x1b" not in line and len(line) < len(PROXY_GARBAGE) // 2, line
    assert not cache.exists()


def test_a_timeout_out_of_range_names_the_range(vsr, tmp_path):
    rc, _, err = vsr("models", "fetch", "edvr-m-reds", "--timeout", "1e30",
                     env={"VSR_WEIGHTS_DIR": str(tmp_path / "cache")})
    assert rc == 2
    one_error(err, "--timeout must be a number of seconds above 0 and below 86400", "'1e30'")
    assert listing(tmp_path) == []


def test_a_failed_download_leaves_no_folder_and_says_how_to_install_a_copy(tmp_path, monkeypatch, capsys, tiny):
    deep = tmp_path / "cache" / "vsr" / "weights"
    monkeypatch.setenv("VSR_WEIGHTS_DIR", str(deep))
    with FileServer() as srv:
        use(monkeypatch, e := entry("lost", tiny[1], [srv.url("/gone.pth")]))
        code, _, err = fetch_cli(capsys, "lost")
    assert code == 1
    one_error(err, "127.0.0.1: HTTP 404", f"a copy downloaded elsewhere (a browser, another machine: "
                                          f"{srv.url('/gone.pth')}) works as well: put it at {deep / e.filename}")
    assert listing(tmp_path) == []


def test_a_garbage_file_at_the_cache_path_is_listed_corrupt_and_fetch_replaces_it(cache, monkeypatch, capsys, tiny):
    data = tiny[1]
    with serving(monkeypatch, data) as (_, e):
        cache.mkdir()
        (cache / e.filename).write_bytes(os.urandom(1000))
        assert main(["models"]) == 0
        text = capsys.readouterr().out
        assert f"{e.filename}; corrupt: {cache / e.filename} is not the published file" in text
        assert "`vsr models fetch tiny` replaces it" in text and "downloaded: " not in text
        assert f"A copy downloaded elsewhere (a browser, another machine) works as well: put it in {cache}" in text
        assert main(["models", "--json"]) == 0
        listed = json.loads(capsys.readouterr().out)["official"]
        assert [(o["state"], o["path"]) for o in listed] == [("corrupt", None)]
        code, out, err = fetch_cli(capsys, "tiny")
        assert code == 0 and "already there" not in out, err
    assert (cache / e.filename).read_bytes() == data
    assert main(["models", "--json"]) == 0
    assert [o["state"] for o in json.loads(capsys.readouterr().out)["official"]] == ["downloaded"]


# ---- 11: misspelt commands and options ----------------------------------------------------------------------

@pytest.mark.parametrize("args, said", [
    (["upscal", "IN", "OUT"], "invalid choice: 'upscal' (choose from 'upscale', 'preview', 'export', 'eval', "
                              "'models', 'train', 'report', 'bench', 'jobs') (did you mean 'upscale'?)"),
    (["upscale", "IN", "OUT", "--crff", "20"], "unrecognized arguments: --crff 20 (did you mean '--crf'?)"),
    (["upscale", "IN", "OUT", "--frame", "0:2"], "unrecognized arguments: --frame 0:2 (did you mean '--frames'?)"),
    (["jobs", "ad", "IN"], "invalid choice: 'ad' (choose from 'add', 'list', 'run', 'cancel', 'retry', 'report') "
                           "(did you mean 'add'?)"),
    (["models", "fetc", "x"], "invalid choice: 'fetc' (choose from 'fetch') (did you mean 'fetch'?)")])
def test_a_misspelt_command_or_option_gets_the_closest_one_and_is_never_taken_for_it(vsr, clip, tmp_path, args,
                                                                                      said):
    before = listing(tmp_path)
    rc, _, err = vsr(*[{"IN": clip, "OUT": tmp_path / "out.mkv"}.get(a, a) for a in args])
    assert rc == 2
    one_error(err, said)
    assert listing(tmp_path) == before


# ---- 13: vsr jobs run and list beside a worker ----------------------------------------------------------

def test_jobs_list_reads_past_a_writers_open_transaction_without_importing_the_model(vsr, clip, tmp_path):
    store = tmp_path / "q.db"
    rc, _, err = vsr("jobs", "add", clip, "--out-dir", tmp_path / "out", "--store", store, *TINY)
    assert rc == 0, err
    writer = sqlite3.connect(store, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # what a worker's claim or heartbeat holds, here held on
    writer.execute("UPDATE jobs SET state = 'cancelled'")
    try:  # a fresh process, not the runner's (which has torch loaded already)
        code = ("import json, sys; from vsr.cli import main; rc = main(sys.argv[1:]); "
                "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'onnxruntime'))))")
        p = subprocess.run([sys.executable, "-c", code, "jobs", "list", "--store", store], cwd=tmp_path,
                           capture_output=True, text=True, timeout=120,
                           env={**os.environ, "PYTHONPATH": str(REPO), "VSR_JOBS_BUSY_TIMEOUT": "0.5"})
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert p.returncode == 0 and p.stderr == "", p.stderr
    table, imported = p.stdout.rsplit("\n", 2)[:2]
    assert re.search(r"^1 +queued +0% \(0/4\)", table, re.M), table  # the last committed state, at once
    assert json.loads(imported) == []


def test_jobs_run_says_frames_fps_eta_and_jobs_left_and_list_answers_meanwhile(vsr, runner, make_clip, tmp_path):
    a = make_clip("a.mkv", width=16, height=12, frames=6, seed=1)
    b = make_clip("b.mkv", width=16, height=12, frames=2, seed=2)
    store = tmp_path / "q.db"
    rc, _, err = vsr("jobs", "add", a, b, "--out-dir", tmp_path / "out", "--chunk-frames", 3, "--store", store,
                     "--codec", "ffv1", *TINY)
    assert rc == 0, err
    states = set()
    with running_worker(runner, store, tmp_path / "worker.err") as worker:
        while worker.is_alive():  # `list` beside the worker: every one answers (the store is never locked)
            rc, out, err = vsr("jobs", "list", "--json", "--store", store)
            assert rc == 0 and err == "", err
            states.add(json.loads(out)[0]["state"])
    werr = (tmp_path / "worker.err").read_text()
    assert worker.exitcode == 0, werr
    assert states & {"queued", "running", "done"}
    done = [ln for ln in werr.splitlines() if " done in " in ln]
    pattern = r"vsr: job (\d) chunk (\d) \(frames \d+:\d+\) done in [\d.]+ s(?: \([^)]*\))?; (\d+)/(\d+) frames " \
              r"of job \1, [\d.]+ fps(, ETA \d+:\d\d:\d\d)?; (\d other jobs? left|no other job left)$"
    said = [re.match(pattern, ln) for ln in done]
    assert all(said) and len(said) == 3, done
    assert [(m[1], m[3], m[4], m[5] is not None, m[6]) for m in said] == [
        ("1", "3", "6", True, "1 other job left"), ("1", "6", "6", False, "1 other job left"),
        ("2", "2", "2", False, "no other job left")]
