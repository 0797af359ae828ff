"""`vsr train` from the command line: flags reach the options, a bad name is one line and exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]


def vsr_train(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vsr", "train", *map(str, args)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("flag, value, choices", [
    ("--loss", "L1", "charbonnier, l1"),
    ("--weight-init", "identiy", "identity, he, torch"),
])
def test_a_bad_name_is_one_line_and_exit_2(make_clip, tmp_path, flag, value, choices):
    clip = make_clip("c.mp4", width=48, height=40, frames=6)
    out = tmp_path / "run"
    r = vsr_train("--config", "edvr-tiny", "--data", clip, "--iters", 2, "--out", out, flag, value)
    assert r.returncode == 2, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("vsr: error: invalid training option") and repr(value) in line and choices in line
    assert not out.exists()


def test_a_short_run_takes_the_flags(make_clip, tmp_path):
    clip = make_clip("c.mp4", width=48, height=40, frames=6)
    out = tmp_path / "run"
    r = vsr_train("--config", "edvr-tiny", "--data", clip, "--iters", 2, "--out", out, "--batch-size", 1,
                  "--patch", 8, "--loss", "l1", "--weight-init", "he", "--warmup", 1, "--val", "none",
                  "--threads", 1, "--workers", 0, "--no-progress")
    assert r.returncode == 0, r.stderr
    options = torch.load(out / "latest.pth", weights_only=True)["vsr"]["options"]
    assert (options["loss"], options["weight_init"], options["lr_patch"], options["batch_size"]) == ("l1", "he", 8, 1)
    assert options["val"] == [] and "vid4" in options["exclude"] and options["workers"] == 0


def test_flags_left_out_give_the_library_defaults():
    from dataclasses import fields

    from vsr.cli import build_parser
    from vsr.cli.train import train_options
    from vsr.train import TrainOptions

    o = train_options(build_parser().parse_args(["train", "--config", "edvr-tiny", "--data", "d", "--iters", "5"]))
    plain = TrainOptions(config="edvr-tiny", data=("d",), out=o.out, iters=5)
    assert o == plain, [f.name for f in fields(o) if getattr(o, f.name) != getattr(plain, f.name)]
    assert o.out == "runs/edvr-tiny"
