"""A resumed `vsr train`: `--data` is compared by the files it names, however it is spelled, and the log of a run
stopped between two checkpoints reads as one run (one rising sequence of iterations, the loss curve once)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from vsr.errors import InputError
from vsr.train import TrainOptions, Trainer


@pytest.fixture
def data(make_clip, tmp_path, monkeypatch):
    """Two clips in ``d``, the current folder ``tmp_path`` (relative spellings are relative to it)."""
    (tmp_path / "d").mkdir()
    make_clip("d/a.mp4", width=48, height=40, frames=10)
    make_clip("d/b.mp4", width=48, height=40, frames=10, seed=1)
    monkeypatch.chdir(tmp_path)
    return tmp_path / "d"


def options(data, out="run", **kw):
    base = dict(config="edvr-tiny", data=tuple(map(str, data)), out=str(out), iters=6, batch_size=2, lr_patch=8,
                lr=1e-3, warmup=2, val=(), ckpt_every=100, log_every=1, threads=1, segments_per_video=2, workers=0)
    base.update(kw)
    return TrainOptions(**base)


def _checkpoint_without_data_files(path):
    """``path`` as a checkpoint written before the checkpoints named their files."""
    ck = torch.load(path, weights_only=True)
    del ck["vsr"]["data_files"]
    torch.save(ck, path)


@pytest.mark.parametrize("spelling", [("d/",), ("./d",), ("ABS",), ("link",), ("d/a.mp4", "./d/b.mp4")])
@pytest.mark.parametrize("old_checkpoint", [False, True])
def test_a_run_resumes_with_its_data_spelled_otherwise(data, tmp_path, spelling, old_checkpoint):
    """(the check compared the option strings: `--data d` and `--data d/` were 'other options')"""
    (tmp_path / "link").symlink_to("d")
    Trainer(options(["d"])).run(stop_after=1, progress=False)
    if old_checkpoint:
        _checkpoint_without_data_files(tmp_path / "run" / "latest.pth")
    spelled = [str(data) if s == "ABS" else s for s in spelling]
    second = Trainer(options(spelled))
    assert second.resumed and second.state.iteration == 1
    second.run(stop_after=1, progress=False)
    assert torch.load(tmp_path / "run" / "latest.pth", weights_only=True)["train"]["iteration"] == 2


@pytest.mark.parametrize("old_checkpoint", [False, True])
@pytest.mark.parametrize("spelling, kw, named", [
    (("d/a.mp4",), {}, "data"),  # one file fewer
    (("d/b.mp4", "d/a.mp4"), {}, "data"),  # the same files in another order: other batches
    (("d",), {"exclude": ("vid4", "b.mp4")}, "exclude"),
    (("./d",), {"exclude": ("vid4", "b.mp4")}, "data, exclude"),
])
def test_a_run_refuses_to_resume_on_other_files(data, tmp_path, spelling, kw, named, old_checkpoint):
    Trainer(options(["d"])).run(stop_after=1, progress=False)
    if old_checkpoint:
        _checkpoint_without_data_files(tmp_path / "run" / "latest.pth")
    with pytest.raises(InputError, match=rf"written with other options \({named}\); use another --out"):
        Trainer(options(spelling, **kw))


def _checkpoint_without_data_stamps(path):
    """``path`` as a checkpoint written before the checkpoints gave their files' sizes and times."""
    ck = torch.load(path, weights_only=True)
    del ck["vsr"]["data_stamps"]
    torch.save(ck, path)


@pytest.mark.parametrize("edit, said", [
    ("reencoded", r"d/b\.mp4 is \d+ bytes, \d+ when it was written"),
    ("added", r"--data names 3 images and videos, 2 when it was written"),
    ("removed", r"--data names 1 images and videos, 2 when it was written"),
])
def test_a_run_refuses_to_resume_on_edited_data(data, make_clip, tmp_path, edit, said):
    """(the same --data with other content resumed silently: the run trained on other data than its first part)"""
    Trainer(options(["d"])).run(stop_after=1, progress=False)
    if edit == "reencoded":
        make_clip("d/b.mp4", width=48, height=40, frames=12, seed=1)
    elif edit == "added":
        make_clip("d/c.mp4", width=48, height=40, frames=10, seed=2)
    else:
        (data / "b.mp4").unlink()
    with pytest.raises(InputError, match=rf"^run/latest\.pth was written with other data \({said}\); use another "
                                         r"--out folder or the data it was trained on$"):
        Trainer(options(["d"]))


def test_a_file_modified_at_the_same_size_is_said_and_resumed(data, tmp_path):
    """A copy or a touch changes a file's time, not its bytes: said, not refused (a size alone is certain)."""
    Trainer(options(["d"])).run(stop_after=1, progress=False)
    st = os.stat(data / "a.mp4")
    os.utime(data / "a.mp4", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    with pytest.warns(UserWarning, match=r"^run/latest\.pth: d/a\.mp4 was modified since it was written \(same "
                                         r"size\); the resumed run trains on it as it is now$"):
        second = Trainer(options(["d"]))
    assert second.resumed and second.state.iteration == 1


def test_a_checkpoint_without_data_stamps_resumes_and_says_it_cannot_check(data, tmp_path):
    Trainer(options(["d"])).run(stop_after=1, progress=False)
    _checkpoint_without_data_stamps(tmp_path / "run" / "latest.pth")
    with pytest.warns(UserWarning, match=r"written before checkpoints gave their files' sizes and times: edits to "
                                         r"the data since it was written cannot be checked"):
        second = Trainer(options(["d"]))
    assert second.resumed


def test_the_refusal_is_one_line_and_exit_2(data, tmp_path):
    run = [sys.executable, "-m", "vsr", "train", "--config", "edvr-tiny", "--iters", "1", "--out", "run",
           "--batch-size", "1", "--patch", "8", "--val", "none", "--threads", "1", "--workers", "0", "--no-progress"]
    r = subprocess.run([*run, "--data", "d"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([*run, "--data", f"{data}/", "--iters", "2"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and "resuming at iteration 1" in r.stdout, r.stderr
    r = subprocess.run([*run, "--data", "d/a.mp4", "--iters", "3"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 2
    assert r.stderr.splitlines() == ["vsr: error: run/latest.pth was written with other options (data); use another "
                                     "--out folder or the same options"]


def test_a_checkpoint_a_kill_cut_goes_once_not_written_for_a_day(data, tmp_path):
    """``latest.tmp`` holds no pid: a run killed while saving, never resumed, left a checkpoint's worth for good."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "latest.tmp").write_bytes(b"half a checkpoint")
    os.utime(run / "latest.tmp", (time.time() - 2 * 86400,) * 2)
    (run / "best.tmp").write_bytes(b"maybe a run saving now")
    Trainer(options(["d"]))
    assert sorted(os.listdir(run)) == ["best.tmp"]


# -- the log -----------------------------------------------------------------------------------------------------

def events(run):
    return [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]


def curve(run):
    return [(e["iteration"], e["loss"]) for e in events(run) if e["event"] == "train"]


def interrupted_at(trainer, iteration, monkeypatch):
    """``trainer`` run until the step of ``iteration`` is interrupted (Ctrl-C: as a kill, after the checkpoint)."""
    batch = trainer.sampler.batch_uint8

    def interrupted(it):
        if it == iteration:
            raise KeyboardInterrupt
        return batch(it)

    monkeypatch.setattr(trainer.sampler, "batch_uint8", interrupted)
    with pytest.raises(KeyboardInterrupt):
        trainer.run(progress=False)


def test_a_run_stopped_between_two_checkpoints_logs_its_iterations_once(data, tmp_path, monkeypatch):
    """(its log held iterations 3 and 4 twice, a resume line between: a plotted loss curve went back)"""
    Trainer(options(["d"], "a")).run(progress=False)
    interrupted_at(Trainer(options(["d"], "b", ckpt_every=2)), 3, monkeypatch)  # checkpoint 2, logged 3
    assert [e.get("iteration") for e in events(tmp_path / "b")][-2:] == [2, 3]
    second = Trainer(options(["d"], "b", ckpt_every=2))
    second.run(progress=False)
    assert [(e["event"], e.get("iteration")) for e in events(tmp_path / "b") if e["event"] != "train"] == [
        ("start", None), ("batch_workers", 0), ("resume", 2), ("batch_workers", 2)]
    assert curve(tmp_path / "b") == curve(tmp_path / "a")
    assert sorted(os.listdir(tmp_path / "b")) == ["latest.pth", "log.jsonl"]


def test_a_line_half_written_by_a_kill_goes_with_the_cut(data, tmp_path, monkeypatch):
    Trainer(options(["d"], "a")).run(progress=False)
    interrupted_at(Trainer(options(["d"], "b", ckpt_every=2)), 3, monkeypatch)
    with open(tmp_path / "b" / "log.jsonl", "ab") as f:
        f.write(b'{"event": "train", "itera')  # (the resume line was appended to it: a line no reader parsed)
    os.chmod(tmp_path / "b" / "log.jsonl", 0o600)
    Trainer(options(["d"], "b", ckpt_every=2)).run(progress=False)
    assert curve(tmp_path / "b") == curve(tmp_path / "a")
    assert os.stat(tmp_path / "b" / "log.jsonl").st_mode & 0o777 == 0o600  # (the cut log keeps its permissions)


def test_a_failed_cut_leaves_the_log_as_it_was(data, tmp_path, monkeypatch):
    """The new log is written beside the old one and renamed over it: here it cannot be written at all."""
    interrupted_at(Trainer(options(["d"], "b", ckpt_every=2)), 3, monkeypatch)
    before = (tmp_path / "b" / "log.jsonl").read_bytes()
    (tmp_path / "b" / ".log.jsonl.part" / "x").mkdir(parents=True)  # (not a file: it cannot be replaced)
    with pytest.raises(OSError):
        Trainer(options(["d"], "b", ckpt_every=2)).run(progress=False)
    assert (tmp_path / "b" / "log.jsonl").read_bytes() == before


def test_a_run_killed_between_two_checkpoints_logs_as_one_run(data, tmp_path):
    """`kill -9` of `vsr train` between two checkpoints, then the same command: one rising log."""
    run = [sys.executable, "-m", "vsr", "train", "--config", "edvr-tiny", "--data", "d", "--out", "run",
           "--ckpt-every", "25", "--batch-size", "1", "--patch", "8", "--val", "none", "--threads", "1",
           "--workers", "0", "--no-progress"]
    log = tmp_path / "run" / "log.jsonl"
    p = subprocess.Popen([*run, "--iters", "100000"], cwd=tmp_path, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 240
        while '"iteration": 30,' not in (log.read_text() if log.is_file() else ""):  # (logged 30, checkpoint 25)
            assert time.time() < deadline and p.poll() is None
            time.sleep(0.05)
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    assert torch.load(tmp_path / "run" / "latest.pth", weights_only=True)["train"]["iteration"] == 25
    r = subprocess.run([*run, "--iters", "50"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "resuming at iteration 25" in r.stdout, r.stderr
    lines = events(tmp_path / "run")
    assert [e["iteration"] for e in lines if e["event"] == "train"] == [10, 20, 30, 40, 50]
    assert [(e["event"], e["iteration"]) for e in lines if e["event"] == "resume"] == [("resume", 25)]
    iterations = [e.get("iteration", 0) for e in lines]
    assert iterations == sorted(iterations)
