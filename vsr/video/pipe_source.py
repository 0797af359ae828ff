"""``StreamSource``: a video on standard input (``vsr upscale - OUT``), read once, in order.

Y4M and any container FFmpeg demuxes without seeking (NUT, MPEG-TS, Matroska, ...) work.  The stream is
probed from its own first frames, which are kept and decoded from there on: a pipe cannot be read twice, so
the header's frame count (usually none: progress then shows frames and fps) and no second demuxer.  Its audio
and subtitle packets are taken as the demuxer passes them and handed to the sink through
``info.side_packets`` (:class:`StreamPackets`), where a file's are read again from the file.
"""

from __future__ import annotations

import io
import os
import select
import stat
import warnings
from collections import deque
from dataclasses import replace
from fractions import Fraction
from itertools import chain
from pathlib import Path
from types import SimpleNamespace
from typing import BinaryIO, Callable, Iterator

import av

from vsr import interrupt
from vsr.errors import InputError
from vsr.video import alpha, hdr10plus
from vsr.video.damage import Damage, Refused
from vsr.video.ends import CountedReader, EarlyEnd, stream_end
from vsr.video.extras import attachments
from vsr.video.interlace import deinterlaced, with_deinterlace
from vsr.video.origin import CLOCKED
from vsr.video.output import STREAM, stream_closed
from vsr.video.reading import ffmpeg_log, ffmpeg_reason, one_line, open_input, size_error
from vsr.video.source import SourceFrame, VideoInfo, field_steps, timed_frames, video_info
from vsr.video.streams import is_attached_pic, main_video, no_video, uniform
from vsr.video.telecine import inverse_telecined

SIDE_TYPES = ("audio", "subtitle")


class StreamPackets:
    """A stream's audio and subtitle packets between its decoder (which :meth:`put` s them as the demuxer passes
    them) and the sink's :class:`~vsr.video.passthrough.Passthrough` (which takes them in another thread).
    Until the sink :meth:`select` s streams, packets are kept; once decoding starts without a sink that wants
    them, none are (a PNG output, or a container that holds none of them)."""

    def __init__(self, streams: list, video: int | None = None, extras: list = ()):
        self.streams = streams
        self.extras = list(extras)  # the stream's attachments (a Matroska's fonts), from its header
        self.video = video  # the video stream whose packets' times are given too (a clock that may restart)
        self.ended = False  # set by next_packet: the stream ended and every packet was taken
        self._finished = False
        self._wanted: set[int] | None = None
        self._queue: deque = deque()

    def select(self, indices: set[int]) -> None:
        self._wanted = set(indices)
        self._queue = deque(p for p in self._queue if p.stream.index in self._wanted or self._timing(p.stream.index))

    def decided(self) -> None:
        """Decoding starts: streams not selected by now never will be."""
        if self._wanted is None:
            self.select(set())

    def put(self, packet) -> None:
        if self._wanted is None or packet.stream.index in self._wanted:
            self._queue.append(packet)

    def put_time(self, packet) -> None:
        """A video packet's times (not its data), for :class:`~vsr.video.joins.JoinedPackets` to follow the
        video's joins as it does a file's; kept while a stream is wanted."""
        if self._wanted is None or self._timing(packet.stream.index):
            self._queue.append(SimpleNamespace(stream=packet.stream, pts=packet.pts, dts=packet.dts,
                                               duration=packet.duration, time_base=packet.time_base))

    def _timing(self, index: int) -> bool:
        return index == self.video and bool(self._wanted)

    def finish(self) -> None:
        self._finished = True

    def next_packet(self):
        finished = self._finished  # read before the queue: a packet put just before the end is not missed
        try:
            return self._queue.popleft()
        except IndexError:
            self.ended = finished
            return None

    def close(self) -> None:
        self._queue.clear()


WAIT_S = 0.1  # how often a read waiting for standard input's next bytes looks for a stop


class _Pipe(io.FileIO):
    """Standard input that is a pipe (or a socket, a device), read as FFmpeg asks: one read(2) each, what is
    there, waited for in steps of :data:`WAIT_S` that see a stop.  A producer that sent nothing (a stalled live
    stream) kept a Ctrl-C or SIGTERM waiting until it sent more or ended: a stop waits for the decode stage,
    which was inside a read of standard input.  ``stopped``: whether the run stopped (another stage failed)."""

    stopped: Callable[[], bool] = staticmethod(lambda: False)

    def read(self, n: int = -1) -> bytes:
        while not select.select([self], [], [], WAIT_S)[0]:
            if interrupt.requested() or self.stopped():
                return b""  # the stream ends here for the stopping run, which publishes nothing (vsr.interrupt)
        return super().read(n)


class StreamSource:
    """The video of a stream on standard input (or of ``file``, a binary file object read in order).
    ``frames()`` may be called once; ``info.frames`` is the header's count, None where it has none.
    ``early_end``: once ``frames()`` has decoded the stream to its end, an :class:`~vsr.video.ends.EarlyEnd`
    where its bytes ended inside a frame (Y4M) or without the index that ends it (NUT); ``damage``, what
    :mod:`vsr.video.damage` met (a packet the decoder refused is skipped, as from a file)."""

    def __init__(self, file: BinaryIO | None = None, deinterlace: str = "auto"):
        self.path = Path(STREAM)
        self._deinterlace = deinterlace  # as VideoSource's
        if file is None:
            if stream_closed(0):
                raise InputError("standard input is closed: there is no video to read from it (pipe one into it: "
                                 "ffmpeg -i IN -f yuv4mpegpipe - | vsr upscale - OUT)")
            if os.isatty(0):
                raise InputError("standard input is a terminal: pipe a video into it (e.g. ffmpeg -i IN -f "
                                 "yuv4mpegpipe - | vsr upscale - OUT)")
            # (a redirected file is read as a file: seekable, and never waited for)
            regular = stat.S_ISREG(os.fstat(0).st_mode)
            file = open(0, "rb", closefd=False) if regular else _Pipe(0, "rb", closefd=False)  # noqa: SIM115
        self._file = CountedReader(file)
        self.early_end: EarlyEnd | None = None
        self.damage: dict | None = None  # once frames() ends: the damage it met (vsr.video.damage)
        self._first_packet = 0
        self._count = 0
        logged: list[str] = []  # a pipe cannot be opened twice, as a file's error path does: its log is kept
        self._opened: list = []  # (and what its opening logged, read once: vsr.video.damage)
        try:
            with ffmpeg_log(logged, self._opened):
                self._container = open_input(self._file)
        except av.EOFError:
            raise InputError("zero frames: standard input ended before its first frame") from None
        except (av.FFmpegError, OSError, ValueError) as e:
            raise size_error("the video on standard input", logged) or \
                InputError(f"not a video stream on standard input ({ffmpeg_reason(e, logged)})") from None
        try:
            self.info = self._probe()
        except BaseException:
            self.close()
            raise

    def _probe(self) -> VideoInfo:
        c = self._container
        why = no_video(c, "standard input")
        if why is not None:
            raise InputError(why.replace("in standard input", "on standard input"))
        st = main_video(c)
        st.thread_type = "AUTO"
        if any(s.type == "video" and s is not st and is_attached_pic(s) for s in c.streams):
            warnings.warn("the cover art of the video on standard input is not kept (its picture is a packet among "
                          "the others): give the file as IN to keep it", stacklevel=4)
        self._side = StreamPackets([s for s in c.streams if s.type in SIDE_TYPES],
                                   st.index if c.format.name in CLOCKED else None, attachments(c))
        self._decoded = self._decode(st)
        # what the probe reads is read once: watched here, its damage carried into frames()'
        self._probed = Damage({c.format.name, st.codec_context.name}, keep=True, demuxer=c.format.name)
        try:
            with self._probed:
                self._first = next(self._decoded)
        except StopIteration:
            raise InputError("zero frames: the video on standard input holds no decodable frame") from None
        except (av.FFmpegError, ValueError) as e:
            hint = ""
            if "mp4" in c.format.name and not self._file.seekable():  # MP4/MOV index usually at the end
                hint = "; MP4 and MOV need a seekable input: redirect the file (< IN.mp4) or pipe NUT, MPEG-TS or Y4M"
            raise InputError(f"cannot decode the video on standard input ({one_line(e)}){hint}") from None
        self._probed.before_first_frame(self._opened)
        return with_deinterlace(replace(video_info(self.path, c, st, self._first), side_packets=self._side),
                                self._deinterlace)

    def _decode(self, st) -> Iterator[av.VideoFrame]:
        """Every video frame of the stream, in order; the other streams' packets go to :attr:`_side`."""
        last: dict[int, tuple[int, int]] = {}
        tag = hdr10plus.tagger(st)  # (an HEVC or AV1 stream's HDR10+, each frame's)
        ctx = alpha.alpha_decoder(st)  # (a VP8/VP9 stream's alpha)
        refused = Refused()  # (a damaged packet skipped, as from a file)
        for packet in self._container.demux():
            if packet.stream.index == st.index:
                self._first_packet = self._first_packet or packet.size
                if self._side.video is not None:
                    self._side.put_time(packet)
                if tag is not None:
                    tag(packet)
                for frame in refused.frames(packet, lambda p: alpha.packet_frames(ctx, p)):
                    self._count += 1
                    yield frame
            elif packet.stream.type in SIDE_TYPES and packet.size and _timed(packet, last):
                self._side.put(packet)
        for frame in alpha.drained(ctx):
            self._count += 1
            yield frame
        self._side.finish()

    def stop_reads(self, stopped: Callable[[], bool]) -> None:
        """A read waiting for standard input's next bytes ends the stream once ``stopped()`` (the run's stop)."""
        if isinstance(self._file.file, _Pipe):
            self._file.file.stopped = stopped

    def probe_sample(self) -> tuple[str, av.VideoFrame]:
        """The video's codec and the frame decoded to probe the stream: what :mod:`vsr.video.compression`
        measures of a stream, which cannot be read twice."""
        return self._container.streams[self.info.stream_index].codec_context.name, self._first

    def frames(self, start: int = 0) -> Iterator[SourceFrame]:
        """Frames ``start, start + 1, ...``: those before are decoded, not converted (no seeking in a pipe)."""
        self._side.decided()
        decoded = uniform(chain([self._first], self._decoded), 0, self.info)
        st = self._container.streams[self.info.stream_index]
        if self.info.film:
            decoded = inverse_telecined(decoded, st, self.info)
        elif self.info.deinterlaced:
            decoded = deinterlaced(decoded, st, *field_steps(self.info))
        damage = Damage({self._container.format.name, st.codec_context.name}, before=self._probed,
                        demuxer=self._container.format.name)
        try:
            with damage:
                yield from timed_frames(decoded, 0, start, self.info, damage)
        finally:
            self.damage = damage.record()
        self.early_end = stream_end(self._file, self._container.format.name, self._first_packet, self._count)

    def close(self) -> None:
        container = getattr(self, "_container", None)
        if container is not None:
            container.close()
        self._file.close()


def _timed(packet, last: dict[int, tuple[int, int]]) -> bool:
    """Give a side packet without timestamps the time after the previous packet of its stream (``last``: each
    stream's last (timestamp, duration)), as FFmpeg's own stream copy does: read from a pipe, MPEG-TS gives the
    time only to the first audio frame of each PES packet.  False where it cannot be placed (dropped)."""
    i = packet.stream.index
    step = packet.duration or _frame_duration(packet)
    if packet.dts is None and packet.pts is None:
        if i not in last or not last[i][1]:
            return False
        packet.pts = packet.dts = last[i][0] + last[i][1]
    last[i] = (packet.dts if packet.dts is not None else packet.pts, step)
    return True


def _frame_duration(packet) -> int:
    """One audio frame's duration in the packet's time base, from the codec's frame size (0 if unknown)."""
    cc = packet.stream.codec_context
    if packet.stream.type != "audio" or not cc.frame_size or not cc.sample_rate:
        return 0
    return round(Fraction(cc.frame_size, cc.sample_rate) / packet.time_base)
