"""`vsr eval` end to end (subprocess) on Vid4 calendar frames; figures checked independently."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from tests.data import CALENDAR, needs
from tests.quality.test_metrics import ref_psnr, ref_ssim, ref_y

needs_calendar = needs(CALENDAR / "gt", CALENDAR / "lr")  # full-size GT: only in the shared data


def vsr_eval(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "vsr", "eval", *map(str, args)], capture_output=True, text=True,
                          timeout=300, env=env)


def read_rgb(path: Path) -> np.ndarray:
    return cv2.cvtColor(cv2.imread(str(path)), cv2.COLOR_BGR2RGB)


def bicubic_x4_reference(lr: np.ndarray) -> np.ndarray:
    """MATLAB bicubic x4 upsampling of uint8, written out directly: per output pixel, 4 taps, mirrored edges."""

    def axis_weights(n: int) -> tuple[np.ndarray, np.ndarray]:
        u = (np.arange(4 * n) + 0.5) / 4 - 0.5  # output centres in 0-based input coordinates
        first = np.floor(u).astype(int) - 1
        idx = first[:, None] + np.arange(4)
        t = np.abs(u[:, None] - idx)
        w = np.where(t <= 1, 1.5 * t**3 - 2.5 * t**2 + 1, -0.5 * t**3 + 2.5 * t**2 - 4 * t + 2)
        idx = np.where(idx < 0, -idx - 1, np.where(idx >= n, 2 * n - 1 - idx, idx))
        return idx, w / w.sum(1, keepdims=True)

    def to_u8(x: np.ndarray) -> np.ndarray:
        return np.floor(np.clip(x, 0, 255) + 0.5)

    ih, wh = axis_weights(lr.shape[0])
    iw, ww = axis_weights(lr.shape[1])
    rows = to_u8(np.einsum("ok,okwc->owc", wh, lr.astype(np.float64)[ih]))  # MATLAB: uint8 between passes
    return to_u8(np.einsum("ok,hokc->hoc", ww, rows[:, iw])).astype(np.uint8)


@needs_calendar
def test_bicubic_only_json_agrees_with_independent_computation():
    proc = vsr_eval("--lr", CALENDAR / "lr", "--gt", CALENDAR / "gt", "--frames", "0:3", "--weights", "bicubic",
                    "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["frames"] == 3 and out["model"] is None
    for rec, name in zip(out["bicubic"]["per_frame"], ("00000000.png", "00000001.png", "00000002.png")):
        assert rec["frame"] == name
        up, gt = bicubic_x4_reference(read_rgb(CALENDAR / "lr" / name)), read_rgb(CALENDAR / "gt" / name)
        assert rec["psnr_y"] == pytest.approx(ref_psnr(ref_y(up), ref_y(gt)), abs=0.01)
        assert rec["ssim_y"] == pytest.approx(ref_ssim(ref_y(up), ref_y(gt)), abs=0.0005)
        assert rec["psnr_rgb"] == pytest.approx(ref_psnr(up, gt), abs=0.01)
        assert rec["ssim_rgb"] == pytest.approx(ref_ssim(up, gt), abs=0.0005)
    per_frame = out["bicubic"]["per_frame"]
    assert out["bicubic"]["mean"]["psnr_y"] == pytest.approx(np.mean([r["psnr_y"] for r in per_frame]), abs=1e-9)
    assert 19.5 < out["bicubic"]["mean"]["psnr_y"] < 21.0  # calendar bicubic is ~20.4 dB on Y


@needs_calendar
def test_table_reports_model_and_bicubic_with_frame_count():
    proc = vsr_eval("--gt", CALENDAR / "gt", "--frames", "5", "--no-model")
    assert proc.returncode == 0, proc.stderr
    assert "1 frame" in proc.stdout and "LR made from GT" in proc.stdout
    header, row = proc.stdout.splitlines()[1:3]
    assert header.split() == ["PSNR-Y", "SSIM-Y", "PSNR-RGB", "SSIM-RGB"]
    assert row.split()[0] == "bicubic" and len(row.split()) == 5


@needs_calendar
def test_random_tiny_model_on_three_calendar_frames_returns_json(tmp_path):
    # a 160x160 GT window of 3 frames (LR 40x40) keeps the CPU model run short
    for sub, box in (("gt", (200, 360, 240, 400)), ("lr", (50, 90, 60, 100))):
        (tmp_path / sub).mkdir()
        for i in range(3):
            name = f"{i:08d}.png"
            img = cv2.imread(str(CALENDAR / sub / name))
            cv2.imwrite(str(tmp_path / sub / name), img[box[0]:box[1], box[2]:box[3]])
    proc = vsr_eval("--lr", tmp_path / "lr", "--gt", tmp_path / "gt", "--weights", "random", "--config", "edvr-tiny",
                    "--backend", "torch", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["frames"] == 3 and out["model"]["name"]
    assert len(out["model"]["per_frame"]) == 3
    for method in ("model", "bicubic"):
        assert all(math.isfinite(v) for v in out[method]["mean"].values())
        assert all(0 < r["ssim_rgb"] <= 1 for r in out[method]["per_frame"])


@pytest.mark.parametrize("case", ["missing_gt", "no_pngs", "count", "size", "frames_syntax", "default_weights"])
def test_bad_input_exits_2_with_one_line(tmp_path, case):
    gt = tmp_path / "gt"
    gt.mkdir()
    frame = np.zeros((32, 32, 3), np.uint8)
    for i in range(2):
        cv2.imwrite(str(gt / f"{i:08d}.png"), frame)
    lr = tmp_path / "lr"
    lr.mkdir()
    args = {
        "missing_gt": ["--gt", tmp_path / "nope", "--no-model"],
        "no_pngs": ["--gt", lr, "--no-model"],
        "count": ["--gt", gt, "--lr", gt.parent / "one", "--no-model"],
        "size": ["--gt", gt, "--lr", gt, "--no-model"],
        "frames_syntax": ["--gt", gt, "--frames", "a:b", "--no-model"],
        "default_weights": ["--gt", gt],  # no bundled weights in this build: a clean error
    }[case]
    if case == "count":
        (gt.parent / "one").mkdir()
        cv2.imwrite(str(gt.parent / "one" / "00000000.png"), frame[:8, :8])
    if case == "default_weights" and (Path(__file__).parents[2] / "vsr" / "weights" / "default.pth").is_file():
        pytest.skip("this build bundles default weights")
    proc = vsr_eval(*args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vsr: error:"), proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_folder_name_reaches_the_terminal_escaped_and_an_unused_weights_is_refused(tmp_path):
    gt = tmp_path / "g\x1b[31m\nt"
    gt.mkdir()
    for i in range(2):
        cv2.imwrite(str(gt / f"{i:08d}.png"), np.full((32, 32, 3), 40 * i, np.uint8))
    proc = vsr_eval("--gt", gt, "--no-model")
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout and proc.stdout.splitlines()[0].startswith(f"{tmp_path}/g\\x1b[31m\\nt: ")
    proc = vsr_eval("--gt", gt, "--no-model", "--weights", "random")  # scored bicubic alone, without a word
    assert proc.returncode == 2 and proc.stderr.splitlines() == [
        "vsr: error: --no-model scores the bicubic baseline alone: --weights random would not be used (give one of "
        "them)"]


@pytest.mark.parametrize("extra, said", [
    (["--config", "edvr-m"], "--config"),
    (["--precision", "int8", "--int8-scales", "static"], "--precision int8, --int8-scales"),
    (["--backend", "torch", "--batch", "4"], "--backend, --batch"),
])
def test_model_options_without_a_model_are_refused(tmp_path, extra, said):
    """`vsr eval --no-model --precision int8` scored bicubic alone, the model's options dropped without a word."""
    gt = tmp_path / "gt"
    gt.mkdir()
    for i in range(2):
        cv2.imwrite(str(gt / f"{i:08d}.png"), np.full((32, 32, 3), 40 * i, np.uint8))
    for no_model in (["--no-model"], ["--weights", "bicubic"]):
        proc = vsr_eval("--gt", gt, *no_model, *extra)
        assert proc.returncode == 2 and proc.stderr.splitlines() == [
            f"vsr: error: no model runs (--no-model, --weights bicubic): {said} would not be used"]


@pytest.mark.parametrize("extra", [[], ["--precision", "fp32"]])
def test_a_calibration_no_int8_plan_uses_is_refused(tmp_path, extra):
    """`vsr eval --weights random --int8-calibration DIR` (fp32, the default) ran fp32 and dropped the folder
    without a word; `vsr export` refuses the same options in one line."""
    gt, cal = tmp_path / "gt", tmp_path / "cal"
    gt.mkdir()
    cal.mkdir()
    for i in range(2):
        cv2.imwrite(str(gt / f"{i:08d}.png"), np.full((32, 32, 3), 40 * i, np.uint8))
    proc = vsr_eval("--gt", gt, "--weights", "random", "--config", "edvr-tiny", "--int8-calibration", cal, *extra)
    assert proc.returncode == 2 and proc.stderr.splitlines() == [
        "vsr: error: --int8-calibration needs --precision int8 (it calibrates the split plan's int8 segments)"]
    proc = vsr_eval("--gt", gt, "--weights", "random", "--config", "edvr-tiny", "--int8-scales", "static", *extra)
    assert proc.returncode == 2 and proc.stderr.splitlines() == [  # (it was dropped without a word too)
        "vsr: error: --int8-scales needs --precision int8 (it chooses the activation scales of the split plan's "
        "int8 segments)"]


def test_a_frame_identical_to_its_reference_leaves_the_others_figures_shown(tmp_path):
    """A flat frame comes back from bicubic x1/4 then x4 exactly: its PSNR is inf, and so was the mean, `inf` in
    the table and `null` in --json, hiding what the other frames score.  The BasicSR mean stays; the mean over
    the other frames and the count of identical ones are added."""
    rng = np.random.default_rng(5)
    cv2.imwrite(str(tmp_path / "00000000.png"), np.full((64, 64, 3), 120, np.uint8))
    for i in (1, 2):
        noise = rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)
        cv2.imwrite(str(tmp_path / f"0000000{i}.png"), cv2.GaussianBlur(noise, (5, 5), 0))
    proc = vsr_eval("--gt", tmp_path, "--no-model", "--json")
    assert proc.returncode == 0, proc.stderr
    bicubic = json.loads(proc.stdout)["bicubic"]
    per_frame = bicubic["per_frame"]
    assert per_frame[0]["psnr_y"] is None and bicubic["mean"]["psnr_y"] is None  # BasicSR's mean: inf
    assert bicubic["identical_frames"] == 1
    for key in ("psnr_y", "ssim_y", "psnr_rgb", "ssim_rgb"):
        assert bicubic["finite_mean"][key] == pytest.approx(np.mean([f[key] for f in per_frame[1:]]), abs=1e-9)
    assert 10 < bicubic["finite_mean"]["psnr_y"] < 60
    proc = vsr_eval("--gt", tmp_path, "--no-model")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[2].split() == ["bicubic", "inf", f"{bicubic['mean']['ssim_y']:.4f}", "inf",
                                f"{bicubic['mean']['ssim_rgb']:.4f}"]
    finite = bicubic["finite_mean"]
    assert lines[3].split() == ["the", "other", "2", "frames", f"{finite['psnr_y']:.2f}", f"{finite['ssim_y']:.4f}",
                                f"{finite['psnr_rgb']:.2f}", f"{finite['ssim_rgb']:.4f}"]
    assert lines[4] == ("bicubic: 1 of 3 frames is identical to the ground truth (PSNR inf, as in BasicSR's mean); "
                        "the row below leaves it out") and len(lines) == 5
    proc = vsr_eval("--gt", tmp_path, "--no-model", "--frames", "1:3", "--json")  # none identical: the same figures
    bicubic = json.loads(proc.stdout)["bicubic"]
    assert bicubic["identical_frames"] == 0 and bicubic["finite_mean"] == bicubic["mean"]
