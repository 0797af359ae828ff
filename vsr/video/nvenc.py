"""NVIDIA's hardware encoders (NVENC: ``h264_nvenc``, ``hevc_nvenc``, ``av1_nvenc``): vsr's knobs in their terms,
and whether one opens here.

* ``--crf Q`` is constant quality: ``rc=vbr`` with ``cq=Q`` and no bitrate target (``b=0``), the NVENC way of
  x264's CRF (the same number is not the same quality: NVENC's scale is its own).
* ``--preset`` takes NVENC's ``p1`` (fastest) .. ``p7`` (best), or x264's names mapped onto them
  (:data:`PRESET_OF`: ``medium`` is ``p4``, NVENC's own default).
* Frames go to the encoder as they are (system memory, planar YUV: yuv420p, yuv444p), no conversion on the way.

FFmpeg builds carry these encoders whether or not the machine has an NVIDIA GPU with NVENC (an H100 or A100 has
none): :func:`nvenc_problem` opens a small one in memory, once per process, and says why it did not open.
"""

from __future__ import annotations

import functools
from fractions import Fraction

import av
import av.logging

NVENC = ("h264_nvenc", "hevc_nvenc", "av1_nvenc")
PRESETS = ("p1", "p2", "p3", "p4", "p5", "p6", "p7")
PRESET_OF = {"ultrafast": "p1", "superfast": "p1", "veryfast": "p2", "faster": "p3", "fast": "p3", "medium": "p4",
             "slow": "p5", "slower": "p6", "veryslow": "p7", "placebo": "p7"}
CQ_RANGE = (1, 51)  # NVENC's cq option (0 there means "automatic", not lossless)
DEFAULTS = {"preset": "p4"}  # what FFmpeg's NVENC encoders run with where none is given


def is_nvenc(codec: str) -> bool:
    return codec in NVENC


def nvenc_options(crf: float | None, preset: str | None) -> dict[str, str]:
    """``--crf`` and ``--preset`` as NVENC options (see the module's docstring)."""
    opts = {}
    if crf is not None:
        opts.update(rc="vbr", cq=f"{crf:g}", b="0")
    if preset is not None:
        opts["preset"] = PRESET_OF.get(preset.lower(), preset.lower())
    return opts


@functools.cache
def nvenc_problem(codec: str) -> str | None:
    """None where ``codec`` (an NVENC encoder) opens here, else why not, in FFmpeg's words (one line)."""
    if codec not in av.codecs_available:
        return "this FFmpeg has no such encoder"
    ctx = av.CodecContext.create(codec, "w")
    ctx.width, ctx.height, ctx.pix_fmt, ctx.time_base = 256, 128, "yuv420p", Fraction(1, 25)
    level = av.logging.get_level()
    av.logging.set_level(av.logging.ERROR)
    try:
        with av.logging.Capture() as logs:
            try:
                ctx.open()
            except (av.FFmpegError, OSError, ValueError) as e:
                said = [m.strip() for lvl, _, m in logs if lvl <= av.logging.ERROR and m.strip()]
                return said[0] if said else (getattr(e, "strerror", None) or str(e).splitlines()[0])
    finally:
        av.logging.set_level(level)
    return None


__all__ = ["CQ_RANGE", "DEFAULTS", "NVENC", "PRESETS", "PRESET_OF", "is_nvenc", "nvenc_options", "nvenc_problem"]
