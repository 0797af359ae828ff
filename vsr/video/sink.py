"""Frame sinks: an encoded video file (PyAV) or a folder of PNG frames.

Both write under a temporary name in the destination's folder and rename on :meth:`commit`; :meth:`abort`
(any failure, Ctrl-C) removes the temporary, so an interrupted run never leaves a file at the output path.

The video sink copies the source's timestamps frame by frame (variable frame rate stays variable), its
audio and subtitle packets (re-encoding audio only where the container cannot hold the codec), stream
metadata, display rotation and sample aspect ratio, and tags the colour it really wrote.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import struct
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import av
import numpy as np

from vsr.errors import InputError
from vsr.video.colour import (SPC_RGB, ColourSpec, FramePlanes, bit_depth, encode_planes, is_gray_format,
                              is_rgb_format, planar444, planes_to_frame)
from vsr.video.source import VideoInfo

log = logging.getLogger(__name__)

DEFAULT_CODEC = "libx264"


@dataclass(frozen=True)
class EncoderSettings:
    """``codec``, ``crf``, ``preset``, ``pix_fmt`` (None: the source's, where the codec allows) and extra
    encoder ``options`` (``-x key=value``)."""

    codec: str | None = None  # None: libx264, or what the container holds where it cannot hold H.264
    crf: float | None = None
    preset: str | None = None
    pix_fmt: str | None = None
    options: tuple[tuple[str, str], ...] = field(default_factory=tuple)


TEXT_SUBTITLES = ("subrip", "srt", "ass", "ssa", "webvtt", "text")


def subtitle_text(data: bytes, codec: str) -> str:
    """The plain text of one subtitle packet (ASS events lose their fields and override tags)."""
    text = data.decode("utf-8", errors="replace")
    if codec in ("ass", "ssa"):
        text = text.split(",", 8)[-1]
        text = re.sub(r"\{[^}]*\}", "", text).replace("\\N", "\n").replace("\\n", "\n")
    return text


def is_png_folder(path: Path) -> bool:
    """Output/input naming rule: an existing folder, or a name without a suffix, is a PNG-frame folder."""
    return path.is_dir() or path.suffix == ""


def temporary_path(dst: Path) -> Path:
    """A hidden name beside ``dst`` with the same suffix (so the container is still guessed from it)."""
    return dst.with_name(f".{dst.stem}.vsr-partial-{os.getpid()}{dst.suffix}")


def check_output(dst: Path, src: Path, overwrite: bool) -> None:
    """One-line errors for outputs that cannot work: the input itself, an unwritable folder, an existing file."""
    if dst.exists() and src.exists() and dst.resolve() == src.resolve():
        raise InputError(f"output is the input: {dst}")
    parent = dst.parent if str(dst.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(f"output folder does not exist: {parent}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"output folder is not writable: {parent}")
    probe = parent / f".vsr-write-test-{os.getpid()}"
    try:  # access() says yes to root even on read-only mounts; creating a file is the real test
        probe.touch()
        probe.unlink()
    except OSError as e:
        raise InputError(f"output folder is not writable: {parent} ({e.strerror})") from None
    remove_stale_partials(dst)
    if dst.exists() and not overwrite:
        if dst.is_dir() and not any(dst.iterdir()):
            return
        raise InputError(f"output exists: {dst} (pass --overwrite to replace it)")


def remove_stale_partials(dst: Path) -> None:
    """Remove temporaries of ``dst`` left by runs that were killed outright (SIGKILL, power loss)."""
    pattern = re.compile(re.escape(f".{dst.stem}.vsr-partial-") + r"(\d+)" + re.escape(dst.suffix) + "$")
    for p in dst.parent.glob(f".{dst.stem}.vsr-partial-*"):
        m = pattern.match(p.name) or re.match(re.escape(f".{dst.name}.vsr-partial-") + r"(\d+)$", p.name)
        if not m or int(m.group(1)) == os.getpid():
            continue
        try:
            os.kill(int(m.group(1)), 0)
            continue  # that run is still going
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        log.info("removing %s left by an interrupted run", p)
        shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)


def output_bits(pix_fmt: str) -> int:
    return bit_depth(planar444(pix_fmt))


class PngFolderSink:
    """``%08d.png`` frames (8-bit RGB, or 16-bit where the source or ``pix_fmt`` is deeper than 8 bits)."""

    def __init__(self, dst: Path, info: VideoInfo, settings: EncoderSettings):
        self.dst = Path(dst)
        deep = (settings.pix_fmt or "").startswith(("rgb48", "rgba64")) or (settings.pix_fmt is None and info.bits > 8)
        if settings.pix_fmt not in (None, "rgb24", "rgb48be", "rgb48le", "rgb48"):
            raise InputError(f"PNG frames are rgb24 or rgb48be, not --pix-fmt {settings.pix_fmt}")
        self.pix_fmt = "rgb48be" if deep else "rgb24"
        self.colour = info.colour.for_output(self.pix_fmt)
        self.tmp = self.dst.with_name(f".{self.dst.name}.vsr-partial-{os.getpid()}")
        self.tmp.mkdir()
        self.count = 0

    def plane_dtype(self):
        return np.uint16 if self.pix_fmt == "rgb48be" else np.uint8

    def planes_format(self) -> tuple[str, ColourSpec]:
        return self.pix_fmt, self.colour

    def memory_estimate_mb(self) -> float:
        return 0.0  # one frame at a time, written and gone

    def new_planes(self, height: int, width: int) -> np.ndarray:
        return np.empty((3, height, width), self.plane_dtype())

    def finish(self, planes: np.ndarray) -> np.ndarray:
        return planes

    def write(self, planes: np.ndarray, pts: int, duration: int) -> None:
        import cv2

        bgr = np.ascontiguousarray(planes[::-1].transpose(1, 2, 0))
        name = self.tmp / f"{self.count:08d}.png"
        if not cv2.imwrite(str(name), bgr, [cv2.IMWRITE_PNG_COMPRESSION, 1]):
            raise OSError(f"could not write {name}")
        self.count += 1

    def commit(self) -> None:
        if self.dst.exists():
            shutil.rmtree(self.dst) if self.dst.is_dir() else self.dst.unlink()
        os.replace(self.tmp, self.dst)

    def abort(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)


class DtsRepair:
    """Mends encoder packets whose decode timestamp is garbage, before the muxer refuses them.

    Seen with libx265 4.2 through FFmpeg under CPU load (about 1 run in 10 on a loaded 2-core machine): the first
    packet of a stream came out with dts = -9.6e15 and MP4 muxing failed ("Not yet implemented in FFmpeg").  A
    dts later than its pts, or more than ``max_delay_s`` before it, cannot be right; such a packet is held back
    until the next packet's dts is known and then given the latest dts that keeps the order: below the next
    one, not above its own pts, after the previous one.
    """

    def __init__(self, max_delay_s: float = 60.0):
        self.max_delay_s = max_delay_s
        self.held: list = []
        self.prev_dts: int | None = None
        self.repaired = 0

    def _bad(self, pkt) -> bool:
        if pkt.dts is None or pkt.pts is None:
            return False
        return pkt.dts > pkt.pts or float((pkt.pts - pkt.dts) * pkt.time_base) > self.max_delay_s

    def _release(self, next_dts: int | None) -> list:
        """The held packets with dts counted back from ``next_dts`` (None: the end: each gets its pts)."""
        bound = next_dts
        for h in reversed(self.held):
            dts = h.pts if bound is None else min(h.pts, bound - 1)
            log.warning("encoder gave packet pts %s a dts of %s; muxed with dts %s", h.pts, h.dts, dts)
            h.dts = bound = dts
            self.repaired += 1
        out, self.held = self.held, []
        return out

    def repair(self, packets, last: bool = False):
        for pkt in packets:
            if self._bad(pkt):
                self.held.append(pkt)
                continue
            for h in self._release(pkt.dts):
                yield self._emit(h)
            yield self._emit(pkt)
        if last:
            for h in self._release(None):
                yield self._emit(h)

    def _emit(self, pkt):
        if pkt.dts is not None:
            if self.prev_dts is not None and pkt.dts <= self.prev_dts:
                pkt.dts = self.prev_dts + 1  # only repaired packets at the very end can get here
            self.prev_dts = pkt.dts
        return pkt


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


BIG_OUTPUT_PIXELS = 3840 * 2160
# libx264 beyond 4K (docs/benchmarks.md, scripts/bench_encoder_memory.py, 7680x4320, 2 cores): the defaults
# (frame threads, rc-lookahead 40, 3 refs, 3 B-frames) hold 5.2 GB; rc-lookahead 10: 3.4 GB; sliced threads and
# no lookahead: 1.7 GB; and with 1 ref and 1 B-frame: 1.1 GB.  vsr takes the last unless the user sets any of
# x264-params or rc-lookahead, or asks for ultrafast (0.56 GB already).  CRF keeps the quality; files grow a bit.
BIG_OUTPUT_X264_PARAMS = "sliced-threads=1:rc-lookahead=0:sync-lookahead=0:ref=1:bframes=1"
# Encoder memory per output megapixel, for the memory plan (vsr.pipeline.memory): measured at 7680x4320.
ENCODER_MB_PER_MPX = {"libx264": 158.0, "libx264-big": 34.0, "libx264-ultrafast": 17.0, "ffv1": 8.0,
                      "prores_ks": 8.0, "png": 0.0}
ENCODER_MB_PER_MPX_OTHER = 60.0  # not measured: a generous guess (a dozen frames in flight)
FALLBACK_CODECS = ("libsvtav1", "libvpx-vp9", "ffv1", "mpeg4")


def default_codec(container) -> str:
    """libx264 where the container holds H.264 (mp4, mkv, mov), else the first of FALLBACK_CODECS it holds."""
    for name in (DEFAULT_CODEC,) + FALLBACK_CODECS:
        if name in container.supported_codecs and name in av.codecs_available:
            return name
    raise InputError(f"{container.format.name} holds none of the video codecs vsr writes; "
                     f"use an .mp4 or .mkv output")


def open_codec(name: str) -> av.Codec:
    try:
        codec = av.Codec(name, "w")
    except (ValueError, av.FFmpegError):
        raise InputError(f"unknown codec {name!r} (try libx264, libx265, libsvtav1, ffv1, prores_ks)") from None
    if codec.type != "video":
        raise InputError(f"--codec {name} is a {codec.type} codec, not a video one")
    return codec


class VideoSink:
    """Encodes ``(3, H, W)`` planes from :func:`vsr.video.colour.encode_planes` into a container.

    With ``trim`` (``--frames A:B``) the output starts where the source starts: timestamps move back by
    the time of frame A, and only audio/subtitle packets inside the written frames' span are copied.
    """

    def __init__(self, dst: Path, info: VideoInfo, settings: EncoderSettings, scale: int = 4,
                 trim: bool = False):
        self.dst = Path(dst)
        self.info = info
        self.tmp = temporary_path(self.dst)
        self.pts_offset = 0
        self.keep_window = trim
        self._window_start: float | None = None
        self._window_end = 0.0
        if settings.codec is not None:
            codec = open_codec(settings.codec)
        try:
            self.oc = av.open(str(self.tmp), "w")
        except ValueError:
            raise InputError(f"unknown output container for {self.dst.name!r} (use .mp4, .mkv, .mov, ...)") from None
        except (av.FFmpegError, OSError) as e:
            raise InputError(f"cannot write {self.dst}: {e}") from None
        self._passthrough = []
        self._in = None
        try:
            if settings.codec is None:
                codec = open_codec(default_codec(self.oc))
            self.codec = codec.name
            self.pix_fmt = choose_pix_fmt(codec, info, settings.pix_fmt)
            self.colour = info.colour.for_output(self.pix_fmt)
            if codec.name not in self.oc.supported_codecs:
                raise InputError(f"{self.oc.format.name} cannot hold {codec.name} video (choose another codec or "
                                 f"an .mkv output)")
            self.vs = self._add_video(codec, settings, scale)
            if info.kind == "video":
                self._add_passthrough()
            self.oc.metadata.update(info.container_metadata)
            try:
                self.oc.start_encoding()
            except (av.FFmpegError, ValueError) as e:
                opts = " ".join(f"{k}={v}" for k, v in self.vs.options.items()) or "defaults"
                why = e.strerror if isinstance(e, av.FFmpegError) and e.strerror else str(e).splitlines()[0][:120]
                raise InputError(f"{codec.name} rejected its options ({opts}): {why}") from None
        except BaseException:
            self.abort()
            raise

    def plane_dtype(self):
        return np.uint8 if bit_depth(planar444(self.pix_fmt)) <= 8 else np.uint16

    def planes_format(self) -> tuple[str, ColourSpec]:
        return self.pix_fmt, self.colour

    def memory_estimate_mb(self) -> float:
        """What the encoder itself will hold at its peak, estimated from measurements (see ENCODER_MB_PER_MPX)."""
        name = self.vs.codec_context.name
        if name == "libx264" and self.low_memory_x264:
            name = "libx264-big"
        elif name == "libx264" and self.encoder_options.get("preset") == "ultrafast":
            name = "libx264-ultrafast"
        return ENCODER_MB_PER_MPX.get(name, ENCODER_MB_PER_MPX_OTHER) * self.vs.width * self.vs.height / 1e6

    def new_planes(self, height: int, width: int) -> np.ndarray | FramePlanes:
        """Where one output frame's integer 4:4:4 planes are assembled (``[:, ys, xs]`` regions, filled by
        :func:`vsr.video.colour.encode_planes`): the planes of the frame the encoder will get, for Y/Cb/Cr."""
        if self.colour.matrix == SPC_RGB:
            return np.empty((3, height, width), self.plane_dtype())
        return FramePlanes(width, height, planar444(self.pix_fmt))

    def finish(self, planes: np.ndarray | FramePlanes) -> av.VideoFrame:
        """A complete frame from :meth:`new_planes` -> the frame to encode (output pixel format, colour tags).

        Called in the post-processing stage, so the encoder thread only encodes and the frames waiting for it
        are already subsampled (4:2:0: half the bytes of the 4:4:4 planes).
        """
        return planes_to_frame(planes, self.pix_fmt, self.colour)

    # ---- setup ---------------------------------------------------------------------------------

    def _add_video(self, codec: av.Codec, s: EncoderSettings, scale: int):
        info = self.info
        rate = info.rate if info.rate else None
        vs = self.oc.add_stream(codec.name, rate=rate)
        vs.width, vs.height = info.width * scale, info.height * scale
        vs.pix_fmt = self.pix_fmt
        vs.time_base = info.time_base
        cc = vs.codec_context
        cc.time_base = info.time_base
        if info.sample_aspect_ratio:
            cc.sample_aspect_ratio = info.sample_aspect_ratio
        spec = self.colour
        if not (is_rgb_format(self.pix_fmt) or is_gray_format(self.pix_fmt)):
            cc.colorspace = spec.matrix
            cc.color_range = spec.range
        cc.color_primaries = spec.primaries
        cc.color_trc = spec.transfer
        opts = {}
        if s.crf is not None:
            opts["crf"] = f"{s.crf:g}"
        if s.preset is not None:
            opts["preset"] = s.preset
        opts.update(dict(s.options))
        self.low_memory_x264 = False
        if codec.name == "libx264" and vs.width * vs.height > BIG_OUTPUT_PIXELS and "rc-lookahead" not in opts \
                and "x264-params" not in opts and opts.get("preset") != "ultrafast":
            opts["x264-params"] = BIG_OUTPUT_X264_PARAMS
            self.low_memory_x264 = True
            log.info("output beyond 4K: libx264 with %s to bound its memory (-x x264-params=... overrides)",
                     BIG_OUTPUT_X264_PARAMS)
        vs.options = opts
        self.encoder_options = dict(opts)
        self._dts = DtsRepair()
        vs.thread_type = "AUTO"
        if info.rotation:
            vs.set_display_rotation(info.rotation)
        for k, v in info.metadata.items():
            if k.upper() not in ("DURATION", "ENCODER", "HANDLER_NAME", "VENDOR_ID"):
                vs.metadata[k] = v
        return vs

    def _add_passthrough(self) -> None:
        self._in = av.open(str(self.info.path), "r")
        for st in self._in.streams:
            if st.type not in ("audio", "subtitle"):
                continue
            name = st.codec_context.name if st.codec_context else None
            meta = {k: v for k, v in st.metadata.items() if k.upper() not in ("DURATION", "ENCODER")}
            if name in self.oc.supported_codecs:
                out = self.oc.add_stream_from_template(st)
                mode = "copy"
            elif st.type == "audio" and self.oc.default_audio_codec not in (None, "none"):
                target = self.oc.default_audio_codec
                warnings.warn(f"{self.oc.format.name} cannot hold {name} audio (stream {st.index}): "
                              f"re-encoding it to {target}", stacklevel=2)
                out = self.oc.add_stream(target, rate=st.codec_context.sample_rate)
                out.layout = st.codec_context.layout
                mode = "encode"
            elif st.type == "subtitle" and name in TEXT_SUBTITLES and "mov_text" in self.oc.supported_codecs:
                warnings.warn(f"{self.oc.format.name} cannot hold {name} subtitles (stream {st.index}): "
                              "converting them to mov_text (plain text, styling dropped)", stacklevel=2)
                out = self.oc.add_mux_stream("mov_text")
                out.time_base = st.time_base
                mode = f"text:{name}"
            else:
                warnings.warn(f"{self.oc.format.name} cannot hold {name} {st.type} (stream {st.index}): dropped",
                              stacklevel=2)
                continue
            for k, v in meta.items():
                out.metadata[k] = v
            out.disposition = st.disposition
            self._passthrough.append((st, out, mode))
        if self._passthrough:
            self._packets = self._in.demux([st for st, _, _ in self._passthrough])
            self._pending = None
            self._routes = {st.index: (out, mode) for st, out, mode in self._passthrough}
        else:
            self._in.close()
            self._in = None

    # ---- writing -------------------------------------------------------------------------------

    def write(self, planes: np.ndarray | av.VideoFrame, pts: int, duration: int) -> None:
        """Encode one frame: integer 4:4:4 planes, or a frame made by :meth:`finish`."""
        t = float(pts * self.info.time_base)
        if self._window_start is None:
            self._window_start = t
            if self.keep_window:
                self.pts_offset = pts - self.info.start_pts
        frame = planes if isinstance(planes, av.VideoFrame) else planes_to_frame(planes, self.pix_fmt, self.colour)
        frame.pts = pts - self.pts_offset
        frame.time_base = self.info.time_base
        if duration:
            frame.duration = duration
        self._window_end = t + float((duration or 0) * self.info.time_base)
        for pkt in self._dts.repair(self.vs.encode(frame)):
            self._copy_until(float(pkt.dts * pkt.time_base) + float(self.pts_offset * self.info.time_base)
                             if pkt.dts is not None else t)
            self.oc.mux(pkt)

    def _copy_until(self, t_src: float | None) -> None:
        """Mux passthrough packets whose source time is before ``t_src`` (None: all that remain)."""
        if self._in is None:
            return
        shift = float(self.pts_offset * self.info.time_base)
        while True:
            pkt = self._pending
            if pkt is None:
                try:
                    pkt = next(self._packets)
                except StopIteration:
                    self._in.close()
                    self._in = None
                    return
                if pkt.dts is None and pkt.pts is None:
                    continue  # flush marker
                self._pending = pkt
            ts = pkt.dts if pkt.dts is not None else pkt.pts
            t = float(ts * pkt.time_base)
            if t_src is not None and t >= t_src:
                return
            self._pending = None
            if self.keep_window:
                start = self._window_start if self._window_start is not None else 0.0
                # before the first written frame: dropped, unless that frame is the source's first (then
                # these are the codec's priming packets, which belong to the start)
                if self.pts_offset and float((pkt.pts if pkt.pts is not None else ts) * pkt.time_base) < start - 1e-9:
                    continue
                if t >= self._window_end and t_src is None:
                    continue
            out, mode = self._routes[pkt.stream.index]
            off = int(round(shift / pkt.time_base)) if shift else 0
            if mode == "copy":
                if off:
                    if pkt.pts is not None:
                        pkt.pts -= off
                    if pkt.dts is not None:
                        pkt.dts -= off
                pkt.stream = out
                self.oc.mux(pkt)
            elif mode.startswith("text:"):
                text = subtitle_text(bytes(pkt), mode[5:]).encode("utf-8")
                conv = av.Packet(struct.pack(">H", len(text)) + text)
                conv.pts = None if pkt.pts is None else pkt.pts - off
                conv.dts = None if pkt.dts is None else pkt.dts - off
                conv.duration = pkt.duration
                conv.time_base = pkt.time_base
                conv.stream = out
                self.oc.mux(conv)
            else:
                for fr in pkt.decode():
                    if fr.pts is not None and off:
                        fr.pts -= off
                    for p in out.encode(fr):
                        self.oc.mux(p)

    def commit(self) -> None:
        for pkt in self._dts.repair(self.vs.encode(None), last=True):
            self.oc.mux(pkt)
        self._copy_until(None)
        for _, out, mode in self._passthrough:
            if mode == "encode":
                for p in out.encode(None):
                    self.oc.mux(p)
        self.oc.close()
        os.replace(self.tmp, self.dst)

    def abort(self) -> None:
        for c in (getattr(self, "oc", None), self._in):
            try:
                if c is not None:
                    c.close()
            except Exception:  # closing a half-written container may fail; the file goes anyway
                pass
        try:
            self.tmp.unlink()
        except FileNotFoundError:
            pass


def open_sink(dst: Path, info: VideoInfo, settings: EncoderSettings, scale: int = 4, trim: bool = False):
    """A :class:`PngFolderSink` for a folder name, else a :class:`VideoSink` (container from the suffix)."""
    if is_png_folder(Path(dst)):
        return PngFolderSink(Path(dst), info, settings)
    return VideoSink(Path(dst), info, settings, scale, trim)


__all__ = ["EncoderSettings", "VideoSink", "PngFolderSink", "open_sink", "check_output", "is_png_folder",
           "output_bits"]
