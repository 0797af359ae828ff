"""How compressed a source is (:mod:`vsr.video.compression`): blockiness on pictures with and without a block
grid, bits per pixel against ffprobe's figures, and a stream on standard input measured without a second read."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import av
import numpy as np
import pytest

from tests.data import CALENDAR, VIDEOS, needs
from vsr.video import open_source
from vsr.video.compression import blockiness, measure, measure_file
from vsr.video.pipe_source import StreamSource

H264 = VIDEOS / "h264_256x240_35fps_1s_noaudio.mp4"
CALENDAR_LR = CALENDAR / "lr"

needs_data = needs(VIDEOS)


def test_blockiness_is_about_one_without_a_grid_and_high_with_one():
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:128, 0:160].astype(np.float32)
    clean = 128 + 60 * np.sin(x / 7.3) * np.cos(y / 5.1) + rng.normal(0, 6, (128, 160))
    # each 8x8 block replaced by its mean plus its own smooth gradient: steps only at the grid
    blocks = clean.reshape(16, 8, 20, 8).mean(axis=(1, 3), keepdims=True)
    blocky = np.broadcast_to(blocks, (16, 8, 20, 8)).reshape(128, 160) + (x % 8) * 0.5
    assert blockiness(clean) == pytest.approx(1.0, abs=0.1)
    assert blockiness(blocky) > 3
    # the grid one pixel off is not the codec's grid
    assert blockiness(np.roll(blocky, 3, axis=(0, 1))) == pytest.approx(1.0, abs=0.05)


def test_a_flat_or_tiny_picture_says_nothing():
    assert blockiness(np.full((64, 64), 90, np.uint8)) is None
    assert blockiness(np.arange(30, dtype=np.uint8).reshape(5, 6)) is None


@needs_data
def test_bits_per_pixel_of_a_real_clip_match_ffprobe():
    probe = json.loads(subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
                                       "stream=bit_rate,width,height,avg_frame_rate", "-of", "json", str(H264)],
                                      capture_output=True, text=True, check=True).stdout)["streams"][0]
    num, den = map(int, probe["avg_frame_rate"].split("/"))
    expected = int(probe["bit_rate"]) / (probe["width"] * probe["height"] * num / den)
    facts = measure_file(H264)
    assert facts.codec == "h264" and facts.rate_from == "stream"
    assert facts.bits_per_pixel == pytest.approx(expected, rel=1e-6)
    assert facts.frames == 3 and facts.blockiness > 1.5  # this clip's grid shows (docs/benchmarks.md, issue 25)


@needs_data
def test_webm_without_a_stream_rate_takes_the_container_s():
    facts = measure_file(VIDEOS / "vp9_320x180_30fps_10s_bbb.webm")
    assert facts.codec == "vp9" and facts.rate_from == "container"
    size_bpp = 8 * (VIDEOS / "vp9_320x180_30fps_10s_bbb.webm").stat().st_size / (320 * 180 * 300)
    assert facts.bits_per_pixel == pytest.approx(size_bpp, rel=0.05)  # 10 s, 300 frames, no audio


def test_a_matroska_with_a_font_attachment_takes_the_container_rate_less_its_other_streams(tmp_path):
    # an anime release's fonts: PyAV's attachment stream has no bit_rate at all (was a traceback in every run
    # of --weights auto on such a file)
    font = tmp_path / "font.ttf"
    font.write_bytes(bytes(range(256)) * 400)
    mkv = tmp_path / "fonts.mkv"
    subprocess.run(["ffmpeg", "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=160x120:rate=25:duration=2",
                    "-attach", str(font), "-metadata:s:t:0", "mimetype=font/ttf", "-c:v", "libx264",
                    "-pix_fmt", "yuv420p", "-crf", "10", str(mkv)], check=True)
    facts = measure_file(mkv)
    assert facts.codec == "h264" and facts.rate_from == "container" and facts.frames == 3
    # Matroska states no video rate; the container's is the file's size over its duration, less the font's
    # (100 KB, more than the video)
    video_bytes = sum(p.size for p in av.open(str(mkv)).demux(video=0))
    assert facts.bits_per_pixel == pytest.approx(8 * video_bytes / (160 * 120 * 50), rel=0.1)


@needs_data
def test_a_png_folder_is_png_with_its_frames_measured():
    source = open_source(CALENDAR_LR)
    try:
        facts = measure(source)
    finally:
        source.close()
    assert facts.codec == "png" and facts.bits_per_pixel is None and facts.frames == 3
    assert 0.8 < facts.blockiness < 1.05


@needs_data
def test_a_stream_is_measured_from_its_probe_and_then_yields_every_frame(tmp_path):
    y4m = tmp_path / "in.y4m"
    subprocess.run(["ffmpeg", "-v", "error", "-i", str(H264), "-f", "yuv4mpegpipe", str(y4m)], check=True)
    with open(y4m, "rb") as f:
        source = StreamSource(f)
        try:
            facts = measure(source)
            frames = [fr.rgb for fr in source.frames()]
        finally:
            source.close()
    assert facts.codec == "rawvideo" and facts.bits_per_pixel is None and facts.frames == 1
    assert facts.blockiness > 1.5  # decoded H.264: the grid is in the pictures
    assert len(frames) == 35  # measuring took nothing away from the stream
    with av_open(y4m) as first:
        assert np.array_equal(frames[0], first)


class av_open:
    """The first frame of ``path`` as an independent decode gives it (RGB float, as sources yield)."""

    def __init__(self, path: Path):
        self.source = open_source(path)

    def __enter__(self):
        return next(iter(self.source.frames())).rgb

    def __exit__(self, *exc):
        self.source.close()
