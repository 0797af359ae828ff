"""Colour description of a video stream and the YUV <-> RGB conversions that honour it.

Numbers are FFmpeg's enums (``AVColorSpace``, ``AVColorRange``, ``AVColorPrimaries``,
``AVColorTransferCharacteristic``) because that is what streams and frames carry.

Untagged sources are read the way players read them: matrix BT.709 for HD (height >= 720 or width
>= 1280), BT.601 below; limited range unless the pixel format is a ``yuvj`` one.  The output is always
tagged explicitly with what it really has, because a x4 output is "HD" even where its source was not,
and a player's guess would then differ from the source's.

The colour maths is one table, here: the matrices (``KR_KB``), range and bit depth (:func:`levels`) and chroma
siting (``CHROMA_SITING``).  Sources are read with it here (:func:`yuv_to_rgb`); outputs are written with it by
:mod:`vsr.video.planes` on the host and by the CUDA backend on the device, in float32 (exact formulas, one
rounding), not by swscale: swscale's high-bit-depth paths are off by up to one 8-bit step (e.g. white at
65280/65535).  swscale resamples a source's chroma to 4:4:4 and repacks outputs in formats other than planar
YUV (NV12, packed, gray).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import av
import numpy as np
from av.video.reformatter import Interpolation

from vsr.errors import InputError

# AVColorSpace
SPC_RGB, SPC_BT709, SPC_UNSPECIFIED, SPC_FCC, SPC_BT470BG, SPC_SMPTE170M, SPC_SMPTE240M = 0, 1, 2, 4, 5, 6, 7
SPC_BT2020_NCL = 9
# AVColorRange
RANGE_UNSPECIFIED, RANGE_LIMITED, RANGE_FULL = 0, 1, 2
# AVColorPrimaries / AVColorTransferCharacteristic (only those we set ourselves)
PRI_BT709, PRI_UNSPECIFIED, PRI_BT470BG, PRI_SMPTE170M, PRI_BT2020 = 1, 2, 5, 6, 9
TRC_BT709, TRC_UNSPECIFIED, TRC_SMPTE170M, TRC_SRGB = 1, 2, 6, 13

# (Kr, Kb) of each YUV matrix
KR_KB = {SPC_BT709: (0.2126, 0.0722), SPC_FCC: (0.30, 0.11), SPC_BT470BG: (0.299, 0.114),
         SPC_SMPTE170M: (0.299, 0.114), SPC_SMPTE240M: (0.212, 0.087), SPC_BT2020_NCL: (0.2627, 0.0593)}
MATRIX_NAMES = {SPC_RGB: "rgb", SPC_BT709: "bt709", SPC_FCC: "fcc", SPC_BT470BG: "bt470bg",
                SPC_SMPTE170M: "smpte170m", SPC_SMPTE240M: "smpte240m", SPC_BT2020_NCL: "bt2020nc"}
RANGE_NAMES = {RANGE_UNSPECIFIED: "unspecified", RANGE_LIMITED: "tv", RANGE_FULL: "pc"}
# AVChromaLocation -> where a subsampled chroma sample sits in its block of luma pixels, (x, y) from the first
# pixel to the last (0: co-sited with the first, 0.5: between, 1: with the last)
LOC_LEFT, LOC_CENTER, LOC_TOPLEFT = 1, 2, 3
CHROMA_SITING = {LOC_LEFT: (0.0, 0.5), LOC_CENTER: (0.5, 0.5), LOC_TOPLEFT: (0.0, 0.0), 4: (0.5, 0.0),
                 5: (0.0, 1.0), 6: (0.5, 1.0)}
SITING_NAMES = {LOC_LEFT: "left", LOC_CENTER: "center", LOC_TOPLEFT: "topleft", 4: "top", 5: "bottomleft",
                6: "bottom"}
# Outputs' chroma is sited "left" (MPEG-2, H.264, HEVC: what players assume for untagged 4:2:0) and tagged so.
OUTPUT_SITING = LOC_LEFT

RESAMPLE = Interpolation.BILINEAR | Interpolation.ACCURATE_RND | Interpolation.FULL_CHR_H_INT \
    | Interpolation.FULL_CHR_H_INP


def is_rgb_format(pix_fmt: str) -> bool:
    return pix_fmt.startswith(("gbr", "rgb", "bgr", "argb", "abgr", "0rgb", "0bgr", "pal8"))


def is_gray_format(pix_fmt: str) -> bool:
    return pix_fmt.startswith(("gray", "ya", "monow", "monob"))


def bit_depth(pix_fmt: str) -> int:
    """Bits of the deepest component (8 for yuv420p, 10 for yuv420p10le, 16 for rgb48le; a Bayer mosaic's
    samples, 8 or 16, whose descriptor counts bits per colour of a 2x2 cell)."""
    if pix_fmt.startswith("bayer_"):
        return 16 if pix_fmt.endswith(("16le", "16be")) else 8
    return max(c.bits for c in av.VideoFormat(pix_fmt).components)


def planar444(pix_fmt: str) -> str:
    """The 4:4:4 planar format of the same kind and depth, in which the matrix is applied."""
    bits = bit_depth(pix_fmt)
    if is_rgb_format(pix_fmt):
        return "gbrp" if bits <= 8 else "gbrp16le"
    if is_gray_format(pix_fmt):
        return "gray" if bits <= 8 else "gray16le"
    if pix_fmt.startswith("yuvj"):
        return "yuvj444p"
    return {8: "yuv444p", 9: "yuv444p10le", 10: "yuv444p10le", 12: "yuv444p12le"}.get(bits, "yuv444p16le")


@dataclass(frozen=True)
class ColourSpec:
    """How to read a stream's pixels, and how to tag pixels written the same way.

    ``guessed`` names the fields that were not tagged in the source and were filled in by the rules above.
    """

    matrix: int
    range: int
    primaries: int
    transfer: int
    guessed: tuple[str, ...] = ()

    @classmethod
    def of(cls, pix_fmt: str, width: int, height: int, matrix: int, range_: int, primaries: int,
           transfer: int) -> "ColourSpec":
        guessed = []
        hd = height >= 720 or width >= 1280
        if is_rgb_format(pix_fmt):
            matrix, range_ = SPC_RGB, RANGE_FULL
        else:
            if matrix not in KR_KB:
                if matrix not in (SPC_UNSPECIFIED, 3):
                    raise InputError(f"unsupported YUV matrix (AVColorSpace {matrix}) in the source")
                matrix = SPC_BT709 if hd else SPC_SMPTE170M
                guessed.append("matrix")
            if range_ not in (RANGE_LIMITED, RANGE_FULL):
                range_ = RANGE_FULL if pix_fmt.startswith("yuvj") else RANGE_LIMITED
                guessed.append("range")
        if primaries in (PRI_UNSPECIFIED, 0, 3):
            primaries = PRI_BT709 if (matrix in (SPC_BT709, SPC_RGB) or hd) else (
                PRI_BT470BG if height in (576, 288) else PRI_SMPTE170M)
            guessed.append("primaries")
        if transfer in (TRC_UNSPECIFIED, 0, 3):
            transfer = TRC_SRGB if matrix == SPC_RGB else (TRC_BT709 if primaries == PRI_BT709 else TRC_SMPTE170M)
            guessed.append("transfer")
        return cls(matrix, range_, primaries, transfer, tuple(guessed))

    @classmethod
    def srgb(cls) -> "ColourSpec":
        """PNG frames."""
        return cls(SPC_RGB, RANGE_FULL, PRI_BT709, TRC_SRGB)

    def for_output(self, pix_fmt: str, codec: str | None = None) -> "ColourSpec":
        """The spec of pixels in ``pix_fmt`` written from RGB that was read with this spec (by encoder ``codec``).

        RGB read from an RGB source and written as YUV gets BT.709 limited range (what players assume
        for HD; BT.2020's matrix with BT.2020's primaries); YUV written as RGB keeps primaries and transfer.
        MJPEG's YUV is BT.601's whatever the source's: a JPEG's is, and FFmpeg's decoder reads it so whatever the
        container's tag says (a BT.709 source's colours shifted).
        """
        if codec == "mjpeg" and not is_rgb_format(pix_fmt) and not is_gray_format(pix_fmt):
            return replace(self.for_output(pix_fmt), matrix=SPC_BT470BG)
        if is_rgb_format(pix_fmt) or is_gray_format(pix_fmt):
            return ColourSpec(SPC_RGB, RANGE_FULL, self.primaries, self.transfer, self.guessed)
        if self.matrix == SPC_RGB:  # (BT.2020's primaries: its own matrix, as HDR10 has it)
            rng = RANGE_FULL if pix_fmt.startswith("yuvj") else RANGE_LIMITED
            matrix = SPC_BT2020_NCL if self.primaries == PRI_BT2020 else SPC_BT709
            return ColourSpec(matrix, rng, self.primaries, self.transfer, self.guessed)
        if pix_fmt.startswith("yuvj"):
            return ColourSpec(self.matrix, RANGE_FULL, self.primaries, self.transfer, self.guessed)
        return self

    def describe(self) -> dict:
        return {"matrix": MATRIX_NAMES.get(self.matrix, str(self.matrix)),
                "range": RANGE_NAMES.get(self.range, str(self.range)),
                "primaries": int(self.primaries), "transfer": int(self.transfer), "guessed": list(self.guessed)}


def levels(spec: ColourSpec, bits: int) -> tuple[float, float, float, float]:
    """(luma offset, luma scale, chroma offset, chroma scale) in code values of ``bits`` depth."""
    s = float(1 << (bits - 8))
    if spec.range == RANGE_FULL:
        m = float((1 << bits) - 1)
        return 0.0, m, 128.0 * s, m
    return 16.0 * s, 219.0 * s, 128.0 * s, 224.0 * s


def yuv_to_rgb(planes: np.ndarray, spec: ColourSpec, bits: int, out: np.ndarray | None = None) -> np.ndarray:
    """``(3, H, W)`` integer Y, Cb, Cr (4:4:4) -> float32 RGB ``(3, H, W)`` in [0, 1] (clipped)."""
    yo, ys, co, cs = levels(spec, bits)
    kr, kb = KR_KB[spec.matrix]
    kg = 1.0 - kr - kb
    # divisions, not reciprocal products: white must come out as exactly 1.0
    y = (planes[0].astype(np.float32) - np.float32(yo)) / np.float32(ys)
    cb = (planes[1].astype(np.float32) - np.float32(co)) / np.float32(cs)
    cr = (planes[2].astype(np.float32) - np.float32(co)) / np.float32(cs)
    if out is None:
        out = np.empty((3,) + y.shape, np.float32)
    np.add(y, np.float32(2 * (1 - kr)) * cr, out=out[0])
    np.add(y, np.float32(2 * (1 - kb)) * cb, out=out[2])
    np.subtract(y, np.float32(2 * (1 - kr) * kr / kg) * cr + np.float32(2 * (1 - kb) * kb / kg) * cb, out=out[1])
    return np.clip(out, 0.0, 1.0, out=out)


def quantise_rgb(rgb: np.ndarray, bits: int, out: np.ndarray | None = None) -> np.ndarray:
    """float RGB in [0, 1] -> integer RGB of ``bits`` depth (round half up, clipped): the planes
    :class:`vsr.video.planes.PlaneFormat` gives RGB outputs, in numpy (tests' references)."""
    top = float((1 << bits) - 1)
    v = np.clip(rgb * np.float32(top) + np.float32(0.5), 0.0, top)
    if out is None:
        return v.astype(np.uint8 if bits <= 8 else np.uint16)
    out[...] = v
    return out


# ---- frames <-> planes ------------------------------------------------------------------------------


def frame_planes(frame: av.VideoFrame) -> np.ndarray:
    """The three planes of a planar 4:4:4 frame as one ``(3, H, W)`` array (copied out of the frame)."""
    dt = np.uint8 if bit_depth(frame.format.name) <= 8 else np.uint16
    out = np.empty((3, frame.height, frame.width), dt)
    for i, p in enumerate(frame.planes[:3]):
        a = np.frombuffer(p, dt).reshape(p.height, p.line_size // dt().itemsize)
        out[i] = a[:, : p.width]
    return out


def planes_frame(planes: np.ndarray, pix_fmt: str) -> av.VideoFrame:
    """A new planar 4:4:4 frame in ``pix_fmt`` holding ``(3, H, W)`` planes (Y/Cb/Cr or G/B/R order)."""
    _, h, w = planes.shape
    f = av.VideoFrame(w, h, pix_fmt)
    for i, p in enumerate(f.planes[:3]):
        plane_view(p, planes.dtype)[...] = planes[i]
    return f


class FramePlanes:
    """The three planes of a new planar ``av.VideoFrame`` (chroma subsampled or not), writable in place through
    numpy views (``views``): the post-processing stage writes an output frame's tiles straight into the frame
    the encoder gets (:func:`vsr.video.planes.place`), instead of into an array copied into a frame afterwards.
    ``alpha``: a view of its fourth plane, where it has one (yuva420p, gbrap, ...), else None.
    """

    def __init__(self, width: int, height: int, pix_fmt: str):
        self.frame = av.VideoFrame(width, height, pix_fmt)
        self.dtype = np.uint8 if bit_depth(pix_fmt) <= 8 else np.uint16
        self.shape = (3, height, width)
        views = [plane_view(p, self.dtype) for p in self.frame.planes]
        self.views = views[:3]
        self.alpha = views[3] if len(views) > 3 else None


def plane_view(p, dtype) -> np.ndarray:
    """A writable 2-D numpy view of a frame's plane ``p`` of samples of ``dtype`` (line padding left out)."""
    return np.frombuffer(p, dtype).reshape(p.height, p.line_size // np.dtype(dtype).itemsize)[:, :p.width]


def decode_rgb(frame: av.VideoFrame, spec: ColourSpec) -> np.ndarray:
    """A decoded frame -> float32 RGB ``(3, H, W)`` in [0, 1], read with ``spec``."""
    fmt = frame.format.name
    bits = bit_depth(fmt)
    if spec.matrix == SPC_RGB or is_gray_format(fmt):
        arr = frame.to_ndarray(format="rgb24" if bits <= 8 else "rgb48le", interpolation=RESAMPLE)
        top = np.float32(255.0 if bits <= 8 else 65535.0)
        return np.ascontiguousarray(arr.transpose(2, 0, 1), dtype=np.float32) / top
    p444 = planar444(fmt)
    if fmt != p444:
        frame = frame.reformat(format=p444, interpolation=RESAMPLE)
    return yuv_to_rgb(frame_planes(frame), spec, bit_depth(p444))


def planes_to_frame(planes: np.ndarray | FramePlanes, pix_fmt: str, spec: ColourSpec) -> av.VideoFrame:
    """Integer planes (an array of 4:4:4 or packed RGB ones from :func:`vsr.video.planes.encode_planes`, or
    :class:`FramePlanes`, Y/Cb/Cr or G/B/R, used as is) -> a frame in ``pix_fmt``, tagged with ``spec``; swscale makes
    ``pix_fmt`` of planes in another format (4:4:4 ones of a packed or semi-planar format)."""
    p444 = planar444(pix_fmt)
    if spec.matrix == SPC_RGB and isinstance(planes, FramePlanes):  # G, B, R planes; or grey's Y, full range
        f = planes.frame
        if f.format.name != pix_fmt:
            f = f.reformat(format=pix_fmt, src_color_range=RANGE_FULL, dst_color_range=RANGE_FULL,
                           interpolation=RESAMPLE)
    elif spec.matrix == SPC_RGB:
        fmt = "rgb24" if planes.dtype == np.uint8 else "rgb48le"
        f = av.VideoFrame.from_ndarray(np.ascontiguousarray(planes.transpose(1, 2, 0)), format=fmt)
        if fmt != pix_fmt:
            f = f.reformat(format=pix_fmt, interpolation=RESAMPLE)
    else:
        f = planes.frame if isinstance(planes, FramePlanes) else planes_frame(planes, p444)
        if f.format.name != pix_fmt:
            f = f.reformat(format=pix_fmt, src_color_range=spec.range, dst_color_range=spec.range,
                           interpolation=RESAMPLE)
        f.colorspace = spec.matrix
        f.color_range = spec.range
    f.color_primaries = spec.primaries
    f.color_trc = spec.transfer
    return f
