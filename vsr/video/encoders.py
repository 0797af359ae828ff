"""Encoder choice and options: codec and pixel format, option handling and checks, the encoder memory table
(opening the encoder: :mod:`vsr.video.encoder_open`; NVIDIA's: :mod:`vsr.video.nvenc`).

Options are checked when the encoder opens: an option the encoder does not have, a value it rejects, a
``--crf`` outside the codec's range and an output larger than the codec can encode each give one line
naming the cause (:class:`vsr.errors.InputError`).
"""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass, field

import av

from vsr.errors import InputError
from vsr.video.colour import is_gray_format, is_rgb_format
from vsr.video.formats import gray_output, rgb_format, rgb_output, without_alpha
from vsr.video.hdr import HDR_CODECS, is_hdr
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
# and AVI, but players do not play them there; QuickTime is their video container, and Matroska holds those it
# has a codec ID for (Motion JPEG, JPEG 2000).  Matroska has none for PNG: ffmpeg's own tool stores it as a
# Video-for-Windows FourCC (V_MS/VFW/FOURCC 'MPNG'), a compatibility mode that FFmpeg's library refuses at
# normal compliance (avformat_query_codec), which is what vsr writes with: PNG goes into .mov or a folder.
IMAGE_CODECS = frozenset("png apng mjpeg jpeg2000 libopenjpeg bmp tiff gif qoi libwebp libwebp_anim jpegls ljpeg "
                         "targa sgi dpx ppm pgm pam pbm".split())
# (Motion JPEG also in AVI: cameras write it so, and players read it there.)
IMAGE_CONTAINERS = {"mov": ".mov", "matroska": ".mkv"}
IMAGE_CONTAINERS_OF = {"mjpeg": {**IMAGE_CONTAINERS, "avi": ".avi"}}
# The default codec of a container where libx264 is wrong for it.  AVI stores no presentation timestamps: H.264
# in it (B-frames or not) reads back with none (ffprobe shows N/A), while MPEG-4 Part 2 without B-frames (FFmpeg's
# mpeg4 encoder has none by default) reads back with every frame's time; it is AVI's own codec (Xvid, DivX), which
# every player that opens AVI plays.  Tagged XVID, the FourCC hardware players look for.  HEVC in MP4 and
# QuickTime is tagged hvc1 (parameter sets in the header, as FFmpeg has x265 write them there), not FFmpeg's
# default hev1, which Apple's players refuse.
CONTAINER_CODECS = {"avi": "mpeg4"}
CODEC_TAGS = {("avi", "mpeg4"): "XVID", ("mp4", "libx265"): "hvc1", ("mov", "libx265"): "hvc1"}
# Encoders with no CRF whose FFmpeg default is a bit rate of 200 kb/s (a blur at x4 sizes): vsr runs them at a
# fixed quantiser (qmin = qmax, what ffmpeg's -q:v does), --crf's value where given.  3 is near-transparent for
# both (2 is their best).  Any rate option of the user's own (-x b=, qmin=, qmax=, global_quality=) replaces it.
QUANTISER_CODECS = {"mpeg4": (2, 31), "mjpeg": (2, 31)}
# Codecs whose YUV is full range (JPEG's): they take yuvj formats, and refuse limited range at normal compliance.
FULL_RANGE_CODECS = frozenset({"mjpeg"})
DEFAULT_QUANTISER = 3
RATE_OPTIONS = ("b", "qmin", "qmax", "global_quality")
# The option holding an encoder's own parameters (``key=value:key=value``), which it applies after FFmpeg's:
# a crf, qp or bitrate there decides the rate control (tests/video/test_encoder_choices.py reads x264's own
# record of its settings from the output to check it).
PARAMS_OPTION = {"libx264": "x264-params", "libx265": "x265-params", "libsvtav1": "svtav1-params"}
RATE_PARAMS = ("crf", "qp", "qp_constant", "bitrate", "tbr")
# The containers a "cannot hold" message suggests, by format name.
COMMON_CONTAINERS = {"mp4": ".mp4", "matroska": ".mkv", "mov": ".mov", "webm": ".webm"}


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
    src = without_alpha(info.pix_fmt)
    if not formats:
        return src
    deep = info.bits > 8
    rgb = is_rgb_format(src)
    if gray_output(codec.name, formats, src):
        return src  # grey kept grey, at its depth
    if rgb_output(codec.name, formats, src):
        return rgb_format(formats, info.bits) or formats[0]  # RGB kept RGB (full range), at its depth
    if rgb or is_gray_format(src):  # YUV 4:4:4 of the source's depth
        src = {8: "yuv444p", 9: "yuv444p10le", 10: "yuv444p10le", 12: "yuv444p12le"}.get(info.bits, "yuv444p16le")
    src = src.replace("yuvj", "yuv")
    if is_hdr(info.colour) and not deep:  # PQ and HLG in 8 bits band: an HDR output has 10 bits at least
        deep = True
        src = {"yuv422p": "yuv422p10le", "yuv444p": "yuv444p10le"}.get(src, "yuv420p10le")
    candidates = [src]
    if deep:
        candidates += [src.replace("p12le", "p10le").replace("p16le", "p10le"), "yuv420p10le", "yuv422p10le",
                       "yuv444p10le"]
    candidates += ["yuv444p10le"] if rgb else []  # full chroma before subsampled (ProRes 4444, not 422)
    candidates += ["yuv420p", "yuv444p", "yuv422p"]
    if codec.name in FULL_RANGE_CODECS:  # (yuv420p there: "non full-range YUV is non-standard", refused)
        candidates = [c.replace("yuv", "yuvj", 1) for c in candidates]
    for c in candidates:
        if c in formats:
            return c
    return formats[0]


def default_codec(container, hardware: bool = False, hdr: bool = False) -> str:
    """The container's own (:data:`CONTAINER_CODECS`), else for an ``hdr`` source (PQ, HLG) the first of
    :data:`vsr.video.hdr.HDR_CODECS` it holds (10-bit HEVC, else AV1: what HDR players decode, and encoders that
    write the static metadata; no NVENC), else libx264 where the container holds H.264 (mp4, mkv, mov;
    ``hardware``: h264_nvenc there, where it opens here, :func:`vsr.video.nvenc.nvenc_problem`), else the first
    of FALLBACK_CODECS it holds."""
    own = CONTAINER_CODECS.get(container.format.name)
    for name in () if own or not hdr else HDR_CODECS:
        if name in container.supported_codecs and name in av.codecs_available:
            return name
    if not own and hardware and "h264_nvenc" in container.supported_codecs and nvenc_problem("h264_nvenc") is None:
        return "h264_nvenc"
    for name in ((own,) if own else ()) + (DEFAULT_CODEC,) + FALLBACK_CODECS:
        if name in container.supported_codecs and name in av.codecs_available:
            return name
    raise InputError(f"{container.format.name} holds none of the video codecs vsr writes; "
                     f"use an .mp4 or .mkv output")


def effective(codec: str, opts: dict[str, str]) -> dict[str, int | float | str | None]:
    """The ``crf``, ``preset`` and fixed quantiser ``q`` (numbers where they are) the encoder runs with: those
    given in ``opts``, the encoder's own parameters (``-x x264-params=crf=18``) first, else its own defaults
    (:data:`ENCODER_DEFAULTS`); None where it has no such setting, runs another rate control (a qp or a bit
    rate) or vsr does not know it.  NVENC's constant quality ``cq`` is its ``crf``."""
    if is_nvenc(codec):  # its own preset: FFmpeg's documented default, not checked (no NVENC opens on vsr's CI)
        return {"crf": _number(opts.get("cq")), "preset": opts.get("preset", NVENC_DEFAULTS["preset"]), "q": None}
    own = ENCODER_DEFAULTS.get(codec, {})
    params = encoder_params(codec, opts)
    rate = [k for k in params if k in RATE_PARAMS]
    if rate:  # the encoder applies its parameters last, in order: the last rate key there decides
        crf = params["crf"] if rate[-1] == "crf" else None
    elif "crf" in opts:
        crf = opts["crf"]
    else:  # FFmpeg's -x qp= or b= without a crf: constant QP or a bit rate
        crf = None if opts.get("qp") or opts.get("b") else own.get("crf")
    preset = params.get("preset", opts.get("preset", own.get("preset")))
    q = opts.get("qmin") if codec in QUANTISER_CODECS and opts.get("qmin") == opts.get("qmax") else None
    return {"crf": _number(crf), "preset": preset, "q": _number(q)}


def _number(text: str | None) -> int | float | str | None:
    try:
        x = float(text) if text is not None else None
    except ValueError:
        return text
    return int(x) if x is not None and x.is_integer() else x  # 23, as a person writes it


def encoder_params(codec: str, opts: dict[str, str]) -> dict[str, str]:
    """The ``key=value`` pairs of the encoder's own parameters option (:data:`PARAMS_OPTION`), in order."""
    text = opts.get(PARAMS_OPTION.get(codec, ""), "")
    out: dict[str, str] = {}
    for key, _, value in (item.partition("=") for item in text.split(":") if item.strip()):
        out.pop(key.strip(), None)  # a key given again counts where it was given last
        out[key.strip()] = value.strip()
    return out


def check_playable(codec: str, container, played: bool = True) -> None:
    """A codec into a container that cannot hold it, or a picture codec (:data:`IMAGE_CODECS`) into one players
    do not read it from (``played``: a file, not a stream into another program) -> InputError naming the
    suffixes that would do."""
    name = container.format.name
    if codec in IMAGE_CODECS and played:
        plays = IMAGE_CONTAINERS_OF.get(codec, IMAGE_CONTAINERS)
        where = _holders(codec, plays)
        frames = ", or a folder (a name without suffix) for PNG frames" if codec == "png" else ""
        if name in plays and codec not in container.supported_codecs:
            raise InputError(f"{name} has no codec ID for {codec} video: use {where or 'another container'}"
                             f"{frames}, or another codec (ffv1 is lossless)")
        if name in plays:
            return None
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
    given = dict(s.options)
    if codec in QUANTISER_CODECS:
        opts.update(_quantiser(codec, s, given))
    elif s.crf is not None:
        opts["crf"] = f"{s.crf:g}"
    if s.preset is not None:
        opts["preset"] = s.preset
    opts.update(given)
    if codec == "libx264" and width * height > BIG_OUTPUT_PIXELS and "rc-lookahead" not in opts \
            and "x264-params" not in opts and opts.get("preset") != "ultrafast":
        opts["x264-params"] = BIG_OUTPUT_X264_PARAMS
        log.info("output beyond 4K: libx264 with %s to bound its memory (-x x264-params=... overrides)",
                 BIG_OUTPUT_X264_PARAMS)
        return opts, True
    return opts, False


def _quantiser(codec: str, s: EncoderSettings, given: dict[str, str]) -> dict[str, str]:
    """The fixed quantiser of a codec without CRF (:data:`QUANTISER_CODECS`): ``--crf``'s value, else
    :data:`DEFAULT_QUANTISER`; nothing where the user gave a rate option of their own."""
    if any(k in given for k in RATE_OPTIONS):
        return {}
    lo, hi = QUANTISER_CODECS[codec]
    q = DEFAULT_QUANTISER if s.crf is None else s.crf
    if q != int(q) or not lo <= q <= hi:
        raise InputError(f"--crf {q:g} is out of range for {codec}: it has no CRF, --crf is its quantiser, a "
                         f"whole number {lo}..{hi} (lower is better; default {DEFAULT_QUANTISER})")
    return {"qmin": str(int(q)), "qmax": str(int(q))}


def option_name(key: str, value: str, s: EncoderSettings) -> str:
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
        raise InputError(f"{option_name('preset', s.preset or opts['preset'], s)} is not a {codec} preset "
                         f"({', '.join(PRESETS[codec])}{also})")
    params = encoder_params(codec, opts)
    rate = [k for k in params if k in RATE_PARAMS]
    if rate and "crf" in opts and (rate[-1] != "crf" or _number(params["crf"]) != _number(opts["crf"])):
        raise InputError(f"{option_name('crf', opts['crf'], s)} and -x {PARAMS_OPTION[codec]}=...{rate[-1]}="
                         f"{params[rate[-1]]} both set the rate control (the encoder would take the second): "
                         "give one")
    key = quality_key(codec)  # NVENC's constant quality is its cq
    _check_crf(codec, opts.get(key), lambda v: option_name(key, v, s))
    _check_crf(codec, params.get("crf"), lambda v: f"-x {PARAMS_OPTION[codec]}=...crf={v}")


def _check_crf(codec: str, value: str | None, shown) -> None:
    """A crf outside the codec's quality scale -> InputError naming the option as ``shown(value)`` says it."""
    if value is None or codec not in CRF_RANGE:
        return
    try:
        crf = float(value)
    except ValueError:
        return  # not a number: the encoder refuses it when it opens
    lo, hi = CRF_RANGE[codec]
    if not lo <= crf <= hi:
        raise InputError(f"{shown(value)} is out of range for {codec} ({lo}..{hi})")


def check_size(codec: str, width: int, height: int) -> None:
    """An output frame larger than ``codec`` (or FFmpeg) can encode -> InputError saying so."""
    if (8 * width + 1024) * (height + 128) >= FFMPEG_MAX_PLANE:
        raise InputError(f"the output, {width}x{height}, is too large for {codec}: FFmpeg encodes frames of "
                         f"at most about 268 megapixels (e.g. 16000x16000); use a smaller source")
    mw, mh = MAX_SIZE.get(codec, (None, None))
    if mw is not None and (width > mw or height > mh):
        raise InputError(f"the output, {width}x{height}, is too large for {codec}: it encodes frames of at most "
                         f"{mw}x{mh} (use a smaller source or --codec ffv1)")


def encoder_memory_mb(codec: str, opts: dict[str, str], low_memory_x264: bool, width: int, height: int) -> float:
    """What the encoder itself will hold at its peak, estimated from measurements (see ENCODER_MB_PER_MPX)."""
    name = codec
    if codec == "libx264" and low_memory_x264:
        name = "libx264-big"
    elif codec == "libx264" and opts.get("preset") == "ultrafast":
        name = "libx264-ultrafast"
    return ENCODER_MB_PER_MPX.get(name, ENCODER_MB_PER_MPX_OTHER) * width * height / 1e6
