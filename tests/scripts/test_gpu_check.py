"""``scripts/gpu_check.py --device cpu --quick``: every check of the GPU verification runs on the CPU emulation
(EDVR-tiny, tiny sizes), so the command that turns a rare GPU session into numbers cannot rot unseen."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
CALENDAR = REPO.parent / "shared" / "data" / "sequences" / "vid4" / "calendar" / "lr"


def test_gpu_check_quick_runs_every_check_on_the_cpu(tmp_path):
    data = tmp_path / "data" / "frames"
    data.mkdir(parents=True)
    for p in sorted(CALENDAR.glob("*.png"))[:5]:  # real frames where the shared data is; else synthesised
        shutil.copy(p, data)
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "scripts/gpu_check.py", "--out", str(out), "--data", str(data.parent),
                        "--device", "cpu", "--quick"], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    report = json.loads((out / "gpu_check.json").read_text())
    checks = {c["name"]: c for c in report["checks"]}
    assert list(checks) == ["versions", "kernel_accuracy", "kernel_speed", "backends", "edvr_m_speed", "memory",
                            "upscale", "e2e"]
    assert all(c["status"] == "ok" for c in checks.values()), [c.get("error") for c in checks.values()]
    assert all(case["ok"] for case in checks["kernel_accuracy"]["result"]["cases"])
    assert all(case["finite"] for case in checks["backends"]["result"]["cases"])
    assert checks["upscale"]["result"]["max_level_difference"] <= 1
    [run] = checks["e2e"]["result"]["runs"]  # the CPU emulation makes the output's planes on its "device"
    assert run["frames"] == 3 and run["fps"] > 0 and 0 < run["e2e_over_inference"] <= 1.5
    assert run["download"] == "planes yuv420p" and run["encoder"] == "libx264"
    assert [s["stage"] for s in run["stages"]][-3:] == ["infer", "post", "encode"]
    assert (out / "gpu_check.log").read_text().count('"name"') == 8
    assert sorted(p.name for p in out.iterdir()) == ["gpu_check.json", "gpu_check.log"]  # nothing else left


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without a GPU")
def test_gpu_check_without_a_gpu_is_one_line(tmp_path):
    r = subprocess.run([sys.executable, "scripts/gpu_check.py", "--out", str(tmp_path / "o")], capture_output=True,
                       text=True, cwd=REPO)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("gpu_check: error: --device cuda but torch sees no GPU") and r.stderr.count("\n") == 1
