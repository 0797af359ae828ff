"""RGB -> a sink's integer planes in one pass: the matrix, the range, the bit depth, the chroma subsampling.

:class:`PlaneFormat` is the whole conversion for one output, derived from the one table of
:mod:`vsr.video.colour` (``KR_KB``: the matrices; ``levels``: range and bit depth; ``CHROMA_SITING``: where a
subsampled chroma sample sits) and nothing else.  Two implementations read it: :func:`convert_tile` here (numba,
on all cores, for the CPU backends' output) and the CUDA backend's torch ops (``vsr.backends.cuda.transfer``),
which make the same planes on the device.

For every output plane ``i`` and pixel: ``clip(floor(matrix[i] . rgb + offset[i] + 0.5), 0, top)`` (round half
up), ``rgb`` clipped to [0, 1] first; a chroma plane of a subsampled format (4:2:0, 4:2:2, 4:4:0, 4:1:1, 4:1:0) is
that of the RGB filtered by ``taps_y`` x ``taps_x`` at its siting (swscale's bilinear filter: a tent as wide
each side as the subsampling factor, e.g. 1/4 1/2 1/4 for co-sited samples halved, 1/8 3/8 3/8 1/8 for samples
between two rows).  Taps past a tile's edge read its edge pixel; a tile's context (overlap) feeds the taps at
its core's edges.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import av
import av.video.format
import numba
import numpy as np

from vsr.machine import usable_cores
from vsr.video.colour import (CHROMA_SITING, KR_KB, OUTPUT_SITING, RANGE_FULL, SPC_RGB, SPC_SMPTE170M, ColourSpec,
                              bit_depth, is_gray_format, is_rgb_format, levels, planar444)
from vsr.video.plane_kernel import convert_pass


def tent_taps(sub: int, position: float) -> tuple[tuple[int, float], ...]:
    """``(offset, weight)`` of the luma pixels (from a block's first) feeding a chroma sample at ``position``
    (luma pixels from the block's first) when chroma is subsampled by ``2**sub``: a tent ``2**sub`` pixels wide
    each side, weights summing to 1."""
    if sub == 0:
        return ((0, 1.0),)
    f = float(1 << sub)
    offs = range(math.floor(position - f) + 1, math.ceil(position + f))
    w = [max(0.0, 1.0 - abs(o - position) / f) for o in offs]
    total = sum(w)
    return tuple((o, x / total) for o, x in zip(offs, w) if x > 0)


def direct_format(pix_fmt: str) -> bool:
    """Whether the encoder's frames in ``pix_fmt`` are written directly: planar Y, Cb, Cr in planes 0, 1, 2,
    chroma subsampled by 1, 2 or 4 each way (4:4:4 to 4:1:0), little-endian, up to 16 bits.  Semi-planar ones
    (NV12, P010) get the planes of :func:`semi_planar_source`, other formats (packed, gray, RGB) 4:4:4 planes or
    packed RGB, that swscale repacks."""
    if is_rgb_format(pix_fmt) or is_gray_format(pix_fmt):
        return False
    f = av.VideoFormat(pix_fmt)
    comps = f.components
    return (len(comps) == 3 and [c.plane for c in comps] == [0, 1, 2] and not f.is_big_endian
            and max(c.bits for c in comps) <= 16 and max(chroma_shifts(pix_fmt)) <= 2)


def chroma_shifts(pix_fmt: str) -> tuple[int, int]:
    """``(sub_x, sub_y)``: chroma is subsampled by ``2**sub_x`` across and ``2**sub_y`` down (FFmpeg's
    log2_chroma_w / h; 2, 2 for yuv410p), measured on a width that no shift rounds (``chroma_width(2)`` is 1
    for a shift of 1 and of 2 alike)."""
    f = av.VideoFormat(pix_fmt)
    return (_WIDE // f.chroma_width(_WIDE)).bit_length() - 1, (_WIDE // f.chroma_height(_WIDE)).bit_length() - 1


_WIDE = 1 << 12


def semi_planar_source(pix_fmt: str) -> str | None:
    """The planar YUV format that swscale repacks into semi-planar ``pix_fmt`` sample for sample (nv12, nv21 ->
    yuv420p; p010le -> yuv420p10le; nv16 -> yuv422p), so that its chroma is vsr's, sited as tagged; None for
    other formats."""
    f = av.VideoFormat(pix_fmt)
    if [c.plane for c in f.components] != [0, 1, 1] or is_rgb_format(pix_fmt) or f.is_big_endian:
        return None
    bits = bit_depth(pix_fmt)
    name = {(1, 1): "yuv420p", (1, 0): "yuv422p", (0, 0): "yuv444p"}.get(chroma_shifts(pix_fmt))
    name = name if name is None or bits == 8 else f"{name}{bits}le"
    return name if name in av.video.format.names and direct_format(name) else None


def gray_source(pix_fmt: str) -> str | None:
    """The full-range planar YUV 4:4:4 of grey ``pix_fmt``'s depth whose Y plane swscale copies into it (gray ->
    yuv444p, gray10le -> yuv444p10le); None for grey with alpha or below 8 bits."""
    f = av.VideoFormat(pix_fmt)
    bits = bit_depth(pix_fmt)
    if len(f.components) != 1 or bits < 8:
        return None
    return "yuv444p" if bits == 8 else f"yuv444p{bits}le"


def planar_rgb(pix_fmt: str) -> bool:
    """Whether RGB in ``pix_fmt`` is written directly: G, B, R in planes 0, 1, 2 (gbrp, gbrp9le ... gbrp16le)."""
    return pix_fmt.startswith("gbrp") and "f" not in pix_fmt[4:] and not av.VideoFormat(pix_fmt).is_big_endian


def packed_rgb(pix_fmt: str) -> str:
    """The packed RGB of ``pix_fmt``'s depth that other RGB and grey formats are made from (by swscale)."""
    return "rgb24" if bit_depth(pix_fmt) <= 8 else "rgb48le"


@dataclass(frozen=True)
class PlaneFormat:
    """The conversion of RGB ``(3, H, W)`` in [0, 1] into the three integer planes of ``pix_fmt`` (Y, Cb, Cr; G,
    B, R where ``rgb`` and ``pix_fmt`` is a gbrp one; else R, G, B packed as ``pix_fmt`` rgb24 or rgb48le): ``matrix``
    (rows: planes; columns: R, G, B) and ``offset`` in code values, ``top`` the largest code, chroma (planes 1 and 2)
    subsampled by ``2**sub_x`` x ``2**sub_y`` through ``taps_x`` / ``taps_y`` (``(luma offset, weight)``), sited at
    ``siting`` (an AVChromaLocation, 0 where not subsampled)."""

    pix_fmt: str
    rgb: bool
    bits: int
    matrix: tuple[tuple[float, float, float], ...]
    offset: tuple[float, float, float]
    sub_x: int = 0
    sub_y: int = 0
    siting: int = 0
    taps_x: tuple[tuple[int, float], ...] = ((0, 1.0),)
    taps_y: tuple[tuple[int, float], ...] = ((0, 1.0),)

    @classmethod
    def of(cls, pix_fmt: str, spec: ColourSpec, siting: int = OUTPUT_SITING) -> "PlaneFormat":
        """The planes a sink of ``pix_fmt`` tagged ``spec`` takes: those of ``pix_fmt`` itself where it is a
        :func:`direct_format` or :func:`planar_rgb`, else 4:4:4 (:func:`~vsr.video.colour.planar444`) or packed
        RGB (:func:`packed_rgb`), chroma sited at ``siting``."""
        if is_gray_format(pix_fmt) and gray_source(pix_fmt):  # its Y plane, BT.601 full range (swscale's gray)
            return cls.of(gray_source(pix_fmt), ColourSpec(SPC_SMPTE170M, RANGE_FULL, spec.primaries, spec.transfer))
        if spec.matrix == SPC_RGB and planar_rgb(pix_fmt):  # G, B, R planes of the frame, at its depth
            top = float((1 << bit_depth(pix_fmt)) - 1)
            return cls(pix_fmt, True, bit_depth(pix_fmt), ((0.0, top, 0.0), (0.0, 0.0, top), (top, 0.0, 0.0)),
                       (0.0,) * 3)
        if spec.matrix == SPC_RGB:  # R, G, B planes, then packed (and repacked by swscale where asked)
            fmt = packed_rgb(pix_fmt)
            top = float((1 << bit_depth(fmt)) - 1)
            return cls(fmt, True, bit_depth(fmt), ((top, 0.0, 0.0), (0.0, top, 0.0), (0.0, 0.0, top)), (0.0,) * 3)
        fmt = pix_fmt if direct_format(pix_fmt) else (semi_planar_source(pix_fmt) or planar444(pix_fmt))
        bits = bit_depth(fmt)
        yo, ys, co, cs = levels(spec, bits)
        kr, kb = KR_KB[spec.matrix]
        kg = 1.0 - kr - kb
        u, v = cs / (2 * (1 - kb)), cs / (2 * (1 - kr))
        matrix = ((kr * ys, kg * ys, kb * ys), (-kr * u, -kg * u, (1 - kb) * u), ((1 - kr) * v, -kg * v, -kb * v))
        sub_x, sub_y = chroma_shifts(fmt)
        if not (sub_x or sub_y):
            return cls(fmt, False, bits, matrix, (yo, co, co))
        px, py = CHROMA_SITING[siting]
        return cls(fmt, False, bits, matrix, (yo, co, co), sub_x, sub_y, siting,
                   tent_taps(sub_x, px * ((1 << sub_x) - 1)), tent_taps(sub_y, py * ((1 << sub_y) - 1)))

    @property
    def packed(self) -> bool:
        """R, G, B planes to be packed (rgb24, rgb48le), not those of a frame."""
        return self.rgb and not self.pix_fmt.startswith("gbrp")

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.uint8 if self.bits <= 8 else np.uint16)

    @property
    def top(self) -> float:
        return float((1 << self.bits) - 1)

    def plane_shapes(self, height: int, width: int) -> list[tuple[int, int]]:
        """The shapes of the three planes of a ``height x width`` picture (chroma rounded up, as FFmpeg's)."""
        ch, cw = -(-height >> self.sub_y), -(-width >> self.sub_x)
        return [(height, width), (ch, cw), (ch, cw)]

    def arrays(self, codes: bool = False) -> tuple:
        """What both kernels (this module's and the CUDA backend's) compute with, in float32: (matrix, offset
        with the rounding's 0.5, the input's clip bounds lo and hi, taps_x offsets and weights, taps_y ...);
        ``codes``: for RGB given as 0..255 (the matrix divided by 255, nothing to clip)."""
        ox, wx = zip(*self.taps_x)
        oy, wy = zip(*self.taps_y)
        matrix = np.asarray(self.matrix, np.float32)
        if codes:
            matrix = matrix * np.float32(1 / 255)
        return (matrix, np.asarray(self.offset, np.float32) + np.float32(0.5), np.float32(0),
                np.float32(255 if codes else 1), np.asarray(ox, np.int64), np.asarray(wx, np.float32),
                np.asarray(oy, np.int64), np.asarray(wy, np.float32))


@dataclass(frozen=True)
class PlaneBatch:
    """A batch's output as a sink's planes, made where the frames were (the CUDA backend converts on the device
    and downloads these): ``data (N, bytes)``, each item's three planes of a ``height x width`` picture in
    ``fmt`` one after another (:meth:`PlaneFormat.plane_shapes`)."""

    data: np.ndarray
    height: int
    width: int
    fmt: PlaneFormat

    def planes(self, n: int) -> list[np.ndarray]:
        out, at = [], 0
        for shape in self.fmt.plane_shapes(self.height, self.width):
            size = shape[0] * shape[1]
            out.append(self.data[n, at: at + size].reshape(shape))
            at += size
        return out


def plane_views(planes) -> list[np.ndarray]:
    """The three 2-D planes of a sink's ``new_planes()``: an array ``(3, H, W)``, or a frame's views."""
    views = getattr(planes, "views", None)
    return list(views) if views is not None else [planes[0], planes[1], planes[2]]


def region(views: list[np.ndarray], fmt: PlaneFormat, y0: int, y1: int, x0: int, x1: int) -> list[np.ndarray]:
    """The views of the picture's region ``y0:y1, x0:x1`` in each plane (chroma's rounded outward)."""
    fx, fy = 1 << fmt.sub_x, 1 << fmt.sub_y
    cy0, cy1, cx0, cx1 = y0 // fy, -(-y1 // fy), x0 // fx, -(-x1 // fx)
    return [views[0][y0:y1, x0:x1], views[1][cy0:cy1, cx0:cx1], views[2][cy0:cy1, cx0:cx1]]


def place(planes: list[np.ndarray], fmt: PlaneFormat, out: list[np.ndarray],
          core: tuple[int, int, int, int]) -> None:
    """Copy the region ``core = (y0, y1, x0, x1)`` of ready ``planes`` (a :class:`PlaneBatch` item) into ``out``."""
    for src, dst in zip(region(planes, fmt, *core), out):
        dst[...] = src


def encode_planes(rgb: np.ndarray, pix_fmt: str, spec: ColourSpec, out: np.ndarray | None = None) -> np.ndarray:
    """float RGB ``(3, H, W)`` -> integer planes ``(3, H, W)`` of ``planar444(pix_fmt)``: Y/Cb/Cr, or R/G/B for
    RGB formats (what ``VideoSink.write`` takes as an array)."""
    fmt = PlaneFormat.of(packed_rgb(pix_fmt) if spec.matrix == SPC_RGB else planar444(pix_fmt), spec)
    if out is None:
        out = np.empty(rgb.shape, fmt.dtype)
    convert_tile(rgb, fmt, plane_views(out))
    return out


def convert_tile(rgb: np.ndarray, fmt: PlaneFormat, out: list[np.ndarray],
                 core: tuple[int, int, int, int] | None = None,
                 limits: tuple[float, float, float] = (np.inf, -np.inf, np.inf)) -> tuple[int, int, int]:
    """RGB ``(3, h, w)`` (float in [0, 1] give or take, or uint8 0..255) -> ``out``'s three planes (2-D arrays,
    views allowed) for its region ``core = (y0, y1, x0, x1)`` (the whole of it by default; chroma-aligned); the
    pixels around the core feed the chroma filter.  All cores, GIL released.

    Counted on the way, in the core, against ``limits = (sane, low, high)``: the values that are NaN or beyond
    +-sane, those >= low, and those <= high (what a check of the model's output needs, without a pass of its own).
    """
    _, h, w = rgb.shape
    y0, y1, x0, x1 = core or (0, h, 0, w)
    if rgb.dtype not in (np.uint8, np.float32):
        rgb = rgb.astype(np.float32)  # float16: a CUDA backend's RGB download (numba has no float16)
    want = fmt.plane_shapes(y1 - y0, x1 - x0)
    if [o.shape for o in out[:3]] != want:  # the kernel does not check its indices
        raise ValueError(f"planes of {', '.join(str(o.shape) for o in out)} for a core of {y1 - y0}x{x1 - x0} "
                         f"({fmt.pix_fmt} needs {', '.join(map(str, want))})")
    matrix, offset, lo, hi, ox, wx, oy, wy = fmt.arrays(rgb.dtype == np.uint8)
    counts = np.zeros((y1 - y0, 3), np.int64)
    convert_pass(rgb, y0, y1, x0, x1, out[0], out[1], out[2], matrix, offset, lo, hi, np.float32(fmt.top), fmt.sub_x,
                 fmt.sub_y, ox, wx, oy, wy, np.asarray(limits, np.float32), counts)
    return tuple(int(c) for c in counts.sum(axis=0))


def conversion_threads(n: int | None) -> int:
    """Convert on ``n`` threads (None: all numba has, one per core) in this thread from now on (numba's setting
    is per thread: a pipeline stage sets its own); the number set."""
    top = min(numba.config.NUMBA_NUM_THREADS, usable_cores())  # numba's count ignores a cgroup's CPU quota
    n = top if n is None else max(1, min(int(n), top))
    numba.set_num_threads(n)
    return n


__all__ = ["PlaneBatch", "PlaneFormat", "chroma_shifts", "conversion_threads", "convert_tile", "direct_format",
           "encode_planes", "gray_source", "packed_rgb", "place", "planar_rgb", "plane_views", "region",
           "semi_planar_source", "tent_taps"]
