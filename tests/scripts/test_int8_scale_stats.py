"""``scripts/int8_scale_stats.py``: ``record`` writes a real int8 run's measured ranges, and ``replay`` of the
rule that run used gives back the run's kept segment runs and re-runs where the run re-ran, fewer where an
upstream tensor's saturation had hidden a downstream one's for a pass (the replay knows each window's final
ranges at once): the figures the scale rule's values rest on come from replays."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np

REPO = Path(__file__).resolve().parents[2]


def test_record_then_replay_gives_back_the_run(tmp_path):
    frames = tmp_path / "frames"
    frames.mkdir()
    rng = np.random.default_rng(3)
    base = rng.integers(0, 256, (40, 48, 3)).astype(np.float32)
    for i in range(6):  # a drifting picture that brightens 5x at frame 3: ranges outgrow their prediction
        picture = base[i:i + 32, i:i + 40] * (0.2 if i < 3 else 1.0)
        cv2.imwrite(str(frames / f"{i:08d}.png"), picture.astype(np.uint8))
    trace = tmp_path / "t.jsonl"
    env = dict(os.environ, VSR_ENGINE_DIR=str(tmp_path / "engines"))
    run = subprocess.run([sys.executable, "scripts/int8_scale_stats.py", "record", str(trace), str(frames),
                          "--weights", "random", "--config", "edvr-tiny"], capture_output=True, text=True, cwd=REPO,
                         env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    runs, reruns = map(int, re.search(r"(\d+) segment runs, (\d+) re-runs", run.stdout).groups())
    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    assert "calibration" in lines[0] and lines[1] == {"context": [0], "anew": True}
    assert sum("names" in e for e in lines) == runs - reruns  # one line per kept run
    out = subprocess.run([sys.executable, "scripts/int8_scale_stats.py", "replay", str(trace), "--margin", "1.4",
                          "--start", "2", "--memory", "8"], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    replayed, replayed_runs = map(int, re.search(r"\|\s*t\s+(\d+)/\s*(\d+) ", out.stdout).groups())
    assert replayed_runs - replayed == runs - reruns and 0 < replayed <= reruns
    assert "first/calibration" in out.stdout
