"""The encoder decision for one output, made once: :func:`choose_encoder` (container, settings, source, scale)
-> :class:`EncoderChoice`, which the sink opens (:mod:`vsr.video.sink`), ``vsr jobs add`` checks ahead of a job
(:func:`vsr.jobs.chunking.check_encoder`) and ``vsr preview`` says (:mod:`vsr.quality.preview`).

The choice is pure: it opens no container and touches no file (but for MPEG-1/2 at a rate they cannot code,
whether the source's frame rate varies: :func:`vsr.video.grid.check_mpeg_rate`), and the same arguments give the
same choice.  It
reads FFmpeg's tables (the formats an encoder takes; for a "cannot hold" message, the codecs other containers
hold: :func:`vsr.video.codecs.codecs_held`, read once per process from a muxer in memory) and, for NVENC, whether
one opens here (:func:`vsr.video.nvenc.nvenc_problem`, probed once per process in memory).

Every setting that cannot work (a codec the container cannot hold, a pixel format the codec does not take, a
frame too large, a ``--crf`` outside the codec's scale, a preset it does not have) is an
:class:`~vsr.errors.InputError` naming it; what the encoder itself refuses when it opens (an option it does not
have) is :mod:`vsr.video.encoder_open`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import av

from vsr.errors import InputError
from vsr.video import dovi
from vsr.video.codecs import (ALPHA_CODECS, ALPHA_CODEC_SETTINGS, BIG_OUTPUT_PIXELS, BIG_OUTPUT_X264_PARAMS,
                              CODEC_TAGS, COMMON_CONTAINERS, CONTAINER_CODECS, DEEP_ALPHA_CODECS,
                              DEFAULT_CODEC, DEFAULT_QUANTISER, FALLBACK_CODECS, FULL_RANGE_CODECS, IMAGE_CODECS,
                              IMAGE_CONTAINERS, IMAGE_CONTAINERS_OF, PALETTE_CODECS, PARAMS_OPTION, PRESETS,
                              QUANTISER_CODECS, RATE_OPTIONS, RATE_PARAMS, Y4M_CODEC, Y4M_PIX_FMTS, NamedBuffer,
                              check_crf, check_size, effective, encoder_memory_mb, encoder_params, held, holders,
                              number, quality_key, video_codec)
from vsr.video.colour import RANGE_FULL, SPC_RGB, ColourSpec, is_gray_format, is_rgb_format
from vsr.video.grid import check_mpeg_rate
from vsr.video.formats import (alpha_formats, alpha_pix_fmt, deep_default_line, depth_suffix, format_warnings,
                               gray_output, planar_twin, rgb_format, rgb_output, without_alpha)
from vsr.video.hdr import HDR_CODECS, hdr_params, hdr_warnings, is_hdr
from vsr.video.mpeg2_aspect import aspect_warnings
from vsr.video.nvenc import is_nvenc, nvenc_options, nvenc_problem
from vsr.video.resize import factor_of, scaled_size
from vsr.video.source import VideoInfo


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
    container: str | None = None  # output "-" only: y4m, nut, matroska or mpegts (a file's follows its suffix)
    hardware: bool = False
    scale: str | None = None  # --scale (vsr.video.resize.parse_scale: "2", "3/2", "2160p"); None: the model's x4


@dataclass(frozen=True)
class OutputContainer:
    """What the choice needs of an output container: FFmpeg's ``format`` name, the ``codecs`` it holds, and the
    ``stream`` format of an output to standard output (``--format``: y4m, nut, matroska, mpegts; None: a file, which
    a person plays, so a picture codec goes only where players read it)."""

    format: str
    codecs: frozenset[str]
    stream: str | None = None

    @property
    def played(self) -> bool:
        return self.stream is None

    @classmethod
    def of(cls, oc, stream: str | None = None) -> "OutputContainer":
        """The description of an opened PyAV output container ``oc``."""
        return cls(oc.format.name, held(oc), stream)

    @classmethod
    def named(cls, name: str) -> "OutputContainer":
        """The container FFmpeg picks for a file called ``name`` (by its suffix), asked of a muxer in memory:
        nothing is opened on disk."""
        try:
            oc = av.open(NamedBuffer(name), "w")
        except ValueError:
            raise InputError(f"unknown output container for {name!r} (use .mp4, .mkv, .mov, ...)") from None
        with oc:
            return cls.of(oc)


@dataclass(frozen=True)
class EncoderChoice:
    """The encoder of one output, as :func:`choose_encoder` decided it: ``codec`` writing ``pix_fmt`` frames of
    ``width`` x ``height``, opened with ``options`` (vsr's, the user's ``-x`` and the source's HDR metadata), the
    ``crf``, ``preset`` and fixed quantiser it really runs with (its own defaults included; None where it has no
    such setting), the ``colour`` of the pixels it is given and tags, the container's ``codec_tag`` (None:
    FFmpeg's), ``low_memory_x264`` (libx264 beyond 4K with vsr's bounded-memory parameters), the ``warnings``
    to say about the output, the ``settings`` it was chosen from (how the user named each option) and the
    ``dolby_vision`` stream it is (a Dolby Vision source's RPUs follow: :mod:`vsr.video.dovi`; None: not)."""

    codec: str
    pix_fmt: str
    width: int
    height: int
    options: tuple[tuple[str, str], ...]
    crf: int | float | str | None
    preset: str | None
    quantiser: int | float | str | None
    colour: ColourSpec
    codec_tag: str | None = None
    low_memory_x264: bool = False
    warnings: tuple[str, ...] = ()
    settings: EncoderSettings = field(default_factory=EncoderSettings)
    dolby_vision: dovi.Output | None = None
    default_line: str | None = None  # a deep source's default codec, said (vsr.video.formats.deep_default_line)

    @property
    def encoder_options(self) -> dict[str, str]:
        return dict(self.options)

    def colour_tags(self) -> dict[str, int]:
        """The stream's colour tags, as codec-context attributes: RGB full range by definition (as ffmpeg tags
        it), grey without a matrix or range, YUV as :attr:`colour` says."""
        spec = self.colour
        tags = {"color_primaries": spec.primaries, "color_trc": spec.transfer}
        if is_rgb_format(self.pix_fmt):
            tags.update(colorspace=SPC_RGB, color_range=RANGE_FULL)
        elif not is_gray_format(self.pix_fmt):
            tags.update(colorspace=spec.matrix, color_range=spec.range)
        return dovi.tagged(self.dolby_vision, spec, tags)

    @property
    def memory_mb(self) -> float:
        """What the encoder itself will hold at its peak (:func:`vsr.video.codecs.encoder_memory_mb`)."""
        return encoder_memory_mb(self.codec, self.encoder_options, self.low_memory_x264, self.width, self.height)

    def option_name(self, key: str, value: str) -> str:
        """How the user gave option ``key``: ``--crf 99``, ``--preset x`` or ``-x key=value``."""
        return option_name(key, value, self.settings)

    def describe(self) -> str:
        """``libx264 crf 23 preset medium, yuv420p``: what a person is told the output is encoded with (and its
        size, where ``--scale`` set it)."""
        said = [self.codec] + [f"{k} {v}" for k, v in (("crf", self.crf), ("q", self.quantiser),
                                                       ("preset", self.preset)) if v is not None]
        size = f", {self.width}x{self.height}" if self.settings.scale is not None else ""
        return f"{' '.join(said)}, {self.pix_fmt}{size}"


PASS_THROUGH = ("wrapped_avframe", "rawvideo")  # codecs that take no rate, preset or encoder options


def choose_encoder(container: OutputContainer, settings: EncoderSettings, info: VideoInfo,
                   scale: int = 4) -> EncoderChoice:
    """The encoder for ``info``'s frames upscaled ``scale`` times into ``container`` with the user's
    ``settings``: codec (the user's, else :func:`default_codec`), pixel format (:func:`choose_pix_fmt`), options
    and colour; an InputError for any setting that cannot work (see the module's docstring)."""
    hdr = info.hdr is not None or info.dolby_vision is not None
    if settings.codec is None and container.stream == "y4m":
        codec = video_codec(Y4M_CODEC)
    else:
        codec = video_codec(settings.codec or default_codec(container, settings.hardware, hdr, info.has_alpha,
                                                            info.bits > 8))
    if settings.codec is None and info.has_alpha:
        check_alpha_default(codec.name, container, settings)
    if codec.name in PASS_THROUGH:  # Y4M and raw video carry the frames uncompressed: nothing to set
        given = [name for name, v in (("--crf", settings.crf), ("--preset", settings.preset),
                                      ("-x", settings.options)) if v]
        if given:
            what = "Y4M" if container.stream == "y4m" else "raw video"
            raise InputError(f"{what} carries the frames uncompressed: {', '.join(given)} "
                             + ("do not apply (drop them" if len(given) > 1 else "does not apply (drop it")
                             + ", or write a compressed stream: --format nut -c ffv1, or --format matroska)")
    if container.stream == "y4m":
        pix_fmt = y4m_pix_fmt(info, settings.pix_fmt)
    else:
        pix_fmt = choose_pix_fmt(codec, info, settings.pix_fmt)
    shown = "Y4M" if container.stream == "y4m" else codec.name
    said = format_warnings(info, pix_fmt, shown, settings.pix_fmt)
    check_playable(codec.name, container)
    check_mpeg_rate(codec.name, info, container.codecs)
    width, height = scaled_size(info.width, info.height, settings.scale, scale, pix_fmt)
    said += [w for w in (factor_of(settings.scale, info.width, info.height, scale)[1],) if w]
    said += check_size(codec.name, width, height) + aspect_warnings(codec.name, info, width, height)
    opts, low_memory = encoder_options(codec.name, settings, width, height)
    said += hdr_warnings(codec.name, pix_fmt, info.hdr, container.format if container.played else None,
                         info.hdr10plus is not None)
    dv, dv_said = dovi.carried_into(info, codec.name, pix_fmt, (width, height), container)
    opts = hdr_params(codec.name, pix_fmt, info.hdr, opts)
    check_values(codec.name, opts, settings)
    used = effective(codec.name, opts)  # what a run's report names: its defaults included
    return EncoderChoice(codec.name, pix_fmt, width, height, tuple(opts.items()), used["crf"], used["preset"],
                         used["q"], info.colour.for_output(pix_fmt, codec.name),
                         CODEC_TAGS.get((container.format, codec.name)), low_memory,
                         tuple(said + [dv_said] * bool(dv_said)), settings, dv,
                         None if settings.codec or hdr or info.bits <= 8 else deep_default_line(
                             codec.name, default_codec(container, settings.hardware, False, info.has_alpha),
                             pix_fmt, info.bits, "libx264" in container.codecs))


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
    if codec.name in PALETTE_CODECS:
        return "pal8"  # (made by vsr.video.palette: a palette a frame, its transparency the alpha's)
    colour = colour_pix_fmt(codec, formats, info)
    if info.has_alpha and formats:  # alpha kept where the codec has a format for it
        return alpha_pix_fmt(colour, alpha_formats(codec.name, formats)) or colour
    return colour


def colour_pix_fmt(codec: av.Codec, formats: list[str], info: VideoInfo) -> str:
    """The output format for the source's colour (alpha aside): the source's own where the codec takes it, RGB and
    grey kept where a lossless codec takes them, else YUV of the source's subsampling and depth, or the nearest."""
    src = without_alpha(info.pix_fmt)
    if not formats:
        return src
    src = src if src in formats else planar_twin(src)  # (uyvy422 as yuv422p, monob as gray, XYZ as RGB)
    deep = info.bits > 8
    rgb = is_rgb_format(src)
    if gray_output(codec.name, formats, src):
        return src  # grey kept grey, at its depth
    if rgb_output(codec.name, formats, src):
        return rgb_format(formats, info.bits) or formats[0]  # RGB kept RGB (full range), at its depth
    if rgb or is_gray_format(src):  # YUV 4:4:4 (grey: 4:2:0, no chroma to keep) at its depth; HDR: HDR10's 4:2:0
        src = "yuv420p10le" if is_hdr(info.colour) else ("yuv444" if rgb else "yuv420") + depth_suffix(info.bits)
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


def y4m_pix_fmt(info: VideoInfo, requested: str | None) -> str:
    """The pixel format of a Y4M stream's raw frames (:data:`vsr.video.codecs.Y4M_PIX_FMTS`): ``requested``,
    else the source's, else 4:4:4 of its depth (RGB from PNG frames, and other layouts)."""
    if requested is not None:
        if requested not in Y4M_PIX_FMTS:
            raise InputError(f"Y4M cannot hold --pix-fmt {requested} (it holds {', '.join(Y4M_PIX_FMTS)})")
        return requested
    src = info.pix_fmt.replace("yuvj", "yuv")
    if src in Y4M_PIX_FMTS:
        return src
    return "yuv444p10le" if info.bits > 8 else "yuv444p"


def default_codec(container: OutputContainer, hardware: bool = False, hdr: bool = False, alpha: bool = False,
                  deep: bool = False) -> str:
    """The container's own (:data:`CONTAINER_CODECS`), else for an ``hdr`` source (PQ, HLG, Dolby Vision) the first of
    :data:`vsr.video.hdr.HDR_CODECS` it holds (10-bit HEVC, else AV1: what HDR players decode, and encoders that write
    the static metadata; no NVENC; but ProRes 4444 for one with ``alpha`` too in QuickTime, which keeps both), else for
    a source with ``alpha`` the container's codec that keeps it (:data:`ALPHA_CODECS`: VP9 in Matroska and WebM, ProRes
    4444 in QuickTime), else (``hardware``) h264_nvenc where the container holds H.264 and it opens here
    (:func:`vsr.video.nvenc.nvenc_problem`), else for a ``deep`` source (more than 8 bits) the first of HDR_CODECS
    it holds too (10-bit H.264, High 10, plays almost nowhere), else libx264 where the container holds H.264 (mp4,
    mkv, mov), else the first of FALLBACK_CODECS it holds."""
    own = CONTAINER_CODECS.get(container.format)
    keeps_alpha = ALPHA_CODECS.get(container.format) if alpha and not own else None
    if keeps_alpha in av.codecs_available and (not hdr or keeps_alpha in DEEP_ALPHA_CODECS):
        return keeps_alpha
    deep_codecs = HDR_CODECS if not own and (hdr or deep) else ()
    for name in deep_codecs if hdr else ():  # (HDR before NVENC: PyAV gives it no way to take the metadata)
        if name in container.codecs and name in av.codecs_available:
            return name
    if not own and hardware and "h264_nvenc" in container.codecs and nvenc_problem("h264_nvenc") is None:
        return "h264_nvenc"
    for name in deep_codecs + ((own,) if own else ()) + (DEFAULT_CODEC,) + FALLBACK_CODECS:
        if name in container.codecs and name in av.codecs_available:
            return name
    y4m = " (Y4M is for standard output: vsr upscale IN - > OUT.y4m)" if container.format == "yuv4mpegpipe" else ""
    raise InputError(f"{container.format} holds none of the video codecs vsr writes{y4m}; use an .mp4 or .mkv output")


def check_alpha_default(codec: str, container: OutputContainer, settings: EncoderSettings) -> None:
    """InputError where ``codec``, the container's default for a source with alpha, has no ``--crf`` or
    ``--preset`` the user gave (meant for libx264, which would drop the alpha)."""
    if codec != ALPHA_CODECS.get(container.format):
        return
    given = [name for name, v in (("--crf", settings.crf), ("--preset", settings.preset))
             if v is not None and name not in ALPHA_CODEC_SETTINGS.get(codec, ())]
    if given:
        raise InputError(f"{' and '.join(given)}: {codec}, the {container.format} codec that keeps the source's alpha, "
                         f"has no such setting (leave {'them' if len(given) > 1 else 'it'} out, or give -c libx264, "
                         "which drops the alpha)")


def check_playable(codec: str, container: OutputContainer) -> None:
    """A codec into a container that cannot hold it, or a picture codec (:data:`IMAGE_CODECS`) into one players
    do not read it from (a file: :attr:`OutputContainer.played`; a stream goes into another program) ->
    InputError naming the suffixes that would do."""
    name = container.format
    if codec in IMAGE_CODECS and container.played:
        plays = IMAGE_CONTAINERS_OF.get(codec, IMAGE_CONTAINERS)
        where = holders(codec, plays)
        frames = ", or a folder (a name without suffix) for PNG frames" if codec == "png" else ""
        if name in plays and codec not in container.codecs:
            raise InputError(f"{name} has no codec ID for {codec} video: use {where or 'another container'}"
                             f"{frames}, or another codec (ffv1 is lossless)")
        if name in plays:
            return None
        raise InputError(f"--codec {codec} writes still pictures, which players do not play from {name}: use "
                         f"{where or 'another container'}{frames}")
    _check_holds(codec, container, COMMON_CONTAINERS)


def _check_holds(codec: str, container: OutputContainer, suggested: dict[str, str]) -> None:
    if codec not in container.codecs:
        where = holders(codec, {k: v for k, v in suggested.items() if k != container.format})
        raise InputError(f"{container.format} cannot hold {codec} video (choose another codec"
                         f"{', or ' + where if where else ''})")


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
    if rate and "crf" in opts and (rate[-1] != "crf" or number(params["crf"]) != number(opts["crf"])):
        raise InputError(f"{option_name('crf', opts['crf'], s)} and -x {PARAMS_OPTION[codec]}=...{rate[-1]}="
                         f"{params[rate[-1]]} both set the rate control (the encoder would take the second): "
                         "give one")
    key = quality_key(codec)  # NVENC's constant quality is its cq
    check_crf(codec, opts.get(key), lambda v: option_name(key, v, s))
    check_crf(codec, params.get("crf"), lambda v: f"-x {PARAMS_OPTION[codec]}=...crf={v}")


__all__ = ["EncoderChoice", "EncoderSettings", "OutputContainer", "choose_encoder", "choose_pix_fmt",
           "default_codec"]
