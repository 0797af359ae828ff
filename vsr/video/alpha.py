"""A source's alpha channel (a matte: soft edges, holes, a logo over video): read from each decoded frame, kept by
frame as captions are (:class:`~vsr.video.captions.FrameStore`), upscaled and written into the output's frame of
the same timestamp where its format holds alpha.

The model upscales colour only.  Alpha is upscaled bicubically (OpenCV's ``INTER_CUBIC``: Keys' kernel, a =
-0.75, pixel centres aligned as the model's own x4 base is), in floating point from the source's depth to the
output's, clipped to [0, 1], rounded half up.  Colour and alpha stay straight (not premultiplied), as every
format FFmpeg decodes stores them.

Where alpha comes from: any pixel format with an alpha component (yuva*, gbrap*, rgba and its packings, ya8,
ya16), a palette with entries that are not opaque (:func:`transparent_palette`); VP8 and VP9 in Matroska/WebM keep it
beside each frame (``BlockAdditional``, the track's ``AlphaMode`` 1), which FFmpeg's own decoders ignore and libvpx's
decode (:func:`decoded`).  Where it goes: :func:`vsr.video.formats.alpha_pix_fmt` picks the output format.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import av
import numpy as np

from vsr.video.colour import ColourSpec
from vsr.video.damage import past_damage
from vsr.video.formats import has_alpha, with_alpha, without_alpha
from vsr.video.planes import PlaneFormat


# FFmpeg's VP8/VP9 decoders drop the alpha stream Matroska carries beside each frame; libvpx's decode it
ALPHA_DECODERS = {"vp8": "libvpx", "vp9": "libvpx-vp9"}


@dataclass(frozen=True)
class Alpha:
    """One frame's alpha plane as decoded: integers ``plane (H, W)`` (uint8 or uint16), opaque at ``top``."""

    plane: np.ndarray
    top: int


def has_alpha_stream(st) -> bool:
    """Whether ``st`` says it carries alpha beside its pictures (Matroska's ``AlphaMode`` 1, FFmpeg's
    ``alpha_mode`` tag)."""
    return any(k.lower() == "alpha_mode" and str(v).strip() == "1" for k, v in st.metadata.items())


def alpha_decoder(st, said: bool = False) -> av.CodecContext | None:
    """A decoder for ``st`` that gives its alpha where FFmpeg's own drops it (VP8/VP9 with ``AlphaMode`` 1 and
    libvpx in this FFmpeg), else None: decode as usual.  ``said``: where libvpx is missing, say once that the
    alpha is lost."""
    cc = st.codec_context
    name = ALPHA_DECODERS.get(cc.codec.canonical_name if cc is not None else "")
    if name is None or not has_alpha_stream(st):
        return None
    if name not in av.codecs_available:
        if said:
            warnings.warn(f"the video's alpha (beside each {cc.codec.canonical_name.upper()} frame) needs libvpx's "
                          f"decoder ({name}), which this FFmpeg lacks: dropped", stacklevel=3)
        return None
    ctx = av.CodecContext.create(name, "r")
    ctx.thread_type = "AUTO"
    return ctx


def decoded(c, st) -> Iterator[av.VideoFrame]:
    """``c.decode(st)``, through :func:`alpha_decoder` where ``st`` needs it."""
    ctx = alpha_decoder(st)
    yield from past_damage(c, st, lambda packet: packet_frames(ctx, packet))  # (a damaged packet skipped)
    yield from drained(ctx)


def packet_frames(ctx: av.CodecContext | None, packet) -> list[av.VideoFrame]:
    """The frames ``packet`` decodes to: by its stream's decoder (``ctx`` None), else by ``ctx`` (whose drain,
    :func:`drained`, is the caller's, after the last packet: a demuxer's empty end packet is skipped)."""
    if ctx is None:
        return packet.decode()
    return ctx.decode(packet) if packet.size else []


def drained(ctx: av.CodecContext | None) -> list[av.VideoFrame]:
    """What ``ctx`` still holds once its packets are in (nothing where it is None or drained already)."""
    if ctx is None:
        return []
    try:
        return ctx.decode(None)
    except av.EOFError:
        return []


def transparent_palette(frame: av.VideoFrame) -> bool:
    """Whether ``frame`` is a palette picture (pal8: a PNG, an old QuickTime codec) whose palette has an entry
    that is not opaque."""
    if not frame.format.has_palette or len(frame.planes) < 2:
        return False
    palette = np.frombuffer(frame.planes[1], np.uint32)[:256]  # (native-endian ARGB)
    return bool(((palette >> 24) < 255).any())


def has_alpha_frame(frame: av.VideoFrame) -> bool:
    """Whether a decoded frame has alpha: a format with an alpha component, or a palette that is not opaque."""
    return has_alpha(frame.format.name) or transparent_palette(frame)


def alpha_of(frame: av.VideoFrame) -> Alpha | None:
    """The alpha plane of a decoded frame, or None where its format has none.  A planar format's alpha plane is
    copied as it is; a packed one's (rgba, ya8, ...) and a palette's come out of swscale's RGBA of its depth."""
    fmt = frame.format
    if fmt.has_palette:
        return Alpha(np.ascontiguousarray(frame.to_ndarray(format="rgba")[:, :, 3]), 255)
    comp = next((c for c in fmt.components if c.is_alpha), None)
    if comp is None:
        return None
    if sum(c.plane == comp.plane for c in fmt.components) == 1:
        p = frame.planes[comp.plane]
        dt = np.dtype(np.uint8) if comp.bits <= 8 else np.dtype(">u2" if fmt.is_big_endian else "<u2")
        rows = np.frombuffer(p, dt).reshape(p.height, p.line_size // dt.itemsize)[:, :p.width]
        return Alpha(rows.astype(dt.newbyteorder("=")), (1 << comp.bits) - 1)
    deep = comp.bits > 8
    rgba = frame.to_ndarray(format="rgba64le" if deep else "rgba")
    return Alpha(np.ascontiguousarray(rgba[:, :, 3]), 65535 if deep else 255)


def upscale_into(alpha: Alpha | None, out: np.ndarray, top: int) -> None:
    """``alpha`` upscaled to ``out``'s size (bicubic), as integers 0..``top`` into ``out`` (a view of an output
    frame's alpha plane); opaque where there is none (a frame whose alpha did not decode)."""
    if alpha is None:
        out[...] = top
        return
    import cv2

    h, w = out.shape
    x = cv2.resize(alpha.plane.astype(np.float32) * np.float32(1 / alpha.top), (w, h),
                   interpolation=cv2.INTER_CUBIC)
    x = cv2.max(cv2.min(x, 1.0), 0.0)  # (bicubic overshoots at hard edges)
    out[...] = x * np.float32(top) + np.float32(0.5)  # rounded half up: the cast truncates what is >= 0


def output_planes(pix_fmt: str, colour: ColourSpec) -> tuple[PlaneFormat, str | None]:
    """The planes the post stage fills for an output in ``pix_fmt`` and, where that has alpha, the planar format
    with alpha of the frame they are three planes of (its fourth is the alpha's; swscale packs it into
    ``pix_fmt`` where that is packed: rgba, argb, ya8, ...); None: the sink's own planes, no alpha."""
    if not has_alpha(pix_fmt):
        return PlaneFormat.of(pix_fmt, colour), None
    fmt = PlaneFormat.of(without_alpha(pix_fmt), colour)
    if fmt.packed:  # R, G, B to be packed: as G, B, R planes of a gbrap frame instead
        fmt = PlaneFormat.of("gbrp" if fmt.bits <= 8 else "gbrp16le", colour)
    frame_fmt = with_alpha(fmt.pix_fmt)
    if frame_fmt is None:
        raise ValueError(f"no planar format with alpha for {fmt.pix_fmt} (output {pix_fmt})")
    return fmt, frame_fmt


__all__ = ["ALPHA_DECODERS", "Alpha", "alpha_decoder", "alpha_of", "decoded", "drained", "has_alpha_frame",
           "has_alpha_stream", "output_planes", "packet_frames", "transparent_palette", "upscale_into"]
