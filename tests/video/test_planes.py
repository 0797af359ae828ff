"""RGB -> a sink's planes (``vsr.video.planes``): FFmpeg's own conversion of the same pixels, the textbook
formulas in float64, the chroma filter at the tagged siting, and a whole run's 4:2:0 output against FFmpeg's
conversion of the run's RGB output."""

from __future__ import annotations

import subprocess
from pathlib import Path

import av
import av.video.format
import cv2
import numpy as np
import pytest

from tests.data import REDS
from vsr.video.colour import KR_KB, ColourSpec
from vsr.video.planes import PlaneFormat, convert_tile, direct_format, tent_taps

NAMES = {1: "bt709", 5: "bt470bg", 9: "bt2020nc"}


def real_rgb(height: int = 180, width: int = 320) -> np.ndarray:
    """A real picture, uint8 ``(H, W, 3)``: a REDS frame (x2 bicubic, as smooth as an upscaled one), else a
    synthetic gradient with texture."""
    files = sorted(REDS.glob("*.png"))
    if files:
        img = cv2.cvtColor(cv2.imread(str(files[0])), cv2.COLOR_BGR2RGB)
        return cv2.resize(img, (2 * img.shape[1], 2 * img.shape[0]), interpolation=cv2.INTER_CUBIC)[:height, :width]
    from tests.conftest import pattern

    return pattern(0, width, height)


def ffmpeg_planes(png: Path, pix_fmt: str, matrix: int, full: bool, h: int, w: int) -> list[np.ndarray]:
    """FFmpeg's own RGB -> ``pix_fmt`` of a PNG (the scale filter: chroma sited left, 0/256 across and, for
    4:2:0, 128/256 down; its bilinear filter from every RGB pixel, the filter vsr's planes use), as three planes."""
    down = 128 if "420" in pix_fmt else 0
    vf = (f"scale=out_color_matrix={NAMES[matrix]}:out_range={'pc' if full else 'tv'}"
          f":out_h_chr_pos=0:out_v_chr_pos={down}:flags=bilinear+accurate_rnd+full_chroma_inp")
    raw = subprocess.run(["ffmpeg", "-v", "error", "-i", str(png), "-vf", vf, "-pix_fmt", pix_fmt, "-f", "rawvideo",
                          "-"], capture_output=True, check=True).stdout
    fmt = av.VideoFormat(pix_fmt)
    dt = np.uint8 if "10" not in pix_fmt else np.uint16
    a = np.frombuffer(raw, dt)
    ch, cw = fmt.chroma_height(h), fmt.chroma_width(w)
    return [a[: h * w].reshape(h, w), a[h * w: h * w + ch * cw].reshape(ch, cw), a[h * w + ch * cw:].reshape(ch, cw)]


def assert_close_to_ffmpeg(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    """The issue's bar: within 2 levels luma, 3 chroma, and >= 99.9 % of all samples within 1."""
    diffs = [np.abs(g.astype(int) - w.astype(int)) for g, w in zip(got, want)]
    assert diffs[0].max() <= 2 and max(d.max() for d in diffs[1:]) <= 3, [d.max() for d in diffs]
    within = sum(int((d <= 1).sum()) for d in diffs) / sum(d.size for d in diffs)
    assert within >= 0.999, within


@pytest.mark.parametrize("pix_fmt,matrix,full", [("yuv420p", 1, False), ("yuv420p", 5, True), ("yuv422p", 9, False),
                                                 ("yuv420p10le", 1, False)])
def test_planes_equal_ffmpegs_own_conversion_of_the_same_rgb(tmp_path, pix_fmt, matrix, full):
    rgb8 = real_rgb()
    png = tmp_path / "in.png"
    cv2.imwrite(str(png), cv2.cvtColor(rgb8, cv2.COLOR_RGB2BGR))
    fmt = PlaneFormat.of(pix_fmt, ColourSpec(matrix, 2 if full else 1, 1, 1))
    h, w, _ = rgb8.shape
    got = [np.empty(s, fmt.dtype) for s in fmt.plane_shapes(h, w)]
    convert_tile(np.ascontiguousarray(rgb8.transpose(2, 0, 1)), fmt, got)
    assert fmt.pix_fmt == pix_fmt and [g.shape for g in got][1] == (h // 2 if "420" in pix_fmt else h, w // 2)
    want = ffmpeg_planes(png, pix_fmt, matrix, full, h, w)
    assert_close_to_ffmpeg(got, want)
    # and where the tag says: chroma sited at the centre (swscale's default) is measurably further from FFmpeg's
    centred = PlaneFormat.of(pix_fmt, ColourSpec(matrix, 2 if full else 1, 1, 1), siting=2)
    other = [np.empty(s, fmt.dtype) for s in fmt.plane_shapes(h, w)]
    convert_tile(np.ascontiguousarray(rgb8.transpose(2, 0, 1)), centred, other)
    err = [float(np.abs(a.astype(int) - b).mean()) for a, b in ((got[1], want[1]), (other[1], want[1]))]
    assert err[0] < err[1], err


def textbook(rgb: np.ndarray, matrix: int, full: bool, bits: int) -> np.ndarray:
    """ITU-R BT.601/709/2020 RGB -> Y'CbCr of ``bits`` depth, float64, before rounding, written out here."""
    kr, kb = KR_KB[matrix]
    r, g, b = np.clip(rgb.astype(np.float64), 0, 1)
    y = kr * r + (1 - kr - kb) * g + kb * b
    cb, cr = (b - y) / (2 - 2 * kb), (r - y) / (2 - 2 * kr)
    s = 2 ** (bits - 8)
    if full:
        m = 2**bits - 1
        return np.stack([y * m, cb * m + 128 * s, cr * m + 128 * s])
    return np.stack([y * 219 * s + 16 * s, cb * 224 * s + 128 * s, cr * 224 * s + 128 * s])


@pytest.mark.parametrize("pix_fmt,matrix,full", [("yuv444p10le", 9, False), ("yuv444p12le", 1, True),
                                                 ("yuv444p", 5, False)])
def test_full_chroma_is_the_textbook_formula_rounded_half_up(pix_fmt, matrix, full):
    rng = np.random.default_rng(3)
    rgb = rng.uniform(-0.05, 1.05, (3, 7, 9)).astype(np.float32)  # out of range too: clipped first
    fmt = PlaneFormat.of(pix_fmt, ColourSpec(matrix, 2 if full else 1, 1, 1))
    got = np.empty((3, 7, 9), fmt.dtype)
    convert_tile(rgb, fmt, list(got))
    want = textbook(rgb, matrix, full, fmt.bits)
    exact = np.abs(want - np.floor(want) - 0.5) > 1e-3  # float32 may round a value within 1e-3 of x.5 either way
    np.testing.assert_array_equal(got[exact], np.floor(want + 0.5)[exact])
    assert np.abs(got.astype(int) - np.floor(want + 0.5)).max() <= 1


def test_rgb_outputs_are_quantised_exactly_at_8_and_16_bits():
    rgb = np.random.default_rng(4).uniform(-0.1, 1.1, (3, 5, 6)).astype(np.float32)
    for pix_fmt, top in (("rgb24", 255), ("rgb48be", 65535)):
        fmt = PlaneFormat.of(pix_fmt, ColourSpec.srgb())
        got = np.empty((3, 5, 6), fmt.dtype)
        convert_tile(rgb, fmt, list(got))
        np.testing.assert_array_equal(got, np.floor(np.clip(rgb.astype(np.float64), 0, 1) * top + 0.5))


def test_chroma_is_the_tent_filter_at_its_siting_with_edges_repeated():
    assert tent_taps(1, 0.0) == ((-1, 0.25), (0, 0.5), (1, 0.25))  # co-sited: 1/4 1/2 1/4
    assert tent_taps(1, 0.5) == ((-1, 0.125), (0, 0.375), (1, 0.375), (2, 0.125))  # between two: 1 3 3 1 / 8
    rgb = np.random.default_rng(5).random((3, 6, 10), dtype=np.float32)
    spec = ColourSpec(1, 2, 1, 1)
    fmt = PlaneFormat.of("yuv420p", spec)
    got = [np.empty(s, np.uint8) for s in fmt.plane_shapes(6, 10)]
    convert_tile(rgb, fmt, got)
    full = textbook(rgb, 1, True, 8)[1:]  # Cb, Cr at every pixel (linear: filtering before or after is the same)
    p = np.pad(full, ((0, 0), (1, 2), (1, 1)), mode="edge")  # rows -1..6, columns -1..10
    rows = sum(wt * p[:, 1 + o: 1 + o + 6: 2] for o, wt in ((-1, 1 / 8), (0, 3 / 8), (1, 3 / 8), (2, 1 / 8)))
    want = sum(wt * rows[:, :, 1 + o: 1 + o + 10: 2] for o, wt in ((-1, 1 / 4), (0, 1 / 2), (1, 1 / 4)))
    assert np.abs(np.stack(got[1:]).astype(int) - np.floor(want + 0.5)).max() <= 1
    assert np.mean(np.stack(got[1:]) == np.floor(want + 0.5)) > 0.95


def test_a_tiles_core_reads_its_context_and_lands_in_place():
    """convert_tile of a core inside a bigger picture equals the same region of the whole picture's planes."""
    rgb = np.random.default_rng(6).random((3, 16, 24), dtype=np.float32)
    fmt = PlaneFormat.of("yuv420p", ColourSpec(1, 1, 1, 1))
    whole = [np.empty(s, np.uint8) for s in fmt.plane_shapes(16, 24)]
    convert_tile(rgb, fmt, whole)
    part = [np.zeros((8, 12), np.uint8), np.zeros((4, 6), np.uint8), np.zeros((4, 6), np.uint8)]
    convert_tile(rgb, fmt, part, core=(4, 12, 8, 20))
    np.testing.assert_array_equal(part[0], whole[0][4:12, 8:20])
    np.testing.assert_array_equal(part[1], whole[1][2:6, 4:10])
    np.testing.assert_array_equal(part[2], whole[2][2:6, 4:10])


def test_the_conversion_counts_what_a_check_of_the_models_output_needs():
    """(NaN or beyond +-sane, >= low, <= high) over the core only: the post stage's check without a pass of its
    own (vsr.pipeline.runner.check_model_output decides from these)."""
    rgb = np.full((3, 4, 6), 0.5, np.float32)
    rgb[0, 0, 0], rgb[1, 1, 1], rgb[2, 3, 5] = np.nan, 2000.0, -3.0
    fmt = PlaneFormat.of("yuv420p", ColourSpec(1, 1, 1, 1))
    out = [np.empty(s, np.uint8) for s in fmt.plane_shapes(4, 6)]
    assert convert_tile(rgb, fmt, out, limits=(1000.0, -0.5, 1.5)) == (2, 70, 70)
    part = [out[0][2:4, 2:6], out[1][1:2, 1:3], out[2][1:2, 1:3]]
    assert convert_tile(rgb, fmt, part, core=(2, 4, 2, 6), limits=(1000.0, -0.5, 1.5)) == \
        (0, 23, 24)  # the core holds only the -3.0 of the three
    with pytest.raises(ValueError, match=r"planes of \(2, 2\), \(2, 2\), \(2, 2\) for a core of 2x4"):
        convert_tile(rgb, fmt, [o[:2, :2] for o in out], core=(2, 4, 2, 6))


def float32_formula(rgb: np.ndarray, fmt: PlaneFormat) -> list[np.ndarray]:
    """PlaneFormat's formula in numpy, float32, operation by operation in the kernel's order (taps added in their
    order, no fused multiply-add), edges repeated: the codes convert_tile must give exactly."""
    m, off, lo, hi, ox, wx, oy, wy = fmt.arrays(rgb.dtype == np.uint8)
    x = np.clip(rgb.astype(np.float32), lo, hi)
    top = np.float32(fmt.top)

    def codes(i, r, g, b):
        return np.clip(m[i, 0] * r + m[i, 1] * g + m[i, 2] * b + off[i], np.float32(0), top).astype(fmt.dtype)

    (h, w), (ch, cw) = fmt.plane_shapes(*rgb.shape[1:])[:2]
    rows = [np.clip(np.arange(ch)[:, None] * (1 << fmt.sub_y) + o, 0, h - 1) for o in oy]
    down = x[:, rows[0][:, 0]] * wy[0]
    for t in range(1, oy.size):
        down = down + x[:, rows[t][:, 0]] * wy[t]
    cols = [np.clip(np.arange(cw) * (1 << fmt.sub_x) + o, 0, w - 1) for o in ox]
    c = down[:, :, cols[0]] * wx[0]
    for t in range(1, ox.size):
        c = c + down[:, :, cols[t]] * wx[t]
    return [codes(0, *x), codes(1, *c), codes(2, *c)]


@pytest.mark.parametrize("pix_fmt,siting,dtype", [("yuv420p", 1, np.float32), ("yuv420p", 2, np.uint8),
                                                  ("yuv422p10le", 3, np.float32), ("yuv444p", 0, np.float32),
                                                  ("yuv410p", 1, np.float32), ("yuv440p", 3, np.float32)])
def test_the_codes_are_the_float32_formula_exactly(pix_fmt, siting, dtype):
    """The compiled pass (vectorised, in bands, plane 0 ahead of the chroma) gives exactly the formula's codes."""
    rng = np.random.default_rng(7)
    rgb = (rng.integers(0, 256, (3, 37, 70)).astype(np.uint8) if dtype == np.uint8 else
           rng.uniform(-0.1, 1.1, (3, 37, 70)).astype(np.float32))
    fmt = PlaneFormat.of(pix_fmt, ColourSpec(1, 1, 1, 1), siting=siting)
    got = [np.empty(s, fmt.dtype) for s in fmt.plane_shapes(37, 70)]
    convert_tile(rgb, fmt, got)
    for g, want in zip(got, float32_formula(rgb, fmt)):
        np.testing.assert_array_equal(g, want)


def test_the_planes_are_the_shapes_of_every_planar_format_ffmpeg_has():
    """Each format written directly gets planes of its frame's own shapes: 4:1:0 and 4:1:1 too (their chroma is
    a quarter across, which ``chroma_width(2)`` cannot tell from a half)."""
    direct = sorted(f for f in av.video.format.names if direct_format(f))
    assert {"yuv410p", "yuv411p", "yuv440p", "yuv420p10le", "yuv444p16le"} <= set(direct)
    for name in direct:
        fmt = PlaneFormat.of(name, ColourSpec(1, 1, 1, 1))
        frame = av.VideoFrame(40, 24, name)
        assert fmt.pix_fmt == name
        assert fmt.plane_shapes(24, 40) == [(p.height, p.width) for p in frame.planes[:3]], name
