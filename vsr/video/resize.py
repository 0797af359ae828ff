"""Outputs between the source's size and the model's x4: ``--scale S`` (1 to 4; 2 makes a 1080p source 2160p) or
``--scale 2160p`` (the output's shorter side, whatever the source's: a batch of mixed sizes made one).

The model still upscales x4; each finished output frame is then downscaled to S times the source (swscale's
Lanczos, which widens its kernel with the ratio, so the downscale does not alias; in the output's own pixel format,
as FFmpeg's ``scale`` filter does).  Each side is rounded to a whole number of chroma samples (at least even);
where that rounding changes the picture's shape, the sample aspect ratio says so (the display shape stays the
source's, as FFmpeg's ``scale`` filter keeps it).  What is in pixels beside the picture (an HDR10+ window, a
cubemap's padding) is scaled by the same factor (:func:`factor`).
"""

from __future__ import annotations

import re
from fractions import Fraction

import av
import numpy as np
from av.video.reformatter import Interpolation, VideoReformatter

from vsr.errors import InputError
from vsr.video.codecs import ffmpeg_holds
from vsr.video.colour import plane_view
from vsr.video.planes import chroma_shifts

MODEL_SCALE = 4
MIN_SCALE = 1
# swscale's Lanczos (3 lobes), rounded accurately (a 10- or 16-bit frame keeps its low bits)
DOWNSCALE = Interpolation.LANCZOS | Interpolation.ACCURATE_RND


def parse_scale(text: str | int | float | Fraction) -> str:
    """``--scale``: a factor from 1 to 4 (``2``, ``1.5``, ``3/2``) or a height (``2160p``: the output's shorter side,
    as "1080p" names a video, upright or not) -> its canonical text (``"2"``, ``"3/2"``, ``"2160p"``), what a job
    keeps; anything else is one InputError line."""
    shown = str(text) if len(str(text)) <= 24 else f"{str(text)[:21]}..."
    lines = re.fullmatch(r"\s*([0-9]{1,6})\s*[pP]\s*", str(text))
    if lines:
        if int(lines[1]) < 1:
            raise InputError(f"--scale {shown}: a height of at least 1 line")
        return f"{int(lines[1])}p"
    try:
        value = Fraction(str(text).strip())
    except (ValueError, ZeroDivisionError):
        raise InputError(f"--scale must be a number from {MIN_SCALE} to {MODEL_SCALE} (e.g. 2 or 1.5) or a height "
                         f"(e.g. 2160p), not {shown!r}") from None
    if not MIN_SCALE <= value <= MODEL_SCALE:
        why = ("EDVR upscales x4; vsr does not upscale further" if value > MODEL_SCALE else
               "a smaller picture than the source's needs no model")
        raise InputError(f"--scale {shown}: from {MIN_SCALE} to {MODEL_SCALE} ({why})")
    return str(value)


def factor_of(scale: str | Fraction | None, width: int, height: int,
              model_scale: int = MODEL_SCALE) -> tuple[Fraction, str | None]:
    """The factor ``--scale`` (:func:`parse_scale`'s text; None: not given) makes a ``width`` x ``height`` source,
    and for a height it cannot reach within 1 to ``model_scale``, the line that says so (else None)."""
    if scale is None:
        return Fraction(model_scale), None
    text = parse_scale(scale)
    if not text.endswith("p"):
        return Fraction(text), None
    want, short = int(text[:-1]), min(width, height)
    factor = Fraction(want, short)
    if factor > model_scale:
        return Fraction(model_scale), (f"--scale {text}: a {short}p source becomes {short * model_scale}p (EDVR "
                                       f"upscales x{model_scale} at most)")
    if factor < MIN_SCALE:
        return Fraction(MIN_SCALE), (f"--scale {text}: the source is {short}p already; kept at its size (the "
                                     "model's restoration alone)")
    return factor, None


def output_size(width: int, height: int, scale: Fraction | int, pix_fmt: str | None = None) -> tuple[int, int]:
    """The output frame of a ``width`` x ``height`` source at ``scale``: each side exact where that is a whole
    number of ``pix_fmt``'s chroma samples (x4 always is), else the nearest even one that is."""
    scale = Fraction(scale)
    sub_x, sub_y = chroma_shifts(pix_fmt) if pix_fmt else (0, 0)

    def side(n: int, shift: int) -> int:
        exact = n * scale
        if exact.denominator == 1 and exact % (1 << shift) == 0:
            return int(exact)
        step = max(2, 1 << shift)
        return max(step, int((exact / step + Fraction(1, 2)) // 1) * step)

    return side(width, sub_x), side(height, sub_y)


def scaled_size(width: int, height: int, scale: str | Fraction | None, model_scale: int,
                pix_fmt: str | None) -> tuple[int, int]:
    """The output frame of a ``width`` x ``height`` source made ``model_scale`` times larger by the model, then
    downscaled as ``--scale`` says (:func:`factor_of`; None: not downscaled); an InputError where the model's frame,
    held before its downscale, is larger than FFmpeg's frames can be."""
    factor, _ = factor_of(scale, width, height, model_scale)
    if factor == model_scale:
        return width * model_scale, height * model_scale
    if factor > model_scale:
        raise InputError(f"--scale {scale}: the model upscales x{model_scale}; vsr does not upscale further")
    big_w, big_h = width * model_scale, height * model_scale
    if not ffmpeg_holds(big_w, big_h):
        raise InputError(f"the model's x{model_scale} frame, {big_w}x{big_h}, is larger than FFmpeg's frames can "
                         "be (about 268 megapixels), also where --scale makes the output smaller; use a smaller "
                         "source")
    return output_size(width, height, factor, pix_fmt)


def sample_aspect(sar: Fraction | None, width: int, height: int, out_width: int, out_height: int) -> Fraction | None:
    """The sample aspect ratio that shows an ``out_width`` x ``out_height`` frame made from a ``width`` x
    ``height`` one of ``sar`` (None: square samples) at the source's display shape: ``sar`` itself where the sides
    grew alike."""
    stretch = Fraction(width * out_height, height * out_width)
    if stretch == 1:
        return sar
    return (sar or Fraction(1)) * stretch


def factor(width: int, out_width: int) -> Fraction:
    """How many times the output is as wide as the source: what pixel positions beside the picture are scaled
    by."""
    return Fraction(out_width, width)


def resized(frame: av.VideoFrame, width: int, height: int, reformatter: VideoReformatter | None = None
            ) -> av.VideoFrame:
    """``frame`` at ``width`` x ``height`` in its own pixel format and colour tags (itself where it is that
    size already).  ``reformatter``: a sink's own, kept for its frames (swscale's Lanczos set up once, not per
    frame: 8K to 4K 23-32 ms a frame against 35-47)."""
    if (frame.width, frame.height) == (width, height):
        return frame
    out = (reformatter or VideoReformatter()).reformat(frame, width=width, height=height, interpolation=DOWNSCALE,
                                                       src_color_range=frame.color_range,
                                                       dst_color_range=frame.color_range)
    out.colorspace, out.color_range = frame.colorspace, frame.color_range
    out.color_primaries, out.color_trc = frame.color_primaries, frame.color_trc
    return out


def resized_planes(planes: np.ndarray, width: int, height: int,
                   reformatter: VideoReformatter | None = None) -> np.ndarray:
    """R, G, B planes ``(3, H, W)`` (8 or 16 bit) at ``width`` x ``height`` (as :func:`resized`)."""
    if planes.shape[1:] == (height, width):
        return planes
    deep = planes.dtype == np.uint16
    src = av.VideoFrame(planes.shape[2], planes.shape[1], "gbrp16le" if deep else "gbrp")
    for view, c in zip((plane_view(p, planes.dtype) for p in src.planes), (1, 2, 0)):
        view[...] = planes[c]
    src.color_range = 2  # (RGB: full range, nothing to convert)
    small = resized(src, width, height, reformatter)
    out = np.empty((3, height, width), planes.dtype)
    for p, c in zip(small.planes, (1, 2, 0)):
        out[c] = plane_view(p, planes.dtype)
    return out
