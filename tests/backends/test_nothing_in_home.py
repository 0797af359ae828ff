"""A run on ONNX Runtime writes nothing into the user's home: ORT 1.32's Linux build made
``~/.cache/Microsoft/DeveloperTools/.onnxruntime/{deviceid,onnxruntime.db}`` (its 1DS telemetry) at import."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_an_onnx_runtime_run_leaves_the_home_folder_as_it_was(make_clip, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    clip = make_clip("c.mp4", width=24, height=16, frames=2)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "ORT_"))}
    env.update(HOME=str(home), VSR_ENGINE_DIR=str(tmp_path / "engines"))
    res = subprocess.run([sys.executable, "-m", "vsr", "upscale", clip, tmp_path / "o.mp4", "--weights", "random",
                          "--config", "edvr-tiny", "--backend", "ort", "--threads", "1", "--quiet"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    assert list(home.rglob("*")) == []
