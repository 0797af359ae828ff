"""`vsr upscale` without --weights, as a newcomer runs it (real processes, real clips): the weights chosen for
the source in one line on stderr and in the run report; --weights given always wins, silently."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.data import CALENDAR, VIDEOS, needs

REPO = Path(__file__).resolve().parents[2]
H264 = VIDEOS / "h264_256x240_35fps_1s_noaudio.mp4"
CALENDAR_LR = CALENDAR / "lr"
# the bundled weights on the quickest backend to start; one output frame
FAST = ["--backend", "torch", "--threads", "1", "--frames", "0:1", "--codec", "ffv1"]

pytestmark = needs(H264, CALENDAR_LR / "00000004.png")


def vsr(*args, stdin=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vsr", *map(str, args)], capture_output=True, text=True,
                          cwd=REPO, stdin=stdin, timeout=600)


def weights_lines(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith("vsr: weights")]


def test_a_compressed_clip_gets_real_said_in_one_line_and_in_the_report(tmp_path):
    res = vsr("upscale", H264, tmp_path / "out.mkv", *FAST, "--report", tmp_path / "run.json")
    assert res.returncode == 0, res.stderr
    assert weights_lines(res.stderr) == ["vsr: weights: real (h264 at 0.137 bits/pixel, blockiness 1.78: a block "
                                         "codec's grid shows; --weights default to override)"]
    settings = json.loads((tmp_path / "run.json").read_text())["settings"]
    assert settings["weights"] == "real" and settings["config"] == "edvr-s"
    choice = settings["weights_choice"]
    assert choice["weights"] == "real" and choice["codec"] == "h264" and choice["rate_from"] == "stream"
    assert choice["bits_per_pixel"] == pytest.approx(295000 / (256 * 240 * 35), abs=1e-4)  # ffprobe's bit_rate


def test_weights_given_win_without_a_line(tmp_path):
    res = vsr("upscale", H264, tmp_path / "out.mkv", *FAST, "--weights", "default", "--report", tmp_path / "r.json")
    assert res.returncode == 0, res.stderr
    assert weights_lines(res.stderr) == []
    settings = json.loads((tmp_path / "r.json").read_text())["settings"]
    assert settings["weights"] == "default" and "weights_choice" not in settings


def test_lossless_vid4_frames_get_default(tmp_path):
    ffv1 = tmp_path / "calendar.mkv"
    subprocess.run(["ffmpeg", "-v", "error", "-framerate", "25", "-i", str(CALENDAR_LR / "%08d.png"), "-frames:v",
                    "5", "-c:v", "ffv1", str(ffv1)], check=True)
    res = vsr("upscale", ffv1, tmp_path / "out.mkv", *FAST)
    assert res.returncode == 0, res.stderr
    [line] = weights_lines(res.stderr)
    assert line.startswith("vsr: weights: default (ffv1 at ") and "clean source; --weights real to override" in line


def test_a_pipe_is_measured_from_what_it_holds(tmp_path):
    y4m = tmp_path / "in.y4m"
    subprocess.run(["ffmpeg", "-v", "error", "-i", str(H264), "-frames:v", "6", "-f", "yuv4mpegpipe", str(y4m)],
                   check=True)
    with open(y4m, "rb") as f:
        res = vsr("upscale", "-", tmp_path / "out.mkv", *FAST, "--report", tmp_path / "run.json", stdin=f)
    assert res.returncode == 0, res.stderr
    [line] = weights_lines(res.stderr)
    assert line.startswith("vsr: weights: real (rawvideo, blockiness 2.")
    report = json.loads((tmp_path / "run.json").read_text())
    assert report["settings"]["weights_choice"]["frames"] == 1 and report["frames"] == 1


def test_the_line_comes_before_the_model_loads_and_quiet_leaves_it_out(tmp_path):
    # the chosen bundled weights are EDVR-S: --config edvr-tiny cannot load them, after the choice was said
    res = vsr("upscale", H264, tmp_path / "out.mkv", "--config", "edvr-tiny")
    assert res.returncode == 2
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("vsr: ")]
    assert len(lines) == 2 and lines[0].startswith("vsr: weights: real (") and lines[1].startswith("vsr: error:")
    res = vsr("upscale", H264, tmp_path / "out.mkv", "--config", "edvr-tiny", "--quiet")
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and res.stderr.startswith("vsr: error:")
