"""An MPEG-4 Part 2 output (.avi's default codec) says its colour in its own headers (vsr.video.mpeg4_colour): AVI
keeps none, and FFmpeg's encoder wrote none."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from tests.video.test_formats import H, W, source_info, write_with_sink
from tests.video.test_jpeg_matrix import played
from vsr.video import EncoderSettings
from vsr.video.colour import (PRI_BT470BG, PRI_BT709, RANGE_FULL, RANGE_LIMITED, SPC_BT470BG, SPC_BT709, TRC_BT709,
                              TRC_SMPTE170M, ColourSpec)
from vsr.video.mpeg4_colour import with_colour
from vsr.video.sink import VideoSink


@pytest.mark.parametrize("colour,name", [((SPC_BT709, RANGE_LIMITED, PRI_BT709, TRC_BT709), "bt709"),
                                         ((SPC_BT709, RANGE_FULL, PRI_BT709, TRC_BT709), "bt709"),
                                         ((SPC_BT470BG, RANGE_LIMITED, PRI_BT470BG, TRC_SMPTE170M), "bt470bg")])
def test_an_avi_output_says_its_colour_in_its_mpeg4_headers(tmp_path, colour, name):
    """AVI keeps no colour, and FFmpeg's MPEG-4 Part 2 encoder wrote none into its Visual Object header: players
    guessed the matrix by the picture's size (and limited range), and FFmpeg read a BT.709 one as BT.601's."""
    y, x = np.mgrid[0:H, 0:W]
    rgb = np.stack([np.full((H, W), 200), 60 + 2 * y, 40 + 3 * x]).astype(np.uint8)
    out = tmp_path / "o.avi"
    sink = VideoSink(out, source_info(tmp_path / "src", "yuv420p", ColourSpec(*colour)), EncoderSettings())
    write_with_sink(sink, rgb)
    assert sink.choice.codec == "mpeg4"
    error = np.abs(played(out) - rgb).mean()
    assert error < 4, error  # read with the wrong matrix: 6 and more
    probe = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v", "-show_entries",
                            "stream=color_space,color_range", "-of", "csv=p=0", str(out)],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert probe == f"{'pc' if colour[1] == RANGE_FULL else 'tv'},{name}", probe


def test_a_header_that_says_a_colour_or_is_not_a_videos_is_left_alone():
    said = b"\x00\x00\x01\xb5\x89\x1d\x40\x40\x40\x5f\x00\x00\x01\x00"  # BT.709, limited
    assert with_colour(said, 5, True, 5, 6) == said
    bare = b"\x00\x00\x01\xb5\x89\x13\x00\x00\x01\x00"  # FFmpeg's: video_signal_type 0
    assert with_colour(bare, 1, False, 1, 1) == said
    assert with_colour(b"\x00\x00\x01\xb6\x10", 1, False, 1, 1) == b"\x00\x00\x01\xb6\x10"
