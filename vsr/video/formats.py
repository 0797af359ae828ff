"""Which pixel format an output keeps of its source's: RGB stays RGB and grey stays grey where a lossless codec
holds them, alpha is dropped (with a word), at the source's bit depth where the codec has it.

The encoder's choice itself is :func:`vsr.video.encoder_choice.choose_pix_fmt`; these are its rules about kinds of
format, kept apart from the codec options there.
"""

from __future__ import annotations

import warnings

import av

from vsr.video.colour import bit_depth, is_gray_format, is_rgb_format

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


def alpha_warning(pix_fmt: str) -> str | None:
    """One line where the source has alpha: the model upscales colour, and the output is opaque."""
    if has_alpha(pix_fmt):
        return f"the source's alpha channel ({pix_fmt}) is dropped: vsr upscales colour only, the output is opaque"
    return None


def warn_alpha_dropped(pix_fmt: str) -> None:
    """:func:`alpha_warning` said as a warning, where there is one."""
    said = alpha_warning(pix_fmt)
    if said is not None:
        warnings.warn(said, stacklevel=3)


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


__all__ = ["LOSSLESS_CODECS", "alpha_warning", "gray_output", "has_alpha", "rgb_format", "rgb_output",
           "warn_alpha_dropped", "without_alpha"]
