"""Encoder choice and options: codec and pixel format, option handling and checks, the encoder memory table.

Options are checked when the encoder opens: an option the encoder does not have, a value it rejects, a
``--crf`` outside the codec's range and an output larger than the codec can encode each give one line
naming the cause (:class:`vsr.errors.InputError`).
"""

from __future__ import annotations

import io
import logging
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

import av
import av.logging

from vsr.errors import InputError
from vsr.video.colour import is_gray_format, is_rgb_format
from vsr.video.nvenc import CQ_RANGE, NVENC, is_nvenc, nvenc_options, nvenc_problem
from vsr.video.nvenc import DEFAULTS as NVENC_DEFAULTS, PRESETS as NVENC_PRESETS
from vsr.video.source import VideoInfo

log = logging.getLogger(__name__)

DEFAULT_CODEC = "libx264"
FALLBACK_CODECS = ("libsvtav1", "libvpx-vp9", "ffv1", "mpeg4")


@dataclass(frozen=True)
class EncoderSettings:
    """``codec``, ``crf``, ``preset``, ``pix_fmt`` (None: the source's, where the codec allows), extra
    encoder ``options`` (``-x key=value``), ``quiet`` (encoders that print to the terminal themselves,
    SVT-AV1 and x265, print only errors: their banner of settings is noise in a run's output; False under
    ``vsr -v``), the ``container`` of a stream output (``--format``) and ``hardware`` (no ``codec`` given: NVENC's
    H.264 where it opens here and the container holds it; ``vsr upscale`` on a GPU backend sets it)."""

    codec: str | None = None  # None: libx264 (h264_nvenc with hardware), or what the container holds
    crf: float | None = None
    preset: str | None = None
    pix_fmt: str | None = None
    options: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    quiet: bool = True
    container: str | None = None  # output "-" only: y4m, nut or matroska (a file's follows its suffix)
    hardware: bool = False


BIG_OUTPUT_PIXELS = 3840 * 2160
# libx264 beyond 4K (docs/benchmarks.md, scripts/bench_encoder_memory.py, 7680x4320, 2 cores): the defaults
# (frame threads, rc-lookahead 40, 3 refs, 3 B-frames) hold 5.2 GB; rc-lookahead 10: 3.4 GB; sliced threads and
# no lookahead: 1.7 GB; and with 1 ref and 1 B-frame: 1.1 GB.  vsr takes the last unless the user sets any of
# x264-params or rc-lookahead, or asks for ultrafast (0.56 GB already).  CRF keeps the quality; files grow a bit.
BIG_OUTPUT_X264_PARAMS = "sliced-threads=1:rc-lookahead=0:sync-lookahead=0:ref=1:bframes=1"
# Encoder memory per output megapixel, for the memory plan (vsr.pipeline.memory): measured at 7680x4320.
ENCODER_MB_PER_MPX = {"libx264": 158.0, "libx264-big": 34.0, "libx264-ultrafast": 17.0, "ffv1": 8.0,
                      "prores_ks": 8.0, "png": 0.0,
                      "wrapped_avframe": 0.0, "rawvideo": 0.0}  # pass frames through, holding none (not measured)
ENCODER_MB_PER_MPX_OTHER = 60.0  # not measured: a generous guess (a dozen frames in flight)

# The quality scale of --crf per codec (FFmpeg's own option ranges are wider or unchecked: libx264 takes 99).
CRF_RANGE = {"libx264": (0, 51), "libx265": (0, 51), "libsvtav1": (0, 63), "libvpx-vp9": (0, 63),
             "libaom-av1": (0, 63), **{c: CQ_RANGE for c in NVENC}}
# x264's and x265's presets: checked here, since the libraries print a line of their own to stderr for a wrong one.
X26X_PRESETS = ("ultrafast", "superfast", "veryfast", "faster", "fast", "medium", "slow", "slower", "veryslow",
                "placebo")
PRESETS = {"libx264": X26X_PRESETS, "libx265": X26X_PRESETS, **{c: NVENC_PRESETS for c in NVENC}}
# Largest frame (width, height) a codec encodes, where it is below FFmpeg's own limit (measured with PyAV).
MAX_SIZE = {"libx264": (16384, 16384), "libsvtav1": (16384, 8704), "mpeg4": (8191, 8191)}
# FFmpeg refuses any frame with (8 * width + 1024) * (height + 128) >= 2**31 - 1 (av_image_check_size2).
FFMPEG_MAX_PLANE = 2**31 - 1
# Each encoder's own CRF and preset where vsr passes none (FFmpeg leaves them to the library): what a run
# reports as the effective ones.  tests/video/test_encoder_choices.py checks each against the encoder installed
# (an output with these given explicitly is the same bytes).
ENCODER_DEFAULTS = {"libx264": {"crf": "23", "preset": "medium"}, "libx265": {"crf": "28", "preset": "medium"},
                    "libsvtav1": {"crf": "35", "preset": "8"}}
# Picture codecs: each frame a still image.  FFmpeg puts them into MP4 (object types for PNG, JPEG, JPEG 2000)
# and AVI, but players do not play them there; QuickTime and Matroska are their video containers.
IMAGE_CODECS = frozenset("png apng mjpeg jpeg2000 libopenjpeg bmp tiff gif qoi libwebp libwebp_anim jpegls ljpeg "
                         "targa sgi dpx ppm pgm pam pbm".split())
# (Motion JPEG also in AVI: cameras write it so, and players read it there.)
IMAGE_CONTAINERS = {"mov": ".mov", "matroska": ".mkv"}
IMAGE_CONTAINERS_OF = {"mjpeg": {**IMAGE_CONTAINERS, "avi": ".avi"}}
# The containers a "cannot hold" message suggests, by format name.
COMMON_CONTAINERS = {"mp4": ".mp4", "matroska": ".mkv", "mov": ".mov", "webm": ".webm"}
# What encoders log (at warning level) for an option they did not take while opening anyway.
REJECTED_OPTION = re.compile(r"Error parsing option|Unknown option|Invalid value for|bad value for", re.I)


def choose_pix_fmt(codec: av.Codec, info: VideoInfo, requested: str | None) -> str:
    formats = [f.name for f in (codec.video_formats or [])]
    if requested is not None:
        try:
            av.VideoFormat(requested)
        except (ValueError, av.FFmpegError):
            raise InputError(f"unknown --pix-fmt {requested!r}") from None
        if formats and requested not in formats:
            raise InputError(f"{codec.name} cannot encode --pix-fmt {requested} "
                             f"(it takes: {', '.join(formats)})")
        return requested
    if not formats:
        return info.pix_fmt
    deep = info.bits > 8
    src = info.pix_fmt
    if is_rgb_format(src) or is_gray_format(src):
        src = "yuv444p10le" if deep else "yuv444p"
    src = src.replace("yuvj", "yuv")
    candidates = [src]
    if deep:
        candidates += [src.replace("p12le", "p10le").replace("p16le", "p10le"), "yuv420p10le", "yuv422p10le",
                       "yuv444p10le"]
    candidates += ["yuv420p", "yuv444p", "yuv422p"]
    for c in candidates:
        if c in formats:
            return c
    return formats[0]


def default_codec(container, hardware: bool = False) -> str:
    """libx264 where the container holds H.264 (mp4, mkv, mov), else the first of FALLBACK_CODECS it holds;
    ``hardware``: h264_nvenc first, where it opens here (:func:`vsr.video.nvenc.nvenc_problem`)."""
    if hardware and "h264_nvenc" in container.supported_codecs and nvenc_problem("h264_nvenc") is None:
        return "h264_nvenc"
    for name in (DEFAULT_CODEC,) + FALLBACK_CODECS:
        if name in container.supported_codecs and name in av.codecs_available:
            return name
    raise InputError(f"{container.format.name} holds none of the video codecs vsr writes; "
                     f"use an .mp4 or .mkv output")


def effective(codec: str, opts: dict[str, str]) -> dict[str, int | float | str | None]:
    """The ``crf`` (a number where it is one; NVENC's constant quality ``cq``) and ``preset`` the encoder runs
    with: those given in ``opts``, else its own defaults (:data:`ENCODER_DEFAULTS`; None where it has no such
    setting or vsr does not know it)."""
    # (NVENC's own: FFmpeg's documented default, not checked against an encoder: none opens on vsr's CI)
    own = ENCODER_DEFAULTS.get(codec, NVENC_DEFAULTS if is_nvenc(codec) else {})
    crf, preset = (opts.get(key, own.get(key)) for key in (quality_key(codec), "preset"))
    try:
        crf = float(crf) if crf is not None else None
        crf = int(crf) if crf is not None and crf.is_integer() else crf  # 23, as a person writes it
    except ValueError:
        pass
    return {"crf": crf, "preset": preset}


def check_playable(codec: str, container, played: bool = True) -> None:
    """A codec into a container that cannot hold it, or a picture codec (:data:`IMAGE_CODECS`) into one players
    do not read it from (``played``: a file, not a stream into another program) -> InputError naming the
    suffixes that would do."""
    name = container.format.name
    if codec in IMAGE_CODECS and played:
        plays = IMAGE_CONTAINERS_OF.get(codec, IMAGE_CONTAINERS)
        if name in plays:
            return _check_holds(codec, container, plays)
        where = _holders(codec, plays)
        frames = ", or a folder (a name without suffix) for PNG frames" if codec == "png" else ""
        raise InputError(f"--codec {codec} writes still pictures, which players do not play from {name}: use "
                         f"{where or 'another container'}{frames}")
    _check_holds(codec, container, COMMON_CONTAINERS)


def _check_holds(codec: str, container, suggested: dict[str, str]) -> None:
    if codec not in container.supported_codecs:
        where = _holders(codec, {k: v for k, v in suggested.items() if k != container.format.name})
        raise InputError(f"{container.format.name} cannot hold {codec} video (choose another codec"
                         f"{', or ' + where if where else ''})")


def _holders(codec: str, containers: dict[str, str]) -> str:
    """``a .mov or .mkv output``: those of ``containers`` (format name -> suffix) FFmpeg writes ``codec`` into."""
    suffixes = [suffix for fmt, suffix in containers.items() if codec in _supported(fmt)]
    return f"a {' or '.join(suffixes)} output" if suffixes else ""


def _supported(container: str) -> set[str]:
    """The codecs FFmpeg writes into ``container`` (a format name)."""
    with av.open(io.BytesIO(), "w", format=container) as oc:
        return set(oc.supported_codecs)


def open_codec(name: str) -> av.Codec:
    """The encoder ``name``; an InputError for an unknown one, an audio one, or NVENC where none opens here."""
    try:
        codec = av.Codec(name, "w")
    except (ValueError, av.FFmpegError):
        raise InputError(f"unknown codec {name!r} (try libx264, libx265, libsvtav1, ffv1, prores_ks)") from None
    if codec.type != "video":
        raise InputError(f"--codec {name} is a {codec.type} codec, not a video one")
    why = nvenc_problem(name) if is_nvenc(name) else None
    if why is not None:
        raise InputError(f"--codec {name}: no NVIDIA hardware encoder (NVENC) opens here ({why}); use a software "
                         f"encoder such as libx264")
    return codec


def quality_key(codec: str) -> str:
    """The encoder option ``--crf`` sets: ``crf``, or NVENC's ``cq``."""
    return "cq" if is_nvenc(codec) else "crf"


def encoder_options(codec: str, s: EncoderSettings, width: int, height: int) -> tuple[dict[str, str], bool]:
    """The options dict for the encoder and whether libx264 got vsr's low-memory settings for a big output."""
    if is_nvenc(codec):
        return {**nvenc_options(s.crf, s.preset), **dict(s.options)}, False
    opts = {}
    if s.crf is not None:
        opts["crf"] = f"{s.crf:g}"
    if s.preset is not None:
        opts["preset"] = s.preset
    opts.update(dict(s.options))
    if codec == "libx264" and width * height > BIG_OUTPUT_PIXELS and "rc-lookahead" not in opts \
            and "x264-params" not in opts and opts.get("preset") != "ultrafast":
        opts["x264-params"] = BIG_OUTPUT_X264_PARAMS
        log.info("output beyond 4K: libx264 with %s to bound its memory (-x x264-params=... overrides)",
                 BIG_OUTPUT_X264_PARAMS)
        return opts, True
    return opts, False


def _option_name(key: str, value: str, s: EncoderSettings) -> str:
    """How the user gave option ``key``: ``--crf 99``, ``--preset x`` or ``-x key=value``."""
    if key in ("crf", "cq") and s.crf is not None and key not in dict(s.options):
        return f"--crf {value}"
    if key == "preset" and s.preset is not None and key not in dict(s.options):
        return f"--preset {value}"
    return f"-x {key}={value}"


def check_values(codec: str, opts: dict[str, str], s: EncoderSettings) -> None:
    """A preset the codec does not have (:data:`PRESETS`), a crf outside its quality scale
    (:data:`CRF_RANGE`) -> InputError naming the option."""
    preset = opts.get("preset")
    if codec in PRESETS and preset is not None and preset.lower() not in PRESETS[codec] \
            and not (preset.isdigit() and int(preset) < len(PRESETS[codec]) and not is_nvenc(codec)):
        # (x264 also takes a preset's index)
        also = ", or x264's names" if is_nvenc(codec) else ""
        raise InputError(f"{_option_name('preset', s.preset or opts['preset'], s)} is not a {codec} preset "
                         f"({', '.join(PRESETS[codec])}{also})")
    key = quality_key(codec)
    if key not in opts or codec not in CRF_RANGE:
        return
    try:
        crf = float(opts[key])
    except ValueError:
        return  # not a number: the encoder refuses it when it opens
    lo, hi = CRF_RANGE[codec]
    if not lo <= crf <= hi:
        raise InputError(f"{_option_name(key, opts[key], s)} is out of range for {codec} ({lo}..{hi})")


def check_size(codec: str, width: int, height: int) -> None:
    """An output frame larger than ``codec`` (or FFmpeg) can encode -> InputError saying so."""
    if (8 * width + 1024) * (height + 128) >= FFMPEG_MAX_PLANE:
        raise InputError(f"the output, {width}x{height}, is too large for {codec}: FFmpeg encodes frames of "
                         f"at most about 268 megapixels (e.g. 16000x16000); use a smaller source")
    mw, mh = MAX_SIZE.get(codec, (None, None))
    if mw is not None and (width > mw or height > mh):
        raise InputError(f"the output, {width}x{height}, is too large for {codec}: it encodes frames of at most "
                         f"{mw}x{mh} (use a smaller source or --codec ffv1)")


@contextmanager
def captured_ffmpeg_log() -> Iterator[list[tuple[int, str, str]]]:
    """FFmpeg's warnings and errors of this thread, as ``(level, name, message)``, instead of nowhere."""
    level, skip = av.logging.get_level(), av.logging.get_skip_repeated()
    av.logging.set_level(av.logging.WARNING)
    av.logging.set_skip_repeated(False)  # the same bad option in a second sink must be seen again
    try:
        with av.logging.Capture() as logs:
            yield logs
    finally:
        av.logging.set_skip_repeated(skip)
        av.logging.set_level(level)


@contextmanager
def quiet_encoder(codec: str, quiet: bool) -> Iterator[None]:
    """SVT-AV1 prints its settings to stderr itself; ``quiet`` lets it print errors only.

    It reads ``SVT_LOG`` once, when its first encoder in the process opens; a user's own ``SVT_LOG`` wins.
    """
    if not quiet or codec != "libsvtav1" or "SVT_LOG" in os.environ:
        yield
        return
    os.environ["SVT_LOG"] = "1"  # SVT_LOG_ERROR
    try:
        yield
    finally:
        del os.environ["SVT_LOG"]


def quiet_options(codec: str, opts: dict[str, str], quiet: bool) -> dict[str, str]:
    """``opts`` with x265's own log cut to errors under ``quiet``: x265 prints its settings and statistics to
    stderr itself, past FFmpeg's log level.  A ``log-level`` the user gave in ``x265-params`` wins."""
    if not quiet or codec != "libx265":
        return opts
    params = opts.get("x265-params", "")
    if re.search(r"(^|:)log-level=", params):
        return opts
    return {**opts, "x265-params": f"{params}:log-level=error" if params else "log-level=error"}


def _first_error(e: Exception, logs: list[tuple[int, str, str]]) -> str:
    """The encoder's own first error message, else the exception's, on one line."""
    errors = [m.strip() for level, _, m in logs if level <= av.logging.ERROR]
    if errors:
        return errors[0]
    if isinstance(e, av.FFmpegError) and e.strerror:
        return e.strerror
    return (str(e).splitlines() or [type(e).__name__])[0][:120]


def open_encoder(oc, vs, opts: dict[str, str], s: EncoderSettings) -> None:
    """Start encoding ``oc`` (its video stream ``vs`` opened with ``opts``); every option the encoder did not
    take, or took with a complaint, is an InputError naming it."""
    codec = vs.codec_context.name
    vs.options = quiet_options(codec, dict(vs.options), s.quiet)
    with quiet_encoder(codec, s.quiet), captured_ffmpeg_log() as logs:
        try:
            oc.start_encoding()
        except (av.FFmpegError, ValueError) as e:
            if any("Picture size" in m for _, _, m in logs):
                check_size(codec, vs.width, vs.height)
            why = _first_error(e, logs)
            shown = " ".join(f"{k}={v}" for k, v in opts.items()) or "defaults"
            raise InputError(f"{codec} rejected its options ({shown}): {why}") from None
    unused = dict(vs.options)
    if unused:
        key, value = next(iter(unused.items()))
        raise InputError(f"{codec} has no option {key!r} ({_option_name(key, value, s)})")
    rejected = [m.strip() for _, _, m in logs if REJECTED_OPTION.search(m)]
    if rejected:
        params = [f"-x {k}={v}" for k, v in opts.items() if k.endswith(("-params", "opts"))]
        where = params[0] if len(params) == 1 else "an option"
        raise InputError(f"{codec} rejected {where}: {rejected[0]}")


def encoder_memory_mb(codec: str, opts: dict[str, str], low_memory_x264: bool, width: int, height: int) -> float:
    """What the encoder itself will hold at its peak, estimated from measurements (see ENCODER_MB_PER_MPX)."""
    name = codec
    if codec == "libx264" and low_memory_x264:
        name = "libx264-big"
    elif codec == "libx264" and opts.get("preset") == "ultrafast":
        name = "libx264-ultrafast"
    return ENCODER_MB_PER_MPX.get(name, ENCODER_MB_PER_MPX_OTHER) * width * height / 1e6
