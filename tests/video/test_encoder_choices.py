"""Encoder choices a person can play and read back (issue 25): picture codecs only into containers players read
them from, the encoder's own banner only under ``vsr -v``, and the CRF and preset it really used (its defaults
included) in the end summary and in ``vsr report``."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import av
import numpy as np
import pytest

from vsr.errors import InputError
from vsr.jobs.inputs import default_suffix
from vsr.train.degrade import x264_asm
from vsr.video import EncoderSettings, open_sink, open_source
from vsr.video.codecs import ENCODER_DEFAULTS, effective

REPO = Path(__file__).resolve().parents[2]
TINY = ["--weights", "random", "--config", "edvr-tiny", "--threads", "1"]


def encoded(codec: str, options: dict[str, str]) -> list[bytes]:
    """The packets of 6 frames of a moving pattern, 64x48, encoded by ``codec`` with ``options``."""
    oc = av.open(io.BytesIO(), "w", format="matroska")
    vs = oc.add_stream(codec, rate=25, options=options)
    vs.width, vs.height, vs.pix_fmt = 64, 48, "yuv420p"
    yy, xx = np.mgrid[:48, :64]
    packets = []
    for i in range(6):
        rgb = np.stack([(xx * 4 + i * 9) % 256, (yy * 5 + i * 3) % 256, (xx + yy + i * 20) % 256], -1)
        frame = av.VideoFrame.from_ndarray(rgb.astype(np.uint8), format="rgb24").reformat(format="yuv420p")
        packets += [bytes(p) for p in vs.encode(frame)]
    packets += [bytes(p) for p in vs.encode()]
    oc.close()
    return packets


@pytest.mark.parametrize("codec", sorted(ENCODER_DEFAULTS))
def test_the_defaults_a_run_reports_are_the_encoders_own(codec):
    """An encode with the reported CRF and preset given explicitly is the same bytes as one with none: the
    table is what the installed encoder really does (a newer SVT-AV1 with another default preset fails here)."""
    if codec not in av.codecs_available:
        pytest.skip(f"{codec} not in this FFmpeg")
    # x264's AVX-512 functions read memory they never wrote: on an AVX-512 CPU two encodes of the same frames
    # can differ (vsr.train.degrade.x264_asm), so the comparison runs them without
    quiet = {"libx265": {"x265-params": "log-level=error"}, "libx264": x264_asm()}.get(codec, {})
    defaults = ENCODER_DEFAULTS[codec]
    assert encoded(codec, {**quiet, **defaults}) == encoded(codec, quiet)
    other = {**defaults, "crf": str(int(defaults["crf"]) + 8)}
    assert encoded(codec, {**quiet, **other}) != encoded(codec, quiet)  # the comparison can tell
    assert effective(codec, {}) == {"crf": int(defaults["crf"]), "preset": defaults.get("preset"), "q": None}
    assert effective(codec, {"crf": "18.5", "preset": "slow"}) == {"crf": 18.5, "preset": "slow", "q": None}
    assert effective("ffv1", {}) == {"crf": None, "preset": None, "q": None}


@pytest.mark.parametrize("name, codec, message", [
    ("o.mp4", "png", "--codec png writes still pictures, which players do not play from mp4: use a .mov output, "
                     "or a folder (a name without suffix) for PNG frames"),
    ("o.avi", "png", "which players do not play from avi: use a .mov output"),
    ("o.mp4", "mjpeg", "--codec mjpeg writes still pictures, which players do not play from mp4: use a .mov or "
                       ".mkv or .avi output"),
    ("o.mkv", "png", "matroska has no codec ID for png video: use a .mov output, or a folder (a name without "
                     "suffix) for PNG frames, or another codec (ffv1 is lossless)"),
    ("o.webm", "libx264", "webm cannot hold libx264 video (choose another codec, or a .mp4 or .mkv or .mov output)"),
])
def test_a_codec_goes_only_where_players_read_it(make_clip, tmp_path, name, codec, message):
    source = open_source(make_clip("in.mp4", frames=2))
    try:
        with pytest.raises(InputError) as e:
            open_sink(tmp_path / name, source.info, EncoderSettings(codec=codec))
    finally:
        source.close()
    assert message in str(e.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.mp4"]


def test_png_into_mov_is_written(make_clip, tmp_path):
    source = open_source(make_clip("in.mp4", frames=2))
    try:
        sink = open_sink(tmp_path / "o.mov", source.info, EncoderSettings(codec="png"), scale=1)
        sink.abort()
    finally:
        source.close()
    assert sink.codec == "png" and sink.crf is None


def test_a_job_with_a_picture_codec_writes_quicktime(make_clip):
    assert default_suffix(Path("in.mp4"), "png") == ".mov" and default_suffix(Path("in.mkv"), "mjpeg") == ".mov"
    assert default_suffix(Path("in.mkv"), None) == ".mkv"


def vsr(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vsr", *map(str, args)], cwd=REPO, capture_output=True, text=True,
                          timeout=600)


def test_png_into_mp4_is_refused_before_the_model_loads(make_clip, tmp_path):
    src = make_clip("in.mp4", width=16, height=12, frames=2)
    p = vsr("upscale", src, tmp_path / "out.mp4", *TINY, "--codec", "png")
    assert p.returncode == 2 and p.stderr.splitlines()[-1].startswith(
        "vsr: error: --codec png writes still pictures, which players do not play from mp4: use a .mov output")
    assert "loading model" not in p.stderr and "seeded random weights" not in p.stderr  # no model was loaded
    assert sorted(x.name for x in tmp_path.iterdir()) == ["in.mp4"]
    add = vsr("jobs", "add", src, "--ext", "mp4", "--out-dir", tmp_path / "out", "--store", tmp_path / "q.db",
              *TINY, "--codec", "png")
    assert add.returncode == 2 and "players do not play from mp4: use a .mov output" in add.stderr
    assert not (tmp_path / "q.db").exists()


def test_webm_shows_no_banner_and_names_the_crf_it_used(make_clip, tmp_path):
    """SVT-AV1's ~20 lines of settings are for ``vsr -v``; the end summary and ``vsr report`` say CRF 35."""
    src = make_clip("in.mp4", width=16, height=12, frames=2)
    p = vsr("upscale", src, tmp_path / "out.webm", *TINY, "--report", tmp_path / "run.json")
    assert p.returncode == 0, p.stderr
    assert "Svt" not in p.stderr and "SVT" not in p.stderr
    preset = ENCODER_DEFAULTS["libsvtav1"]["preset"]
    assert p.stderr.splitlines()[-1] == f"encoder: libsvtav1, crf 35, preset {preset}, yuv420p"
    settings = json.loads((tmp_path / "run.json").read_text())["settings"]
    assert settings["codec"] == "libsvtav1" and settings["crf"] == 35 and settings["preset"] == preset
    report = vsr("report", tmp_path / "run.json")
    rows = {line.split()[0]: line.split()[1:] for line in report.stdout.splitlines() if line.strip()}
    assert rows["crf"] == ["35"] and rows["preset"] == [preset]
    verbose = vsr("-v", "upscale", src, tmp_path / "again.webm", *TINY, "--quiet")
    assert verbose.returncode == 0 and "SVT [config]" in verbose.stderr
