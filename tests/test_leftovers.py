"""The hidden temporaries (``.NAME.vsr-partial-PID``) of runs killed outright (SIGKILL, power loss) are removed
when vsr next writes NAME (vsr.leftovers): only that exact name's, once its process is gone from this host and
it was not written for a day (a run on another host sharing the folder may be writing it), only this user's,
never through a link; by every writer."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vsr.leftovers import ABANDONED, files_only, remove_partials


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _left(path: Path, days: float = 1.5, data: bytes = b"partial") -> Path:
    """What a run killed outright left at ``path`` (a file), written ``days`` ago."""
    path.write_bytes(data)
    return _aged(path, days)


def _aged(path: Path, days: float) -> Path:
    t = time.time() - days * 86400
    os.utime(path, (t, t), follow_symlinks=False)
    return path


def test_only_the_exact_names_of_dead_runs_not_written_for_a_day_are_removed(tmp_path):
    dead, other = _dead_pid(), _dead_pid()
    target = tmp_path / "report.json"
    gone = [_left(tmp_path / f".report.json.vsr-partial-{pid}") for pid in (dead, other)]
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    kept = [
        _left(tmp_path / f".report.json.vsr-partial-{os.getppid()}"),  # a run still going
        _left(tmp_path / f".report.json.vsr-partial-0{dead}"),  # not the exact pattern
        _left(tmp_path / f".report.json.vsr-partial-{dead}.bak"),
        _left(tmp_path / f"report.json.vsr-partial-{dead}"),  # not hidden
        _left(tmp_path / f".report.jsonx.vsr-partial-{dead}"),  # another file's
        _left(tmp_path / f".other.json.vsr-partial-{dead}"),
    ]
    fresh = _left(tmp_path / f".report.json.vsr-partial-{_dead_pid()}", 0.5)  # maybe another host's, writing
    link = tmp_path / f".report.json.vsr-partial-{_dead_pid()}"
    link.symlink_to(victim)
    _aged(link, 2)
    folder = tmp_path / f".report.json.vsr-partial-{_dead_pid()}"  # a folder: no writer of a file makes one
    folder.mkdir()
    _aged(folder, 2)
    theirs = _left(tmp_path / f".report.json.vsr-partial-{_dead_pid()}")
    if os.geteuid() == 0:
        os.chown(theirs, 54321, -1)
        _aged(theirs, 1.5)
    else:
        kept.append(theirs)
    assert remove_partials(target) == sorted(p.name for p in gone)
    assert not any(os.path.lexists(p) for p in gone)
    assert all(p.is_file() for p in kept + [fresh]) and link.is_symlink() and folder.is_dir()
    assert victim.read_text() == "keep me\n" and (os.geteuid() != 0 or theirs.is_file())
    assert ABANDONED >= 86400


def test_a_folder_temporary_is_removed_only_where_its_writer_recognises_it(tmp_path):
    dead = _dead_pid()
    plan = tmp_path / f".plan.vsr-partial-{dead}-0123abcd"
    plan.mkdir()
    (plan / "segment00.onnx").write_bytes(b"x")
    (plan / "link").symlink_to(tmp_path / "elsewhere")  # not a plan's: kept
    _aged(plan, 2)
    assert remove_partials(tmp_path / "plan", tail="-[0-9a-f]{8}", folder=files_only) == [] and plan.is_dir()
    (plan / "link").unlink()
    _aged(plan, 2)
    assert remove_partials(tmp_path / "plan", tail="-[0-9a-f]{8}", folder=files_only) == [plan.name]
    assert not plan.exists()


def test_the_video_temporary_keeps_its_suffix_after_the_pid(tmp_path):
    dead = _dead_pid()
    video = _left(tmp_path / f".out.vsr-partial-{dead}.mp4")
    other = _left(tmp_path / f".out.vsr-partial-{dead}.mkv")
    assert remove_partials(tmp_path / "out.mp4", suffix=".mp4") == [video.name] and other.is_file()


def test_a_small_output_a_killed_run_left_is_removed_when_the_file_is_next_written(tmp_path):
    """``vsr upscale --report r.json`` killed with SIGKILL left ``.r.json.vsr-partial-PID`` beside the report for
    good: writing the report again now removes it."""
    from vsr.outfiles import write_file_output

    out = tmp_path / "r.json"
    script = ("import sys, os, vsr.outfiles as o\n"
              "def stuck(*a):\n    print('writing', flush=True); sys.stdin.read()\n"
              "o.interrupt.check = stuck\no.write_file_output(o.Path(sys.argv[1]), '{}')\n")
    killed = subprocess.Popen([sys.executable, "-c", script, str(out)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert killed.stdout.readline() == b"writing\n"
    finally:
        killed.kill()
        killed.wait()
    [left] = [p for p in tmp_path.iterdir() if p.name != "r.json"]
    assert left.name == f".r.json.vsr-partial-{killed.pid}" and not out.exists()
    write_file_output(out, "{}")
    assert left.exists()  # written a moment ago: maybe by a run on another host
    _aged(left, 1.5)
    write_file_output(out, "{}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_the_job_folder_and_its_files_remove_what_killed_runs_left(tmp_path):
    from vsr.jobs.folder import CHUNKS_FOLDER, MARKER, ChunkFolder

    (tmp_path / "out").mkdir()
    chunks = tmp_path / "out" / CHUNKS_FOLDER
    chunks.mkdir()
    dead = _dead_pid()
    key_left = chunks / f".k1.vsr-partial-{dead}"
    key_left.mkdir()
    (key_left / MARKER).write_text("k1")
    _aged(key_left, 2)
    with ChunkFolder.open(tmp_path / "out" / "o.mp4", "k1", create=True) as folder:
        assert not key_left.exists() and (chunks / "k1" / MARKER).read_text() == "k1"
        left = _left(chunks / "k1" / f".00000.json.vsr-partial-{dead}")
        folder.write_text("00000.json", "{}")
    assert not left.exists()
    assert sorted(os.listdir(chunks / "k1")) == [MARKER, "00000.json"]


def test_shipped_weights_and_their_record_remove_what_killed_runs_left(tmp_path):
    from vsr.train.ship import _publish

    out = tmp_path / "w.pth"
    dead = _dead_pid()
    lefts = [_left(tmp_path / f".{n}.vsr-partial-{dead}") for n in ("w.pth", "w.json", "w.json.next")]
    _publish({"x": 1}, {"iteration": 1}, out)
    assert sorted(os.listdir(tmp_path)) == ["w.json", "w.pth"] and not any(p.exists() for p in lefts)


@pytest.mark.parametrize("split", [False, True])
def test_an_export_removes_what_killed_exports_left(tmp_path, split):
    from vsr.cli.export import Staged

    dead = _dead_pid()
    model = _left(tmp_path / f".m.onnx.vsr-partial-{dead}")
    plan = tmp_path / f".p.vsr-partial-{dead}-0123abcd"
    plan.mkdir()
    (plan / "manifest.json").write_text("{}")
    _aged(plan, 2)
    staged = Staged(tmp_path / "m.onnx", tmp_path / "p" if split else None)
    staged.clean()
    assert not model.exists() and plan.exists() != split
