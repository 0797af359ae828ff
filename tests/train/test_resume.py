"""A resumed `vsr train`: `--data` is compared by the files it names, however it is spelled."""

from __future__ import annotations

import subprocess
import sys

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

