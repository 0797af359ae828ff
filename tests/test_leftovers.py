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


def _killed_with_temp_folder(tmp_path: Path, prefix: str) -> Path:
    """The temp folder ``prefix`` a run SIGKILLed while it held one left in the system temp folder (TMPDIR)."""
    script = f"from vsr.leftovers import temp_folder\nprint(temp_folder({prefix!r}), flush=True)\ninput()\n"
    killed = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              env={**os.environ, "TMPDIR": str(tmp_path)})
    try:
        left = Path(killed.stdout.readline().decode().strip())
        (left / "model.onnx").write_bytes(b"x" * 1000)
    finally:
        killed.kill()
        killed.wait()
    assert left.parent == tmp_path and left.name.startswith(f"{prefix}{killed.pid}-") and left.is_dir()
    return left


@pytest.mark.parametrize("prefix", ["vsr-qdq-", "vsr-int8-account-"])
def test_the_temp_folders_of_killed_runs_are_removed_by_the_next_run(tmp_path, monkeypatch, prefix):
    """``vsr export --int8`` (``vsr-qdq-*``) or the int8 accounting (``vsr-int8-account-*``) killed outright
    left its temp folder, ONNX models, in /tmp for good: the next run making one removes it, once it did not
    change for an hour (a process of another pid namespace sharing /tmp may own it)."""
    import tempfile

    from vsr import leftovers
    from vsr.bench.int8_account import _alone
    from vsr.quant.qdq import export_int8_qdq

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    left = _killed_with_temp_folder(tmp_path, prefix)
    victim = tmp_path / "victim"
    victim.mkdir()
    (tmp_path / f"{prefix}{_dead_pid()}-abcd1234").symlink_to(victim, target_is_directory=True)
    alive_ones = tmp_path / f"{prefix}{os.getppid()}-abcd1234"
    alive_ones.mkdir()
    other = tmp_path / f"vsr-other-{_dead_pid()}-abcd1234"
    other.mkdir()

    def run():
        with pytest.raises(Exception):
            if prefix == "vsr-qdq-":
                export_int8_qdq(tmp_path / "missing.onnx", tmp_path / "out.onnx")
            else:
                _alone({}, {}, None, 1, print)

    run()
    assert left.is_dir()  # changed a moment ago
    monkeypatch.setattr(leftovers, "TEMP_ABANDONED", 0)
    run()
    assert not left.exists() and victim.is_dir() and alive_ones.is_dir() and other.is_dir()
    link = tmp_path / next(n for n in os.listdir(tmp_path) if n.endswith("abcd1234") and n.startswith(prefix)
                           and (tmp_path / n).is_symlink())
    assert sorted(n for n in os.listdir(tmp_path) if n.startswith(prefix)) == sorted([link.name, alive_ones.name])


def test_an_old_frames_folder_a_killed_overwrite_left_aside_is_removed_when_the_output_is_next_written(
        tmp_path, monkeypatch):
    """``vsr upscale in.mp4 frames/ --overwrite`` killed between renaming the old frames aside and removing them
    left the whole old output hidden (``.frames.vsr-old-PID``) for good: the next write of ``frames`` removes it,
    once it was renamed a day ago (its change time: the rename kept the old frames' modification time)."""
    from vsr import leftovers
    from vsr.video.output import MARKER, remove_stale_partials

    dst, new = tmp_path / "frames", tmp_path / ".frames.vsr-partial-1"
    for folder in (dst, new):
        folder.mkdir()
        (folder / MARKER).write_text("")
        (folder / "00000001.png").write_bytes(b"png")
    script = ("import sys, shutil, vsr.video.output as o\n"
              "def stuck(*a, **k):\n    print('removing', flush=True); sys.stdin.read()\n"
              "o.shutil.rmtree = stuck\n"
              "o.commit_output(o.Path(sys.argv[1]), o.Path(sys.argv[2]), o.Path(sys.argv[3]))\n")
    killed = subprocess.Popen([sys.executable, "-c", script, str(new), str(dst), str(tmp_path / "in.mp4")],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert killed.stdout.readline() == b"removing\n"
    finally:
        killed.kill()
        killed.wait()
    aside = tmp_path / f".frames.vsr-old-{killed.pid}"
    assert aside.is_dir() and sorted(os.listdir(tmp_path)) == [aside.name, "frames"]
    _aged(aside, 3)  # the old output's times: no sign of when it was renamed
    user = tmp_path / f".frames.vsr-old-{_dead_pid()}"  # not what vsr replaces: kept
    user.mkdir()
    (user / "notes.txt").write_text("mine")
    assert remove_stale_partials(dst, frames=True) == [] and aside.is_dir()  # renamed a moment ago
    monkeypatch.setattr(leftovers, "ABANDONED", 0)
    assert remove_stale_partials(dst, frames=True) == [aside] and not aside.exists()
    assert user.is_dir() and (dst / "00000001.png").is_file()


def test_an_old_plan_a_killed_export_left_aside_is_removed_by_the_next_export(tmp_path, monkeypatch):
    from vsr import leftovers
    from vsr.cli.export import Staged

    aside = tmp_path / f".p.vsr-old-{_dead_pid()}"
    aside.mkdir()
    (aside / "manifest.json").write_text("{}")
    Staged(tmp_path / "m.onnx", tmp_path / "p").clean()
    assert aside.is_dir()  # renamed a moment ago: maybe by an export on another host
    monkeypatch.setattr(leftovers, "ABANDONED", 0)
    Staged(tmp_path / "m.onnx", tmp_path / "p").clean()
    assert not aside.exists()


def test_the_other_writers_temporaries_use_the_one_name_and_are_removed(tmp_path, monkeypatch):
    """The bench's files (``.NAME.PID.part``), the export cache's (``.NAME.PID.HEX.part``), a CUDA cache folder's
    ``.facts.json.PID.tmp`` and a broker job's record (``.ID.PID.tmp``) a killed run left stayed for good."""
    import onnx

    from vsr.bench.output import _write_all
    from vsr.export.onnx import save_atomic

    dead = _dead_pid()
    bench = [_left(tmp_path / f".{n}.vsr-partial-{dead}") for n in ("summary.json", "summary.md")]
    _write_all({tmp_path / "summary.json": "{}", tmp_path / "summary.md": "#"})
    export = _left(tmp_path / f".m.onnx.vsr-partial-{dead}-0123abcd")
    save_atomic(onnx.ModelProto(), tmp_path / "m.onnx")
    assert not any(p.exists() for p in bench + [export])
    assert sorted(os.listdir(tmp_path)) == ["m.onnx", "summary.json", "summary.md"]

    _cuda_cache_and_job_records_lose(tmp_path, monkeypatch, f".facts.json.vsr-partial-{dead}",
                                     f".{'b' * 32}.json.vsr-partial-{dead}")


def test_the_names_older_vsr_gave_its_temporaries_are_removed_by_the_same_rule(tmp_path, monkeypatch):
    """Before ``.NAME.vsr-partial-PID`` the bench's files and report pages were ``.NAME.PID.part``, the export
    cache's ``.NAME.PID.HEX.part``, a CUDA cache folder's ``.facts.json.PID.tmp``, a broker job's record
    ``.ID.PID.tmp`` (TensorRT's engines: test_tensorrt_binding): what an older vsr killed outright left there
    stayed for good, as nothing looked for those names."""
    import onnx

    from vsr.bench.output import _write_all
    from vsr.export.onnx import save_atomic
    from vsr.outfiles import write_file_output

    dead = _dead_pid()
    victim = _left(tmp_path / "victim.txt", data=b"keep me\n")
    link = tmp_path / f".page.html.{_dead_pid()}.part"
    link.symlink_to(victim)
    _aged(link, 2)
    gone = [_left(tmp_path / f".{n}.{dead}.part") for n in ("summary.json", "summary.md", "page.html")]
    gone.append(_left(tmp_path / f".m.onnx.{dead}.0123abcd.part"))
    kept = [_left(tmp_path / f".page.html.{os.getppid()}.part"),  # a run still going
            _left(tmp_path / f".page.html.{_dead_pid()}.part", 0.5),  # written lately
            _left(tmp_path / f".page.html.{dead}.partial"), _left(tmp_path / f".page.html.{dead}.part.bak"),
            _left(tmp_path / f"page.html.{dead}.part"), _left(tmp_path / f".other.html.{dead}.part"),
            _left(tmp_path / f".m.onnx.{dead}.part"), _left(tmp_path / f".page.html.x{dead}.part")]
    _write_all({tmp_path / "summary.json": "{}", tmp_path / "summary.md": "#"})
    write_file_output(tmp_path / "page.html", "<html>")
    save_atomic(onnx.ModelProto(), tmp_path / "m.onnx")
    assert [p.name for p in gone if p.exists()] == []
    assert all(p.exists() for p in kept) and link.is_symlink() and victim.read_bytes() == b"keep me\n"

    _cuda_cache_and_job_records_lose(tmp_path, monkeypatch, f".facts.json.{dead}.tmp", f".{'b' * 32}.{dead}.tmp")


def _cuda_cache_and_job_records_lose(tmp_path, monkeypatch, manifest_name: str, record_name: str) -> None:
    """A CUDA cache folder's leftover ``manifest_name`` goes when its facts are written, a broker job's leftover
    record ``record_name`` (another job's) when a record is next kept; nothing else goes."""
    from vsr.backends.cuda.keys import DeviceFacts, cache_folder, runtime_key
    from vsr.jobs import ledger

    facts = DeviceFacts("cpu", None, None, None, "2", None, "ab")
    folder = tmp_path / "cuda" / f"cpu-{runtime_key(facts)}"
    folder.mkdir(parents=True, mode=0o700)
    manifest = _left(folder / manifest_name)
    assert cache_folder(facts, tmp_path / "cuda") == folder and os.listdir(folder) == ["facts.json"]
    assert not manifest.exists()

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    ledger.keep("redis://h/0", "a" * 32, "{}", [], str(tmp_path / "o.mp4"))
    records = _left(ledger.folder() / record_name)
    ledger.keep("redis://h/0", "c" * 32, "{}", [], str(tmp_path / "o.mp4"))
    assert not records.exists() and sorted(os.listdir(ledger.folder())) == [f"{'a' * 32}.json", f"{'c' * 32}.json"]


def test_the_pid_less_temporaries_of_vsr_older_still_go_by_age_alone(tmp_path):
    """mkstemp's ``.NAME.XXXXXXXX.part`` (an export's, a ``--qdq`` model's) and a TensorRT engine's ``.NAME.partial``
    hold no pid, and stayed for good: they go once not written for a day, the rule of every temporary on a folder
    shared with other hosts (no writer of vsr's, then or now, holds a lock to test)."""
    import onnx

    from vsr.export.onnx import save_atomic
    from vsr.leftovers import remove_old_partials

    victim = _left(tmp_path / "victim.txt", data=b"keep me\n")
    link = tmp_path / ".m.onnx.linkxx_1.part"
    link.symlink_to(victim)
    _aged(link, 2)
    gone = [_left(tmp_path / ".m.onnx.ab_c1x9z.part"), _left(tmp_path / ".e.engine.partial")]
    kept = [_left(tmp_path / ".m.onnx.ab_c1x9y.part", 0.5),  # written lately: maybe an older vsr writing it now
            _left(tmp_path / ".m.onnx.ab_c1x9zz.part"), _left(tmp_path / ".m.onnx.AB_C1X9Z.part"),  # not mkstemp's
            _left(tmp_path / ".n.onnx.ab_c1x9z.part"), _left(tmp_path / "m.onnx.ab_c1x9z.part"),  # another's, shown
            _left(tmp_path / ".e.engine.partial.bak"), _left(tmp_path / ".e.engine.x.partial")]
    save_atomic(onnx.ModelProto(), tmp_path / "m.onnx")
    remove_old_partials(tmp_path / "e.engine", ".partial", unnumbered="")  # (vsr.plan.tensorrt's call, no TensorRT)
    assert [p.name for p in gone if p.exists()] == []
    assert all(p.exists() for p in kept) and link.is_symlink() and victim.read_bytes() == b"keep me\n"


def test_a_write_probe_a_kill_left_goes_by_its_pid(tmp_path, make_clip):
    """``.vsr-write-test-PID`` lives between two system calls, but a kill can land there: nothing removed it."""
    from vsr.outfiles import check_writable
    from vsr.video.output import check_output

    clip = make_clip("in.mp4", width=32, height=24, frames=2)
    for folder, check in ((tmp_path / "a", lambda f: check_writable(f, "--out")),
                          (tmp_path / "b", lambda f: check_output(f / "out.mp4", clip, False))):
        folder.mkdir()
        gone = _left(folder / f".vsr-write-test-{_dead_pid()}", data=b"")
        kept = [_left(folder / f".vsr-write-test-{os.getppid()}", data=b""),  # a run still going
                _left(folder / f".vsr-write-test-{_dead_pid()}", 0.5, data=b"")]  # maybe another host's
        check(folder)
        assert not gone.exists() and all(p.exists() for p in kept)
