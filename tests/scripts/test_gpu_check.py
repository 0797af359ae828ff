"""``scripts/gpu_check.py --device cpu --quick``: every check of the GPU verification runs on the CPU emulation
(EDVR-tiny, tiny sizes), so the command that turns a rare GPU session into numbers cannot rot unseen; the memory
cases, which need a GPU, run on stand-ins for torch.cuda's memory calls."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from tests.data import CALENDAR

REPO = Path(__file__).resolve().parents[2]
CALENDAR_LR = CALENDAR / "lr"


def test_gpu_check_quick_runs_every_check_on_the_cpu(tmp_path):
    data = tmp_path / "data" / "frames"
    data.mkdir(parents=True)
    for p in sorted(CALENDAR_LR.glob("*.png"))[:5]:  # real frames (shipped too)
        shutil.copy(p, data)
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "scripts/gpu_check.py", "--out", str(out), "--data", str(data.parent),
                        "--device", "cpu", "--quick"], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    report = json.loads((out / "gpu_check.json").read_text())
    checks = {c["name"]: c for c in report["checks"]}
    # the figures a lent window must bring back first, first
    assert list(checks) == ["versions", "edvr_m_speed", "memory", "e2e", "backends", "kernel_accuracy", "upscale",
                            "kernel_speed"]
    assert report["complete"] is True
    assert all(c["status"] == "ok" for c in checks.values()), [c.get("error") for c in checks.values()]
    assert all(case["ok"] for case in checks["kernel_accuracy"]["result"]["cases"])
    assert all(case["finite"] and case["ok"] for case in checks["backends"]["result"]["cases"])
    speed = checks["edvr_m_speed"]["result"]
    assert speed["features"] == "streaming" and speed["memory_format"] == "channels_last"
    peers = speed["peer"]["cases"]
    assert len(peers) == len(speed["cases"]) and all(c["ms_per_frame"] > 0 for c in peers)
    assert speed["per_window"]["features"] == "per-window"
    steps = set(speed["per_step_ms"])
    assert {"features", "segment_0", "dcn:pcd_align.cas_dcnpack", "shuffle:pixel_shuffle#1"} <= steps
    kernels = speed["kernels"]  # where the time went, by kind: on the emulation torch's operators, mostly its convs
    assert kernels["what"] == "CPU operators (self time)" and kernels["frames"] == 3
    assert next(iter(kernels["by_kind_ms_per_frame"])) == "convolution"
    assert sum(kernels["by_kind_ms_per_frame"].values()) == pytest.approx(kernels["ms_per_frame"], rel=0.01)
    top = kernels["top"]
    assert top[0]["kind"] == "convolution" and top[0]["calls_per_frame"] >= 20  # EDVR's convs, per steady frame
    assert [r["ms_per_frame"] for r in top] == sorted((r["ms_per_frame"] for r in top), reverse=True)
    assert checks["upscale"]["result"]["max_level_difference"] <= 1
    if importlib.util.find_spec("triton") is not None:  # the one-kernel DCN: in the kernel checks and the model
        assert [c["gemm"] for c in checks["kernel_accuracy"]["result"]["cases"]].count("fused") == 2
        assert all(c["vsr_fused_ms"] > 0 for c in checks["kernel_speed"]["result"]["cases"])
        [fused] = speed["fused_dcn"]["cases"]
        assert fused["dcn_gemm"] == "fused" and fused["ms_per_frame"] > 0 and fused["download"] == "planes yuv420p"
    else:
        assert speed["fused_dcn"]["skipped"].startswith("dcn_gemm 'fused' needs Triton")
    assert all(c["download"] == "planes yuv420p" for c in speed["cases"])  # what a run downloads, not RGB
    assert all(c["pipelined_ms_per_frame"] > 0 for c in speed["cases"])  # as the infer stage queues them
    e2e = checks["e2e"]["result"]
    [run] = e2e["runs"]  # the CPU emulation makes the output's planes on its "device"
    assert run["frames"] == 3 and run["fps"] > 0 and 0 < run["e2e_over_inference"] <= 1.5
    assert 0 < run["e2e_over_bottleneck"] <= 1.5 and run["encode_fps"] > 0
    assert e2e["fps"] == run["fps"] and e2e["e2e_over_bottleneck"] == run["e2e_over_bottleneck"]
    assert run["download"] == "planes yuv420p" and run["encoder"] == "libx264"
    assert set(run["dcn"].values()) == {"torch"}  # 'auto' on the CPU emulation: nothing to time, the torch form
    assert [s["stage"] for s in run["stages"]][-3:] == ["infer", "post", "encode"]
    logged = [json.loads(line)["name"] for line in (out / "gpu_check.log").read_text().splitlines()]
    assert logged == list(checks)  # a line per check, as it ended
    assert sorted(p.name for p in out.iterdir()) == ["gpu_check.json", "gpu_check.log"]  # nothing else left


def test_a_run_killed_midway_leaves_the_json_of_every_check_that_finished(tmp_path, monkeypatch):
    """The JSON is rewritten after each check: a run killed at the device call's limit still returns them."""
    monkeypatch.syspath_prepend(str(REPO / "scripts"))
    import gpu_check

    def killed(ctx):
        raise SystemExit(137)  # not an Exception: nothing after it runs, as when the process is killed

    monkeypatch.setattr(gpu_check, "check_memory", killed)
    out = tmp_path / "out"
    with pytest.raises(SystemExit):
        gpu_check.main(["--out", str(out), "--device", "cpu", "--quick", "--checks", "versions,memory,e2e"])
    report = json.loads((out / "gpu_check.json").read_text())
    assert report["complete"] is False and [c["name"] for c in report["checks"]] == ["versions"]
    assert report["checks"][0]["status"] == "ok" and report["checks"][0]["result"]["torch"] == torch.__version__


def test_e2e_rates_are_over_the_same_span_as_its_fps(make_clip, tmp_path, tiny_backend, monkeypatch):
    """``e2e``'s fps is the report's steady rate (after the first frames, the flush included): the infer stage's
    and the encoder's own rates it is compared with are over that span too (``steady.stages``), not the whole
    run, where x264's buffered start makes the encoder look faster than it is. Which of the two is faster on a
    16-frame clip is the machine's timing, not asserted (a fresh-clone CI run had the span faster)."""
    monkeypatch.syspath_prepend(str(REPO / "scripts"))
    import gpu_check
    from vsr.pipeline import upscale
    from vsr.video import EncoderSettings

    report = upscale(make_clip("f.mp4", frames=16, width=32, height=24), tmp_path / "out.mp4",
                     backend=tiny_backend, encoder=EncoderSettings(codec="libx264", preset="medium")).to_dict()
    run = gpu_check._e2e_summary(report)
    span = report["steady"]["stages"]
    assert run["rates_over"] == "the steady span" and run["fps"] == report["steady"]["fps"]
    assert run["encode_fps"] == pytest.approx(span["encode"]["items"] / span["encode"]["busy_s"])
    assert run["infer_fps"] == pytest.approx(span["infer"]["items"] / span["infer"]["busy_s"])
    whole = {s["name"]: s for s in report["stages"]}
    assert run["encode_fps_whole_run"] == pytest.approx(whole["encode"]["items"] / whole["encode"]["busy_s"])
    assert 0 < span["encode"]["items"] < whole["encode"]["items"]  # the span leaves the first frames out
    slowest = min(run["infer_fps"], run["encode_fps"])
    assert run["e2e_over_bottleneck"] == pytest.approx(run["fps"] / slowest)
    report["steady"].pop("stages")  # a report without them (older runs): the whole run's rates, said so
    old = gpu_check._e2e_summary(report)
    assert old["rates_over"] == "the whole run" and old["encode_fps"] == run["encode_fps_whole_run"]


def test_the_speed_case_s_windows_are_stacked_before_the_timing(monkeypatch):
    """``edvr_m_speed`` times what a run's infer stage does with a batch: the windows are stacked beforehand (as
    the batch stage and the peer's case do), each call's array names the frames its keys say."""
    monkeypatch.syspath_prepend(str(REPO / "scripts"))
    import gpu_model

    calls = []
    backend = SimpleNamespace(num_frame=5, keeps_features=True,
                              submit=lambda x, keys: calls.append((x, keys)))
    frames = np.random.default_rng(0).random((8, 3, 4, 6), dtype=np.float32)
    for batch in (1, 3):
        calls.clear()
        sliding = gpu_model.Sliding(backend, frames, batch)
        stacked = {id(a) for a in sliding._arrays.values()}
        for _ in range(20):
            sliding.submit()
        for x, keys in calls:
            assert id(x) in stacked and x.shape == (batch, 5, 3, 4, 6)
            for n, row in enumerate(keys.frames):
                assert np.array_equal(x[n], frames[[f % 8 for f in row]])
            assert keys.keep_from == keys.frames[-1][2] + 1 - 2  # the next window's centre minus r
        assert [k.frames[0][0] for _, k in calls] == list(range(0, 20 * batch, batch))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without a GPU")
def test_gpu_check_without_a_gpu_is_one_line(tmp_path):
    r = subprocess.run([sys.executable, "scripts/gpu_check.py", "--out", str(tmp_path / "o")], capture_output=True,
                       text=True, cwd=REPO)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("gpu_check: error: --device cuda but torch sees no GPU") and r.stderr.count("\n") == 1


def test_the_memory_cases_run_here_with_torch_cuda_s_memory_calls_stood_in(monkeypatch):
    """``memory`` runs only on a GPU: its cases run here on the CPU emulation, torch.cuda's memory calls stood in
    (zeros; there is no GPU) and the probe's figures given, so a GPU session does not meet a slip in them."""
    monkeypatch.syspath_prepend(str(REPO / "scripts"))
    import gpu_model
    from vsr.backends.cuda.runtime import CudaTorchBackend

    for name in ("synchronize", "memory_allocated", "memory_reserved", "reset_peak_memory_stats",
                 "max_memory_allocated", "max_memory_reserved", "empty_cache"):
        monkeypatch.setattr(torch.cuda, name, lambda *a, **k: 0)
    probe = {"name": "stand-in", "free_mb": 1000.0, "bytes_per_pixel": 2000.0, "fixed_mb": 10.0}
    monkeypatch.setattr(CudaTorchBackend, "device_memory", lambda self: probe)
    rng = np.random.default_rng(0)
    ctx = SimpleNamespace(device=torch.device("cpu"), gpu=False, speed_config="edvr-tiny", repeats=1,
                          frames=lambda n, h, w: (rng.random((n, 3, h, w), dtype=np.float32), "synthetic"))
    row = gpu_model.memory_case(ctx, "fp16", 16, 16, 2)
    assert row["plan_mib"] == pytest.approx(10.0 + 2000.0 * 512 / 2**20 + row["kept_features_mib"])
    assert row["kept_features_mib"] > 0 and row["within_plan"] and row["graphs"]["graphs"] == 0  # no graphs here
    together = gpu_model.shapes_case(ctx, [(16, 16, 1), (16, 20, 2)], {})
    assert together["kept"] == [] and together["bound_mib"] == 0.0
