"""What vsr knows about each encoder and container: the codec tables (defaults, quality scales, presets, size
limits, memory, which codecs a container holds) and the lookups on them.

The decision for one output is :func:`vsr.video.encoder_choice.choose_encoder`; opening the encoder it chose is
:mod:`vsr.video.encoder_open`; NVIDIA's encoders are :mod:`vsr.video.nvenc`.  Nothing here opens a file: FFmpeg's
list of the codecs a container holds is read once per container from a muxer allocated in memory.
"""

from __future__ import annotations

import functools
import io

import av

from vsr.errors import InputError
from vsr.video.nvenc import CQ_RANGE, NVENC, is_nvenc, nvenc_problem
from vsr.video.nvenc import DEFAULTS as NVENC_DEFAULTS, PRESETS as NVENC_PRESETS

DEFAULT_CODEC = "libx264"
# (libx265 last: the one a raw .hevc stream holds, which holds none of the others)
FALLBACK_CODECS = ("libsvtav1", "libvpx-vp9", "ffv1", "mpeg4", "libx265")


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
                    "libsvtav1": {"crf": "35", "preset": "8"},
                    "libvpx-vp9": {"crf": "32"}}  # (FFmpeg's: constant quality 32 where no rate is given)
# Picture codecs: each frame a still image.  FFmpeg puts them into MP4 (object types for PNG, JPEG, JPEG 2000)
# and AVI, but players do not play them there; QuickTime is their video container, and Matroska holds those it
# has a codec ID for (Motion JPEG, JPEG 2000).  Matroska has none for PNG: ffmpeg's own tool stores it as a
# Video-for-Windows FourCC (V_MS/VFW/FOURCC 'MPNG'), a compatibility mode that FFmpeg's library refuses at
# normal compliance (avformat_query_codec), which is what vsr writes with: PNG goes into .mov or a folder.
IMAGE_CODECS = frozenset("png apng mjpeg jpeg2000 libopenjpeg bmp tiff gif qoi libwebp libwebp_anim jpegls ljpeg "
                         "targa sgi dpx ppm pgm pam pbm".split())
# (Motion JPEG also in AVI: cameras write it so, and players read it there.)
IMAGE_CONTAINERS = {"mov": ".mov", "matroska": ".mkv"}
# Animated pictures, in their own files: APNG (lossless, alpha), animated WebP (alpha), GIF (256 colours a frame).
ANIMATION_CONTAINERS = {"apng": ("apng", ".apng"), "webp": ("libwebp_anim", ".webp"), "gif": ("gif", ".gif")}
IMAGE_CONTAINERS_OF = {"mjpeg": {**IMAGE_CONTAINERS, "avi": ".avi"},
                       **{codec: {**IMAGE_CONTAINERS, fmt: suffix}
                          for fmt, (codec, suffix) in ANIMATION_CONTAINERS.items()}}
# The default codec of a container where libx264 is wrong for it.  AVI stores no presentation timestamps: H.264
# in it (B-frames or not) reads back with none (ffprobe shows N/A), while MPEG-4 Part 2 without B-frames (FFmpeg's
# mpeg4 encoder has none by default) reads back with every frame's time; it is AVI's own codec (Xvid, DivX), which
# every player that opens AVI plays.  Tagged XVID, the FourCC hardware players look for.  HEVC in MP4 and
# QuickTime is tagged hvc1 (parameter sets in the header, as FFmpeg has x265 write them there), not FFmpeg's
# default hev1, which Apple's players refuse.  An MPEG program stream (.mpg, .vob) or a raw .m2v holds MPEG video
# only: MPEG-2, what DVDs and a user naming one expect (FFmpeg's .mpg default, MPEG-1, is the VCD's 352x288).
MPEG_PS = ("mpeg", "vob", "dvd", "svcd", "mpeg2video")
CONTAINER_CODECS = {"avi": "mpeg4", **{fmt: "mpeg2video" for fmt in MPEG_PS},
                    **{fmt: codec for fmt, (codec, _) in ANIMATION_CONTAINERS.items()}}
# Codecs that take palette frames only: vsr gives each frame a palette of its own (vsr.video.palette).
PALETTE_CODECS = ("gif",)
# The default codec of a container for a source with alpha, where libx264 would drop it: VP9 (libvpx writes the
# alpha as Matroska's BlockAdditional, what browsers play in WebM), ProRes 4444 in QuickTime (what editors
# exchange mattes in).  MP4 holds no codec FFmpeg writes alpha into.
ALPHA_CODECS = {"matroska": "libvpx-vp9", "webm": "libvpx-vp9", "mov": "prores_ks"}
# those of them whose alpha is 10-bit: for an HDR source too, which keeps both (VP9's alpha is 8-bit: HDR's HEVC
# goes there, the alpha said dropped)
DEEP_ALPHA_CODECS = ("prores_ks",)
# which of --crf and --preset each of those takes (ProRes has neither; VP9 no preset)
ALPHA_CODEC_SETTINGS = {"libvpx-vp9": ("--crf",), "prores_ks": ()}
CODEC_TAGS = {("avi", "mpeg4"): "XVID", ("mp4", "libx265"): "hvc1", ("mov", "libx265"): "hvc1"}
# Encoders with no CRF whose FFmpeg default is a bit rate of 200 kb/s (a blur at x4 sizes): vsr runs them at a
# fixed quantiser (qmin = qmax, what ffmpeg's -q:v does), --crf's value where given.  3 is near-transparent for
# all (2 is their best; MPEG-2 at 720p: 47.6 dB Y-PSNR where 200 kb/s gave 38.4).  Any rate option of the
# user's own (-x b=, qmin=, qmax=, global_quality=) replaces it.
QUANTISER_CODECS = {"mpeg4": (2, 31), "mjpeg": (2, 31), "mpeg1video": (2, 31), "mpeg2video": (2, 31)}
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
# A Y4M stream (``--format y4m``) holds raw frames: its one "codec" is the frames as they are, in what FFmpeg's Y4M
# muxer writes; deeper than 8 bits only as "unofficial" (FFmpeg's own name), which FFmpeg,
# x264, x265 and SVT-AV1 all read.
Y4M_CODEC = "wrapped_avframe"
Y4M_PIX_FMTS = ("yuv420p", "yuv422p", "yuv444p", "yuv411p", "gray", "yuv420p10le", "yuv422p10le", "yuv444p10le",
                "yuv420p12le", "yuv422p12le", "yuv444p12le", "yuv420p16le", "yuv422p16le", "yuv444p16le",
                "gray10le", "gray16le")


def video_codec(name: str) -> av.Codec:
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


class NamedBuffer(io.BytesIO):
    """An in-memory file with a name, from which FFmpeg guesses the container as from a path."""

    def __init__(self, name: str):
        super().__init__()
        self.name = name


def muxer_for(name: str) -> str:
    """The FFmpeg muxer a file called ``name`` gets (from its suffix), as ``av.open(name, "w")`` picks it;
    ValueError where none does."""
    with av.open(NamedBuffer(name), "w") as oc:
        return oc.format.name


# Codecs a muxer takes that FFmpeg's query (what PyAV's ``supported_codecs`` asks) does not say: MPEG-TS has
# no codec tag table, so the query names only its defaults (MPEG-2 video, MP2), where its muxer writes each of
# these (libavformat/mpegtsenc.c's stream types), by FFmpeg's canonical codec name
UNLISTED = {"mpegts": frozenset({"h264", "hevc", "mpeg1video", "mpeg2video", "mpeg4", "av1", "vc1", "dirac", "cavs",
                                 "aac", "aac_latm", "mp2", "mp3", "ac3", "eac3", "dts", "truehd", "opus", "s302m",
                                 "dvb_subtitle", "dvb_teletext", "hdmv_pgs_subtitle"}),
            # .mpg (MPEG-1 Systems, as ffmpeg writes it whatever the video): its query names only its defaults,
            # MPEG-1 video and MP2, where libavformat/mpegenc.c writes MPEG-2 video as ffmpeg's own .mpg does
            "mpeg": frozenset({"mpeg1video", "mpeg2video", "mp2", "mp3"}),
            # .vob (MPEG-2 program streams): DVD's AC-3 and MP3 too, which their query leaves out
            **{fmt: frozenset({"mpeg1video", "mpeg2video", "mp2", "mp3", "ac3"}) for fmt in ("vob", "dvd", "svcd")}}


@functools.cache
def _names_of(canonical: frozenset[str]) -> frozenset[str]:
    """Every codec name (decoders, encoders: libx264, h264_nvenc, ...) of the canonical codec names given."""
    out = set(canonical)
    for name in av.codecs_available:
        for mode in ("r", "w"):
            try:
                if av.Codec(name, mode).canonical_name in canonical:
                    out.add(name)
            except (ValueError, av.FFmpegError):
                pass
    return frozenset(out)


def held(oc) -> frozenset[str]:
    """The codec names an opened PyAV output container ``oc`` holds: what FFmpeg's query says, and for a muxer
    the query undersells (:data:`UNLISTED`) what it writes."""
    extra = UNLISTED.get(oc.format.name)
    return frozenset(oc.supported_codecs) | (_names_of(extra) if extra else frozenset())


@functools.cache
def codecs_held(container: str) -> frozenset[str]:
    """The codecs FFmpeg writes into ``container`` (a format name), asked of a muxer in memory, once."""
    with av.open(io.BytesIO(), "w", format=container) as oc:
        return held(oc)


def holders(codec: str, containers: dict[str, str]) -> str:
    """``a .mov or .mkv output``: those of ``containers`` (format name -> suffix) FFmpeg writes ``codec`` into."""
    suffixes = [suffix for fmt, suffix in containers.items() if codec in codecs_held(fmt)]
    return f"a {' or '.join(suffixes)} output" if suffixes else ""


def encoder_params(codec: str, opts: dict[str, str]) -> dict[str, str]:
    """The ``key=value`` pairs of the encoder's own parameters option (:data:`PARAMS_OPTION`), in order."""
    text = opts.get(PARAMS_OPTION.get(codec, ""), "")
    out: dict[str, str] = {}
    for key, _, value in (item.partition("=") for item in text.split(":") if item.strip()):
        out.pop(key.strip(), None)  # a key given again counts where it was given last
        out[key.strip()] = value.strip()
    return out


def number(text: str | None) -> int | float | str | None:
    """``"23"`` -> 23, ``"18.5"`` -> 18.5 (as a person writes them); text that is no number stays text."""
    try:
        x = float(text) if text is not None else None
    except ValueError:
        return text
    return int(x) if x is not None and x.is_integer() else x


def effective(codec: str, opts: dict[str, str]) -> dict[str, int | float | str | None]:
    """The ``crf``, ``preset`` and fixed quantiser ``q`` (numbers where they are) the encoder runs with: those
    given in ``opts``, the encoder's own parameters (``-x x264-params=crf=18``) first, else its own defaults
    (:data:`ENCODER_DEFAULTS`); None where it has no such setting, runs another rate control (a qp or a bit
    rate) or vsr does not know it.  NVENC's constant quality ``cq`` is its ``crf``."""
    if is_nvenc(codec):  # its own preset: FFmpeg's documented default, not checked (no NVENC opens on vsr's CI)
        return {"crf": number(opts.get("cq")), "preset": opts.get("preset", NVENC_DEFAULTS["preset"]), "q": None}
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
    return {"crf": number(crf), "preset": preset, "q": number(q)}


def quality_key(codec: str) -> str:
    """The encoder option ``--crf`` sets: ``crf``, or NVENC's ``cq``."""
    return "cq" if is_nvenc(codec) else "crf"


def ffmpeg_holds(width: int, height: int) -> bool:
    """Whether FFmpeg makes frames of ``width`` x ``height`` (:data:`FFMPEG_MAX_PLANE`)."""
    return (8 * width + 1024) * (height + 128) < FFMPEG_MAX_PLANE


# The largest picture of the highest level of H.264 (6.2: 139,264 macroblocks), HEVC and VP9 (6.2) and AV1 (6.3):
# 8192x4352, 35.7 megapixels.  An encoder makes larger frames (x264 with a warning in its log), few decoders take them.
LEVEL_MAX_PIXELS = 35_651_584
LEVELLED = {"h264": "H.264", "hevc": "HEVC", "vp9": "VP9", "av1": "AV1"}


def check_size(codec: str, width: int, height: int) -> list[str]:
    """An output frame larger than ``codec`` (or FFmpeg) can encode -> InputError saying so; one larger than its
    format's highest level allows (:data:`LEVEL_MAX_PIXELS`): a warning line, returned."""
    if not ffmpeg_holds(width, height):
        raise InputError(f"the output, {width}x{height}, is too large for {codec}: FFmpeg encodes frames of "
                         f"at most about 268 megapixels (e.g. 16000x16000); use a smaller source")
    mw, mh = MAX_SIZE.get(codec, (None, None))
    if mw is not None and (width > mw or height > mh):
        raise InputError(f"the output, {width}x{height}, is too large for {codec}: it encodes frames of at most "
                         f"{mw}x{mh} (use a smaller source or --codec ffv1)")
    family = av.Codec(codec, "w").canonical_name
    if family in LEVELLED and width * height > LEVEL_MAX_PIXELS:
        return [f"the output's {width}x{height} frames ({width * height / 1e6:.0f} megapixels) are beyond the "
                f"highest level of {LEVELLED[family]} ({LEVEL_MAX_PIXELS / 1e6:.1f} megapixels, 8K): few players and "
                f"no hardware decoder play them (--scale 4320p keeps 8K)"]
    return []


def encoder_memory_mb(codec: str, opts: dict[str, str], low_memory_x264: bool, width: int, height: int) -> float:
    """What the encoder itself will hold at its peak, estimated from measurements (see ENCODER_MB_PER_MPX)."""
    name = codec
    if codec == "libx264" and low_memory_x264:
        name = "libx264-big"
    elif codec == "libx264" and opts.get("preset") == "ultrafast":
        name = "libx264-ultrafast"
    return ENCODER_MB_PER_MPX.get(name, ENCODER_MB_PER_MPX_OTHER) * width * height / 1e6


def check_crf(codec: str, value: str | None, shown) -> None:
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
