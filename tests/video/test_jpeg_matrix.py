"""MJPEG's pictures are JPEG (JFIF) ones, whose YUV is BT.601's: FFmpeg's decoder (and so every player built on
it) reads them so whatever the container's matrix tag says, so vsr writes them in BT.601 whatever the source's
matrix (vsr.video.colour.ColourSpec.for_output)."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from tests.video.test_formats import H, W, source_info, write_with_sink
from tests.video.tools import ffmpeg
from vsr.video import EncoderSettings
from vsr.video.colour import PRI_BT709, RANGE_LIMITED, SPC_BT470BG, SPC_BT709, TRC_BT709, ColourSpec
from vsr.video.sink import VideoSink


def played(path) -> np.ndarray:
    """The first picture of ``path`` as FFmpeg shows it: RGB, ``(3, H, W)``."""
    data = subprocess.run([ffmpeg(), "-v", "error", "-i", str(path), "-frames:v", "1", "-f", "rawvideo",
                           "-pix_fmt", "rgb24", "-"], capture_output=True, check=True).stdout
    return np.frombuffer(data, np.uint8).reshape(H, W, 3).transpose(2, 0, 1).astype(np.float64)


@pytest.mark.parametrize("name", ["o.mkv", "o.mov", "o.avi"])
def test_an_mjpeg_output_of_a_bt709_source_plays_in_its_colours(tmp_path, name):
    y, x = np.mgrid[0:H, 0:W]
    rgb = np.stack([np.full((H, W), 200), 60 + 2 * y, 40 + 3 * x]).astype(np.uint8)  # saturated, smooth: JPEG keeps it
    bt709 = ColourSpec(SPC_BT709, RANGE_LIMITED, PRI_BT709, TRC_BT709)
    out = tmp_path / name
    sink = VideoSink(out, source_info(tmp_path / "src", "yuv420p", bt709), EncoderSettings(codec="mjpeg"))
    write_with_sink(sink, rgb)
    error = np.abs(played(out) - rgb).mean()
    assert error < 4, error  # BT.709 YUV read as BT.601's: 10 and more
    assert sink.choice.colour.matrix == SPC_BT470BG  # and tagged so, where the container has a tag


def test_an_mjpeg_output_keeps_primaries_transfer_and_full_range():
    spec = ColourSpec(SPC_BT709, RANGE_LIMITED, PRI_BT709, TRC_BT709).for_output("yuvj420p", "mjpeg")
    assert (spec.matrix, spec.primaries, spec.transfer) == (SPC_BT470BG, PRI_BT709, TRC_BT709)
    assert spec.range != RANGE_LIMITED
    assert ColourSpec(SPC_BT709, RANGE_LIMITED, PRI_BT709, TRC_BT709).for_output("yuv420p", "libx264").matrix == SPC_BT709

