"""YUV <-> RGB with the source's matrix and range, checked against the textbook formulas."""

from __future__ import annotations

import numpy as np
import pytest

from vsr.video.colour import ColourSpec, decode_rgb, planar444, planes_to_frame, yuv_to_rgb
from vsr.video.planes import encode_planes

KR_KB = {1: (0.2126, 0.0722), 5: (0.299, 0.114), 6: (0.299, 0.114), 9: (0.2627, 0.0593)}


def textbook_rgb(planes: np.ndarray, matrix: int, full: bool, bits: int) -> np.ndarray:
    """ITU-R BT.601/709/2020 (non-constant luminance), float64, written out independently."""
    kr, kb = KR_KB[matrix]
    y, u, v = planes.astype(np.float64)
    s = 2 ** (bits - 8)
    if full:
        m = 2**bits - 1
        yn, cb, cr = y / m, (u - 128 * s) / m, (v - 128 * s) / m
    else:
        yn, cb, cr = (y - 16 * s) / (219 * s), (u - 128 * s) / (224 * s), (v - 128 * s) / (224 * s)
    r = yn + (2 - 2 * kr) * cr
    b = yn + (2 - 2 * kb) * cb
    g = (yn - kr * r - kb * b) / (1 - kr - kb)
    return np.clip(np.stack([r, g, b]), 0, 1)


@pytest.mark.parametrize("bits", [8, 10])
@pytest.mark.parametrize("full", [False, True])
@pytest.mark.parametrize("matrix", [1, 6, 9])
def test_yuv_to_rgb_is_the_textbook_conversion(matrix, full, bits):
    rng = np.random.default_rng(matrix * 10 + bits + full)
    planes = rng.integers(0, 2**bits, (3, 9, 11)).astype(np.uint16 if bits > 8 else np.uint8)
    spec = ColourSpec(matrix, 2 if full else 1, 1, 1)
    got = yuv_to_rgb(planes, spec, bits)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, textbook_rgb(planes, matrix, full, bits), atol=2e-6)


def test_known_colours():
    # BT.709 limited: (Y, Cb, Cr) = (51, 109, 212) is the 75% red bar (191, 0, 0); BT.601 puts it elsewhere
    rgb = yuv_to_rgb(np.array([[[51]], [[109]], [[212]]], np.uint8), ColourSpec(1, 1, 1, 1), 8)
    np.testing.assert_allclose(rgb[:, 0, 0] * 255, [191, 0, 0], atol=1.0)
    rgb601 = yuv_to_rgb(np.array([[[51]], [[109]], [[212]]], np.uint8), ColourSpec(6, 1, 6, 6), 8)
    assert abs(rgb601[0, 0, 0] * 255 - 191) > 10  # the wrong matrix visibly shifts the colour
    # full-range white and limited-range white both map to 1.0
    assert yuv_to_rgb(np.array([[[255]], [[128]], [[128]]], np.uint8), ColourSpec(1, 2, 1, 1), 8).min() == 1.0
    assert yuv_to_rgb(np.array([[[940]], [[512]], [[512]]], np.uint16), ColourSpec(9, 1, 9, 14), 10).min() == 1.0


@pytest.mark.parametrize("pix_fmt", ["yuv420p", "yuv422p", "yuv444p", "yuv420p10le", "yuv444p10le", "yuvj420p",
                                     "gbrp"])
def test_round_trip_through_a_frame(pix_fmt):
    spec = ColourSpec.of(pix_fmt, 16, 12, 1, 2 if pix_fmt.startswith("yuvj") else 1, 1, 1).for_output(pix_fmt)
    rng = np.random.default_rng(0)
    if "444" in pix_fmt or pix_fmt == "gbrp":
        rgb = rng.random((3, 12, 16), dtype=np.float32)
    else:  # chroma is resampled (with filtering): only a flat picture survives exactly
        rgb = np.broadcast_to(rng.random((3, 1, 1), dtype=np.float32), (3, 12, 16)).copy()
    frame = planes_to_frame(encode_planes(rgb, pix_fmt, spec), pix_fmt, spec)
    assert frame.format.name == pix_fmt
    back = decode_rgb(frame, spec)
    step = 1 / 255 if "10" not in pix_fmt else 1 / 1023
    # one code value of the format, spread by the matrix over R, G, B
    assert np.abs(back - rgb).max() <= 4 * step


def test_untagged_sources_are_read_like_players_do():
    sd = ColourSpec.of("yuv420p", 720, 576, 2, 0, 2, 2)
    hd = ColourSpec.of("yuv420p", 1920, 1080, 2, 0, 2, 2)
    jpeg = ColourSpec.of("yuvj420p", 640, 480, 2, 0, 2, 2)
    assert (sd.matrix, sd.range, sd.primaries, sd.transfer) == (6, 1, 5, 6)
    assert (hd.matrix, hd.range, hd.primaries, hd.transfer) == (1, 1, 1, 1)
    assert jpeg.range == 2  # the yuvj formats are full range by definition
    tagged = ColourSpec.of("yuv420p10le", 64, 64, 9, 2, 9, 16)
    assert (tagged.matrix, tagged.range, tagged.primaries, tagged.transfer, tagged.guessed) == (9, 2, 9, 16, ())


def test_planar444_keeps_depth_and_kind():
    assert [planar444(f) for f in ("yuv420p", "yuv422p10le", "yuvj420p", "rgb24", "rgb48le", "yuv420p12le")] == \
        ["yuv444p", "yuv444p10le", "yuvj444p", "gbrp", "gbrp16le", "yuv444p12le"]
