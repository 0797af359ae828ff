"""The reports of real tiny runs, made once for the report tests: one 5-frame clip upscaled on the whole-model
plan, the split plan, and the split plan with batches of 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import Clip, write_clip

TINY = ["--weights", "random", "--config", "edvr-tiny", "--backend", "ort", "--threads", "1", "--quiet"]
RUNS = {"whole": ["--plan", "whole"], "split": ["--plan", "split"], "split2": ["--plan", "split", "--batch", "2"]}


def vsr(*args) -> subprocess.CompletedProcess:
    """``python -m vsr ARGS`` in a child process, its output captured."""
    return subprocess.run([sys.executable, "-m", "vsr", *map(str, args)], capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="package")
def runs(tmp_path_factory) -> dict[str, Path]:
    """``{"whole" | "split" | "split2": the run report (JSON) of that plan}``, all of the same clip."""
    d = tmp_path_factory.mktemp("runs")
    clip = write_clip(d / "in.mp4", Clip(width=24, height=16, frames=5))
    out = {}
    for name, extra in RUNS.items():
        out[name] = d / f"{name}.json"
        res = vsr("upscale", clip, d / f"{name}.mp4", *TINY, *extra, "--report", out[name])
        assert res.returncode == 0, res.stderr
    return out
