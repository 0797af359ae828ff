"""Frame sources: a video file (PyAV) or a folder of PNG frames, yielding float32 RGB frames in order.

Opening a source checks everything a user can get wrong (missing path, not a video, no video stream,
no frames) and raises :class:`vsr.errors.InputError` with one line.
"""

from __future__ import annotations

import logging
import re
import warnings
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import Iterator

import av
import numpy as np

from vsr.errors import InputError
from vsr.video import alpha, dovi, hdr10plus, rpu
from vsr.video.animation import plays_of
from vsr.video.captions import FrameStore, a53_of
from vsr.video.chapters import Chapter, read_chapters
from vsr.video.colour import ColourSpec, bit_depth, decode_rgb
from vsr.video.damage import Damage, past_damage, seconds
from vsr.video.ends import EarlyEnd, file_end, y4m_frames
from vsr.video.formats import has_alpha
from vsr.video.hdr import HdrMetadata, read_hdr
from vsr.video.interlace import deinterlaced, field_order, with_deinterlace
from vsr.video.orientation import read_matrix
from vsr.video.reading import check_video_file, one_line, open_error, open_input, tags
from vsr.video.seek import EntryPoint, enter, picture_digest
from vsr.video.spherical import View, read_view
from vsr.video.streams import frame_rate, main_video, no_video, uniform
from vsr.video.telecine import inverse_telecined

log = logging.getLogger(__name__)



class SourceChanged(InputError):
    """The input is not the file it was when it was first read (a batch job's input replaced since it was
    added): what was computed from it before must not be mixed with what is computed now."""


@dataclass(frozen=True)
class SourceFrame:
    """One decoded frame: ``rgb`` float32 ``(3, H, W)`` in [0, 1]; ``pts``/``duration`` in the source's
    time base (``duration`` may be 0 where the source does not say)."""

    index: int
    pts: int
    duration: int
    rgb: np.ndarray


@dataclass(frozen=True)
class VideoInfo:
    """What the writer needs to reproduce the source faithfully."""

    path: Path
    kind: str  # "video" or "png"
    width: int
    height: int
    pix_fmt: str
    bits: int
    colour: ColourSpec
    time_base: Fraction
    rate: Fraction | None  # average frame rate (timestamps are copied; it only fills in those a source lacks)
    frames: int | None  # from the header or a count; None when unknown
    rotation: int = 0  # display rotation in degrees (counter-clockwise), kept as metadata
    display_matrix: tuple[int, ...] | None = None  # the whole matrix (a mirror too): vsr.video.orientation
    sample_aspect_ratio: Fraction | None = None
    stream_index: int = 0
    metadata: dict = field(default_factory=dict)  # the video stream's tags (language, title, ...)
    container_metadata: dict = field(default_factory=dict)
    start_pts: int = 0
    start_s: float | None = None  # the container's start (its earliest stream's): vsr.video.origin
    duration_s: float | None = None
    container: str = ""  # FFmpeg's name of the file's format ("matroska,webm", "nut", ...)
    header_frames: int | None = None  # the count the file's header declares (None: it declares none)
    hdr: HdrMetadata | None = None  # a PQ or HLG source's mastering display and light level (vsr.video.hdr)
    interlaced: str | None = None  # "top field first", ... (vsr.video.interlace); None: progressive
    chapters: tuple[Chapter, ...] = ()  # the container's chapters (vsr.video.chapters)
    deinterlaced: bool = False  # its frames go through the deinterlacer (``deinterlace="auto"``)
    # each field a frame (``deinterlace="double"``): frame i of the file is frames 2i and 2i + 1, time_base, rate,
    # frames and start_pts are the output's (header_frames stays the file's)
    field_rate: bool = False
    film: bool = False  # inverse telecine (``deinterlace="film"``, vsr.video.telecine): frames counted out of it
    # the closed captions of the frames decoded (vsr.video.captions), taken by the sink; None: a source without
    captions: object = field(default=None, compare=False, repr=False)
    # the HDR10+ and HDR Vivid payloads of the frames decoded (vsr.video.hdr10plus), taken by the sink; None: not
    # an HDR source of a codec that carries them
    hdr10plus: object = field(default=None, compare=False, repr=False)
    # Dolby Vision: the profile its first RPU says (0: one vsr does not read; None: not Dolby Vision), and each
    # decoded frame's RPU, taken by the sink (vsr.video.dovi)
    dolby_vision: int | None = None
    dovi: object = field(default=None, compare=False, repr=False)
    view: View | None = None  # a 360 video's projection, a stereoscopic one's layout (vsr.video.spherical)
    plays: int | None = None  # how many times an animation (GIF, APNG) plays, 0 for ever (vsr.video.animation)
    # each decoded frame's alpha plane (vsr.video.alpha), taken by the sink; None: a source without alpha
    alpha: object = field(default=None, compare=False, repr=False)
    # a stream's audio and subtitle packets as its decoding passes them (vsr.video.passthrough.PacketFeed): a
    # pipe cannot be read a second time, as a file's are; None for a file
    side_packets: object = field(default=None, compare=False, repr=False)

    @property
    def has_alpha(self) -> bool:
        """Whether the source has alpha: its pixel format's, or a palette's that is not opaque (:attr:`alpha` then
        holds each decoded frame's)."""
        return self.alpha is not None or has_alpha(self.pix_fmt)

    @property
    def frames_estimate(self) -> int | None:
        """The frame count from the header, else duration x average rate (for progress bars only)."""
        if self.frames:
            return self.frames
        if self.duration_s and self.rate:
            return int(round(self.duration_s * float(self.rate)))
        return None


# container formats that hold one still image (FFmpeg's image demuxers), not a video
_STILL_FORMATS = re.compile(r"^(image2|image2pipe|\w+_pipe)$")


class VideoSource:
    """Decodes the first video stream of a file.  ``frames()`` may be called once.

    ``entry``: a keyframe where decoding may start for ``frames(start)`` with ``start >= entry.index``, checked
    to decode exactly (:mod:`vsr.video.seek`); None: always decode from the top.  ``expect``: frame index ->
    the picture digest (:func:`vsr.video.seek.picture_digest`) that frame must decode to; a frame decoded to
    another picture means the file is not the one those digests were taken of (a batch job's input replaced
    after it was queued): :class:`SourceChanged`.  ``deinterlace``: "auto" (an interlaced source's frames are
    deinterlaced, :mod:`vsr.video.interlace`) or "off".  ``early_end``: once ``frames()`` has decoded the file to its
    end, an :class:`~vsr.video.ends.EarlyEnd` where it ended before what it declared (:mod:`vsr.video.ends`).
    """

    def __init__(self, path: Path, entry: EntryPoint | None = None, expect: dict[int, str] | None = None,
                 deinterlace: str = "auto"):
        self.path = Path(path)
        self.entry = entry
        self.expect = dict(expect or {})
        self.early_end: EarlyEnd | None = None  # see frames()
        self.damage: dict | None = None  # once frames() ends: the damage it met (vsr.video.damage)
        self._y4m_cut: tuple[int, int] | None = None
        self._decoded = 0
        check_video_file(self.path)
        try:
            self._container = open_input(str(self.path))
        except PermissionError:
            raise InputError(f"cannot read {self.path}: permission denied") from None
        except av.EOFError:
            raise InputError(f"zero frames: {self.path} ends before its first frame") from None
        except av.FFmpegError as e:
            raise open_error(self.path, e) from None
        except (OSError, ValueError) as e:
            raise InputError(f"not a video file: {self.path} ({one_line(e)})") from None
        try:
            self.info = with_deinterlace(self._probe(), deinterlace)
        except BaseException:
            self._container.close()
            raise

    def _probe(self) -> VideoInfo:
        c = self._container
        why = no_video(c, str(self.path))
        if why is not None:
            raise InputError(why)
        st = main_video(c)
        cc = st.codec_context  # None where FFmpeg has no decoder for the stream's codec (a damaged header)
        if cc is None or not cc.width or not cc.height or cc.pix_fmt is None:
            if cc is not None and st.frames:  # (an MP4 whose index is whole and its data cut short: +faststart)
                raise InputError(f"no decodable frame in {self.path}: its header declares {st.frames} frames, none "
                                 "can be read (a copy cut short?)")
            raise InputError(f"no decodable video stream in {self.path}")
        # the first frame decides format, colour tags and rotation; it also proves there is one
        first = self._first_frame(st)
        info = video_info(self.path, c, st, first)
        frames = info.frames
        if c.format.name == "yuv4mpegpipe":
            frames = self._y4m_whole_frames()
        elif _STILL_FORMATS.match(c.format.name):
            frames = 1
            warnings.warn(f"{self.path} is a still image ({cc.name}), not a video: it is upscaled as one frame",
                          stacklevel=4)
        elif frames is None and info.duration_s is None:
            frames = self._count_packets(st.index)  # WebM written live, raw streams: no count or duration in the header
        return replace(info, frames=frames)

    def _first_frame(self, st) -> av.VideoFrame:
        self._first_packet_size = 0
        ctx = alpha.alpha_decoder(st, said=True)  # (a VP8/VP9 stream's alpha, which FFmpeg's own decoders drop)

        def decode(packet):
            self._first_packet_size = self._first_packet_size or packet.size
            return alpha.packet_frames(ctx, packet)

        try:
            # (a damaged packet skipped: a frame-threaded decoder takes several before its first frame comes out)
            for frame in past_damage(self._container, st, decode):
                return frame
            for frame in alpha.drained(ctx):
                return frame
        except (av.FFmpegError, ValueError) as e:
            raise InputError(f"cannot decode the video of {self.path} ({one_line(e)})") from None
        raise InputError(f"zero frames: the video stream of {self.path} holds no decodable frame")

    def _y4m_whole_frames(self) -> int:
        """The number of whole frames of a Y4M file, from its size (each frame: a ``FRAME`` line, then a
        fixed number of bytes).  A file that ends inside a frame (whose part FFmpeg drops silently) is said as
        any cut source is, once it is decoded to its end (:meth:`_ended`): a decode that fails first says its
        error alone, a run of frames before the end nothing."""
        with open(self.path, "rb") as f:
            head = f.read(1 << 16)  # the probe read the header: it is there
        whole, rest = y4m_frames(head, self._first_packet_size, self.path.stat().st_size)
        if rest:
            self._y4m_cut = (whole, rest)
        return whole

    def _count_packets(self, index: int) -> int | None:
        """Video packets in the file, by demuxing without decoding (one packet is one frame in the containers
        that get here; reads the file once but decodes nothing)."""
        try:
            with open_input(str(self.path)) as c:
                return sum(1 for packet in c.demux(c.streams[index]) if packet.size) or None
        except av.FFmpegError:
            return None  # the count is for progress bars only; decoding reports a broken file

    def frames(self, start: int = 0) -> Iterator[SourceFrame]:
        """Frames ``start, start + 1, ...`` (indices in presentation order).

        Frames before ``start`` are decoded (a seek is not frame-exact on every file) but never converted to
        RGB, which is most of the cost of a frame here.  Decoding starts at the top, or at the
        source's ``entry`` when ``start`` is at or after it and the entry frame decodes to the picture it was
        verified with (:func:`vsr.video.seek.enter`).  An unverified seek is never used: on the cockatoo clip in
        ``shared/data/videos`` FFmpeg decodes a later IDR frame wrongly when it starts there, sometimes without
        flagging it corrupt (``tests/video/test_source_seek.py`` checks ``start`` on that clip).
        """
        per = 2 if self.info.field_rate else 1  # frames out per frame of the file
        damage = Damage(set())  # (its names once the file is open: Damage.opened)
        try:
            # watched from the opening on: a .mkv's demuxer reads its first cluster there, damage there stops it (said
            # as an early end alone); left after the close: decoder threads may log until then.  (Fields: from the
            # file's frame before, so that start's second field has both neighbours; film: from the cadence's top)
            with damage:
                c, decoded, index = self._decoder(0 if self.info.film else max(start // per - (per - 1), 0))
                try:
                    st = c.streams[self.info.stream_index]
                    damage.opened(c.format.name, st.codec_context.name, counted=start == 0)
                    yield from timed_frames(self._converted(decoded, index, st), index * per, start, self.info,
                                            damage)
                finally:
                    c.close()
        finally:
            self.damage = damage.record()
        self.early_end = self._ended()  # decoded to its end

    def _converted(self, decoded: Iterator[av.VideoFrame], index: int, st) -> Iterator[av.VideoFrame]:
        """The file's frames from ``index`` as the run takes them: checked, uniform, deinterlaced or inverse
        telecined."""
        decoded = uniform(self._checked(decoded, index), index, self.info)
        if self.info.film:
            return inverse_telecined(decoded, st, self.info)
        if self.info.deinterlaced:  # from where decoding starts: each frame has the neighbours it has in a whole run
            return deinterlaced(decoded, st, *field_steps(self.info))
        return decoded

    @property
    def frames_decoded(self) -> int | None:
        """The frames out of the file's frames decoded so far (its length, once :meth:`frames` reached its end);
        None where a frame of the file is not one frame out (inverse telecine)."""
        return None if self.info.film else self._decoded * (2 if self.info.field_rate else 1)

    def _ended(self) -> EarlyEnd | None:
        if self._y4m_cut is not None:
            whole, rest = self._y4m_cut
            return EarlyEnd(self._decoded, None, f"by its size it ends {rest} bytes into frame {whole}, which is "
                                                 "dropped")
        i = self.info
        return file_end(self.path, i.container, i.header_frames, i.duration_s, i.rate, self._decoded, i.stream_index)

    def _decoder(self, start: int):
        """``(container, decoded frames, index of the first)`` for ``frames(start)``."""
        # a fresh demuxer: seeking back after the probe is not exact in every container
        c, st = self._reopen()
        if self.entry is not None and 0 < self.entry.index <= start:
            frames = enter(c, st, self.entry, self._decode)
            if frames is not None:
                return c, frames, self.entry.index
            c, st = self._reopen()  # the decoder has seen the seek: a fresh one decodes from the top
        return c, self._decode(c, st), 0

    def _decode(self, c, st) -> Iterator[av.VideoFrame]:
        """``c.decode(st)``; each frame's HDR10+ and HDR Vivid read from its packet where the source can hold them,
        a VP8/VP9 frame's alpha decoded where the stream carries it (:func:`vsr.video.alpha.decoded`)."""
        return hdr10plus.decoded(c, st) if self.info.hdr10plus is not None else alpha.decoded(c, st)

    def _reopen(self):
        """The file opened again (the one open before closed) and its video stream (the probe's choice)."""
        self._container.close()
        c = self._container = open_input(str(self.path))
        st = c.streams[self.info.stream_index]
        st.thread_type = "AUTO"
        return c, st

    def _checked(self, decoded: Iterator[av.VideoFrame], index: int) -> Iterator[av.VideoFrame]:
        """``decoded`` (frames ``index, index + 1, ...``), each frame of :attr:`expect` checked first."""
        for frame in decoded:
            if index in self.expect and picture_digest(frame) != self.expect[index]:
                raise SourceChanged(f"{self.path} has changed: its frame {index} is not the picture it was "
                                    "when it was read before")
            yield frame
            index += 1
            self._decoded = index

    def close(self) -> None:
        self._container.close()


def video_info(path: Path, c, st, first: av.VideoFrame) -> VideoInfo:
    """What the container ``c``, its video stream ``st`` and their first decoded frame say about the video; the
    frame count is the header's (None where it has none)."""
    cc = st.codec_context
    pix_fmt = first.format.name
    colour = ColourSpec.of(pix_fmt, first.width, first.height, int(first.colorspace), int(first.color_range),
                           int(first.color_primaries), int(first.color_trc))
    duration_s = float(st.duration * st.time_base) if st.duration else (c.duration / 1e6 if c.duration else None)
    dolby_vision = dovi.profile_of(first)
    return VideoInfo(
        path=path, kind="video", width=first.width, height=first.height, pix_fmt=pix_fmt,
        bits=bit_depth(pix_fmt), colour=colour, time_base=st.time_base, rate=frame_rate(st, first),
        frames=st.frames or None, rotation=int(round(first.rotation or 0)) % 360, display_matrix=read_matrix(first),
        sample_aspect_ratio=cc.sample_aspect_ratio or st.sample_aspect_ratio, stream_index=st.index,
        metadata=tags(st.metadata), container_metadata=tags(c.metadata),
        start_pts=first.pts if first.pts is not None else 0, duration_s=duration_s, container=c.format.name,
        start_s=c.start_time / 1e6 if c.start_time is not None else None,
        header_frames=st.frames or None, hdr=read_hdr(first, colour), interlaced=field_order(st, first),
        chapters=read_chapters(c), captions=FrameStore(), view=read_view(first),
        alpha=FrameStore() if alpha.has_alpha_frame(first) else None, plays=plays_of(path, c.format.name),
        hdr10plus=FrameStore() if hdr10plus.read_from(cc.codec.canonical_name, colour.transfer) else None,
        dolby_vision=dolby_vision, dovi=None if dolby_vision is None else FrameStore())


def field_steps(info: VideoInfo) -> tuple[bool, int]:
    """:func:`vsr.video.interlace.deinterlaced`'s ``double`` and ``frame_step`` for ``info``: a frame of the file
    at the average rate, in its time base (where a frame says no duration)."""
    rate, tb = info.rate, info.time_base
    return info.field_rate, max(1, round(1 / (rate * tb))) if rate and tb else 1


def timed_frames(decoded: Iterator[av.VideoFrame], index: int, start: int, info: VideoInfo,
                 damage: Damage | None = None) -> Iterator[SourceFrame]:
    """Decoded frames ``index, index + 1, ...`` -> the :class:`SourceFrame` of those from ``start`` on (earlier
    ones are decoded but never converted to RGB, which is most of the cost of a frame), with increasing
    timestamps: a frame without one, or with one not after the previous frame's (raw streams have none, some
    muxers write one value for all), follows the previous frame by its duration, else by one frame at the
    average rate (encoders and muxers need increasing timestamps; warned once).  ``damage`` (:mod:`vsr.video.damage`)
    sees each frame from ``start`` on that the decoder flags as damaged or that follows an error FFmpeg logged."""
    rate, tb = info.rate, info.time_base
    step = max(1, round(1 / (rate * tb))) if rate and tb else 1
    last_pts = None
    last_dur = 0
    warned = False
    try:
        for frame in decoded:
            pts = frame.pts
            dur = int(frame.duration or 0)
            if last_pts is None:
                pts = 0 if pts is None else pts
            elif pts is None or pts <= last_pts:
                if not warned:
                    _warn_timestamps(info, index, pts, last_pts)
                    warned = True
                pts = last_pts + (last_dur or step)
            if damage is not None and (frame.is_corrupt or damage.logs):  # (said at the run's end)
                damage.frame(frame, seconds(pts, info), index >= start)
            if index >= start:
                if info.captions is not None and not (info.field_rate and index % 2):  # (a frame's, on its first field)
                    info.captions.put(index, int(pts), frame.opaque if info.film else a53_of(frame))
                if info.hdr10plus is not None and not info.film and isinstance(frame.opaque, tuple):
                    info.hdr10plus.put(index, int(pts), frame.opaque)
                if info.dovi is not None and not info.film:
                    info.dovi.put(index, int(pts), rpu.buffer_of(frame))
                if info.alpha is not None:
                    info.alpha.put(index, int(pts), alpha.alpha_of(frame))
                yield SourceFrame(index, int(pts), dur, decode_rgb(frame, info.colour))
            last_pts, last_dur = pts, dur
            index += 1
    except av.FFmpegError as e:
        raise InputError(f"decoding {info.path} failed at frame {index} ({one_line(e)})") from None


def _warn_timestamps(info: VideoInfo, index: int, pts: int | None, last_pts: int) -> None:
    what = "has no timestamp" if pts is None else f"has timestamp {pts}, not after the previous frame's {last_pts}"
    rate = f"{float(info.rate):.6g} fps" if info.rate else "unknown rate"
    warnings.warn(f"{info.path}: frame {index} {what}: timestamps synthesised, each such frame one frame "
                  f"duration after the previous one ({rate})", stacklevel=4)
