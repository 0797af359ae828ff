"""Which pixel format an output keeps of its source's: RGB stays RGB and grey stays grey where a lossless codec
holds them, alpha kept where the codec has a format for it (else dropped, with a word), at the source's bit
depth where the codec has it.

The encoder's choice itself is :func:`vsr.video.encoder_choice.choose_pix_fmt`; these are its rules about kinds of
format, kept apart from the codec options there.
"""

from __future__ import annotations


import av

from vsr.video.colour import bit_depth, is_gray_format, is_rgb_format
from vsr.video.planes import chroma_shifts

# Lossless codecs, in which an RGB or grey source keeps its kind by default (a lossless RGB workflow stays
# lossless).  x265's and VP9's GBR, and H.264's and HEVC's 4:0:0, are lossy and fewer players decode them: those
# take YUV unless --pix-fmt asks otherwise.  (libx264rgb takes RGB only: RGB whatever the source.)
LOSSLESS_CODECS = frozenset({"ffv1", "png"})


def has_alpha(pix_fmt: str) -> bool:
    """Whether ``pix_fmt`` carries an alpha channel (yuva420p, gbrap, ya8, rgba, ...)."""
    f = av.VideoFormat(pix_fmt)
    n = len(f.components)
    return not f.has_palette and (n == 4 or (n == 2 and is_gray_format(pix_fmt)))


def without_alpha(pix_fmt: str) -> str:
    """The format of the same kind, layout and depth without alpha (yuva420p10le -> yuv420p10le, gbrap ->
    gbrp, ya16le -> gray16le, rgba -> rgb24); ``pix_fmt`` itself where it has none."""
    if not has_alpha(pix_fmt):
        return pix_fmt
    deep = bit_depth(pix_fmt) > 8
    if is_rgb_format(pix_fmt) and not pix_fmt.startswith("gbr"):
        return "rgb48le" if deep else "rgb24"
    name = pix_fmt.replace("yuva", "yuv").replace("gbrap", "gbrp")
    if pix_fmt.startswith("ya"):
        name = "gray16" + pix_fmt[4:] if deep else "gray"
    return name if name in av.video.format.names else pix_fmt


def alpha_warning(info, out: str, codec: str, requested: str | None = None) -> str | None:
    """One line where the source (its :class:`~vsr.video.source.VideoInfo`) has alpha and the output (``out``, of
    ``codec``) has none."""
    if not info.has_alpha or has_alpha(out) or out == "pal8":  # (a GIF's palette: transparent or not)
        return None
    src = info.pix_fmt
    why = f"--pix-fmt {requested} has none" if requested else f"{codec} has no format with alpha"
    return (f"the source's alpha channel ({src}) is dropped: {why} (VP9 in .webm or .mkv, ProRes 4444 in .mov, "
            "FFV1 or PNG frames keep it: the default codec of .webm, .mkv and .mov does)")


def depth_warning(info, out: str, codec: str, requested: str | None = None) -> str | None:
    """One line where the output (``out``, of ``codec``, not asked for with ``--pix-fmt``) has fewer bits a sample
    than the source (a 12-bit ProRes or FFV1 master into H.264, which takes 10 at most)."""
    src_bits, out_bits = info.bits, bit_depth(out)
    if requested or out == "pal8" or not src_bits or not out_bits or out_bits >= src_bits:
        return None
    hint = "" if codec in LOSSLESS_CODECS else " (FFV1 in .mkv keeps them: -c ffv1)"
    return (f"the source's {src_bits}-bit samples ({info.pix_fmt}) are written in {out_bits} bits: {codec} takes no "
            f"more{hint}")


def format_warnings(info, out: str, codec: str, requested: str | None = None) -> list[str]:
    """What the output format ``out`` loses of the source's, in a line each: its alpha, its depth."""
    return [w for w in (alpha_warning(info, out, codec, requested), depth_warning(info, out, codec, requested)) if w]


def _plain_rgb(pix_fmt: str) -> bool:
    """An RGB format of three integer components of 8 bits or more, no alpha or padding bits inside one."""
    f = av.VideoFormat(pix_fmt)
    comps = f.components
    return (is_rgb_format(pix_fmt) and not has_alpha(pix_fmt) and not f.has_palette and len(comps) == 3
            and min(c.bits for c in comps) >= 8 and "x2" not in pix_fmt and "f16" not in pix_fmt
            and "f32" not in pix_fmt)


def rgb_format(formats: list[str], bits: int) -> str | None:
    """The RGB format of ``formats`` for a picture of ``bits`` depth: the shallowest at least as deep (else the
    deepest), planar (G, B, R planes, written directly) before packed, then in the codec's order; None where it
    takes none."""
    plain = [f for f in formats if _plain_rgb(f)]
    if not plain:
        return None

    def key(f: str) -> tuple:
        d = bit_depth(f)
        return (d < bits, abs(d - bits), not f.startswith("gbrp"), formats.index(f))

    return min(plain, key=key)


def gray_output(codec: str, formats: list[str], src: str) -> bool:
    """Whether a grey ``src`` stays grey (in its own format) in ``codec``: a lossless one that takes it."""
    return is_gray_format(src) and src in formats and codec in LOSSLESS_CODECS


def rgb_output(codec: str, formats: list[str], src: str) -> bool:
    """Whether ``codec``'s output of a ``src`` picture is RGB: an RGB source into one of
    :data:`LOSSLESS_CODECS`, or any source into a codec that takes no YUV (libx264rgb)."""
    return ((is_rgb_format(src) and codec in LOSSLESS_CODECS)
            or not any(not (is_rgb_format(f) or is_gray_format(f)) for f in formats))


def with_alpha(pix_fmt: str) -> str | None:
    """The planar format of ``pix_fmt``'s layout and depth with an alpha plane (yuv420p -> yuva420p, gbrp10le ->
    gbrap10le), or None where FFmpeg has none."""
    if pix_fmt.startswith("yuv") and not pix_fmt.startswith("yuvj"):
        name = "yuva" + pix_fmt[3:]
    elif pix_fmt.startswith("gbrp"):
        name = "gbrap" + pix_fmt[4:]
    else:
        return None
    return name if name in av.video.format.names else None


def depth_suffix(bits: int) -> str:
    """The suffix of FFmpeg's planar formats for ``bits`` a sample: ``p`` (8 bits or fewer: 1-bit grey, 4-bit
    palettes), ``p10le``, ``p12le``, ``p16le`` (9 bits in 10; 14 in 16)."""
    return "p" if bits <= 8 else {9: "p10le", 10: "p10le", 12: "p12le"}.get(bits, "p16le")


def planar_twin(pix_fmt: str) -> str:
    """The planar format of a source's colour in ``pix_fmt``, for an encoder that does not take ``pix_fmt``
    itself: packed and semi-planar YUV as planar YUV of its subsampling and depth (uyvy422 -> yuv422p, p010le ->
    yuv420p10le, nv24 -> yuv444p, y210le -> yuv422p10le), 1-bit grey as 8-bit grey, a Bayer mosaic and DCI's XYZ as
    planar RGB of their depth (what they are read as: colour, every sample); ``pix_fmt`` itself otherwise."""
    bits = bit_depth(pix_fmt)
    if pix_fmt.startswith(("monob", "monow")):
        return "gray"
    if pix_fmt.startswith(("bayer_", "xyz")):
        return "gbrp" if bits <= 8 else "gbrp12le" if bits == 12 else "gbrp16le"
    if is_rgb_format(pix_fmt) or is_gray_format(pix_fmt) or pix_fmt.startswith("yuvj"):
        return pix_fmt
    sub = {(0, 0): "444", (1, 0): "422", (1, 1): "420", (2, 0): "411", (2, 2): "410", (0, 1): "440"}
    layout = sub.get(chroma_shifts(pix_fmt))
    twin = f"yuv{layout}{depth_suffix(bits)}" if layout else pix_fmt
    return twin if twin in av.video.format.names else pix_fmt


def _kind(pix_fmt: str) -> int:
    return 0 if is_rgb_format(pix_fmt) else 1 if is_gray_format(pix_fmt) else 2


# Formats with alpha an encoder lists but refuses: libvpx's others at normal strictness ("not widely supported");
# x265's alpha layer (MV-HEVC) where x265 was built without it, as distributions build it, and few players read.
ALPHA_ONLY = {"libvpx-vp9": ("yuva420p",), "libx265": ()}


def alpha_formats(codec: str, formats: list[str]) -> list[str]:
    """The formats with alpha (integer samples) that ``codec``, taking ``formats``, encodes."""
    return [f for f in formats if has_alpha(f) and not ("f16" in f or "f32" in f) and f in ALPHA_ONLY.get(codec, (f,))]


def alpha_pix_fmt(colour_fmt: str, formats: list[str]) -> str | None:
    """The format of ``formats`` (a codec's :func:`alpha_formats`) that holds alpha beside colour in
    ``colour_fmt`` (the format the output's colour would have without it): its alpha twin where the codec takes
    that, else the one nearest it (the same kind, RGB or grey or YUV; not shallower; not more subsampled); None
    where the codec takes no format with alpha."""
    twin = with_alpha(colour_fmt) or {"gray": "ya8", "gray16le": "ya16le", "gray16be": "ya16be", "rgb24": "rgba",
                                      "rgb48le": "rgba64le", "rgb48be": "rgba64be", "bgr0": "bgra"}.get(colour_fmt)
    if twin in formats:
        return twin
    if not formats:
        return None
    bits, kind, sub = bit_depth(colour_fmt), _kind(colour_fmt), sum(chroma_shifts(colour_fmt))

    def key(f: str) -> tuple:
        d = bit_depth(f)
        return (_kind(f) != kind, sum(chroma_shifts(f)) > sub, d < bits, abs(d - bits), formats.index(f))

    return min(formats, key=key)


def deep_default_line(codec: str, eight_bit: str, pix_fmt: str, bits: int, holds_h264: bool) -> str | None:
    """What ``vsr upscale`` says where a source of ``bits`` > 8 (not HDR) got ``codec`` by default, not the
    ``eight_bit`` default of an 8-bit one (:func:`vsr.video.encoder_choice.default_codec`); None where the same."""
    if codec == eight_bit:
        return None
    name = {"libx265": "HEVC", "libsvtav1": "AV1"}.get(codec, codec)
    h264 = " (-c libx264 writes 10-bit H.264, High 10, which few players decode)" if holds_h264 else ""
    return f"codec: {codec}, {bit_depth(pix_fmt)}-bit {name}, for the source's {bits} bits{h264}"


__all__ = ["ALPHA_ONLY", "LOSSLESS_CODECS", "alpha_formats", "alpha_pix_fmt", "alpha_warning", "deep_default_line",
           "depth_suffix", "depth_warning", "format_warnings", "gray_output", "has_alpha", "planar_twin", "rgb_format",
           "rgb_output", "with_alpha", "without_alpha"]
