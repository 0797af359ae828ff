"""``StreamSink``: the output as a stream on standard output (``vsr upscale IN -``).

Formats (``--format``): ``y4m`` (the default: raw frames, what ``ffmpeg -i -``, x264, x265 and SVT-AV1 read),
``nut``, ``matroska`` and ``mpegts`` (any codec the format holds, ``-c`` as for files: libx264 by default;
timestamps, audio, subtitles and colour tags as in a file of the format: MPEG-TS as a ``.ts`` file).  Y4M holds
one constant frame rate, the range of the pixels and no audio (dropped with a warning).  The stream is written
as it is encoded, so none of a file's temporary-name-then-rename applies: an interrupted run leaves its reader a
stream that stops early.  A reader that closes the pipe ends the run with :class:`OutputClosed` (one line, no
traceback).
"""

from __future__ import annotations

import os
import warnings
from fractions import Fraction
from pathlib import Path

import av

from vsr.errors import InputError, OutputClosed
from vsr.video.chapters import as_written, frame_span
from vsr.video import matroska
from vsr.video.encoder_choice import EncoderSettings, OutputContainer
from vsr.video.isobmff import NotWritable
from vsr.video.output import STREAM, stream_closed
from vsr.video.reading import open_input
from vsr.video.sink import VideoSink
from vsr.video.source import VideoInfo
from vsr.video.track_metadata import display_metadata

# MPEG-TS: what streaming tools read from a pipe (ffmpeg -f mpegts, broadcast muxers, SRT/UDP relays)
STREAM_FORMATS = {"y4m": "yuv4mpegpipe", "nut": "nut", "matroska": "matroska", "mpegts": "mpegts"}
DEFAULT_FORMAT = "y4m"
CHAPTERED = ("matroska", "nut")  # the stream formats that hold chapters (in their header)
HEADER_MAX = 64 << 20  # a Matroska stream's header held back at most (its attachments: fonts, a cover)


class _Pipe:
    """Standard output for the muxer: every byte written straight to file descriptor 1 (nothing buffered in
    Python that could fail again at exit), a closed pipe raised as :class:`OutputClosed`."""

    def __init__(self, fd: int = 1):
        self.fd = fd

    def write(self, data) -> int:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self.fd, view):]
            except BrokenPipeError:
                raise OutputClosed("standard output was closed by its reader") from None
        return len(data)

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False


class _HeaderPipe(_Pipe):
    """A Matroska stream's standard output: where its video track needs ``extra`` elements (the display size of
    samples that are not square, which FFmpeg's muxer writes only from the stream's sample aspect ratio, which
    PyAV cannot set: :func:`vsr.video.track_metadata.display_metadata`), its header is held back until whole
    and written with them (:func:`vsr.video.matroska.stream_header`), the frames after it as they come.
    :attr:`problem`: why the header went out as the muxer wrote it."""

    def __init__(self, fd: int = 1):
        super().__init__(fd)
        self.extra: bytes | None = None  # None: nothing to add (or added): every byte straight through
        self.problem: str | None = None
        self._held = bytearray()

    def write(self, data) -> int:
        if self.extra is None:
            return super().write(data)
        self._held += data
        try:
            done = matroska.stream_header(self._held, self.extra)
        except NotWritable as e:
            done = self._unchanged(str(e))
        if done is None and len(self._held) > HEADER_MAX:
            done = self._unchanged(f"no frame in its first {HEADER_MAX >> 20} MiB")
        if done is not None:
            end, header = done
            held, self._held, self.extra = self._held, bytearray(), None
            super().write(header + bytes(held[end:]))
        return len(data)

    def _unchanged(self, why: str) -> tuple[int, bytes]:
        self.problem = why
        return 0, b""

    def finish(self) -> None:
        """Write what is still held (a stream that ended before its first frame), as it is."""
        if self.extra is not None and self._held:
            self.problem = "it ended before its first frame"
            held, self._held, self.extra = self._held, bytearray(), None
            super().write(bytes(held))


class StreamSink(VideoSink):
    """A :class:`~vsr.video.sink.VideoSink` whose container is written to standard output as a stream in
    ``settings.container`` (:data:`STREAM_FORMATS`; None: Y4M)."""

    def __init__(self, info: VideoInfo, settings: EncoderSettings, scale: int = 4, trim: bool = False,
                 frames: tuple[int, int | None] = (0, None)):
        self.frames_written = 0
        self._frames = frames  # --frames A:B
        self._promised: tuple[float, float] | None = None  # the span a trimmed stream's chapters were cut to
        fmt = settings.container or DEFAULT_FORMAT
        if fmt == "matroska" and _adts_aac(info):
            # FFmpeg's own limit (ffmpeg -i in.ts -c copy -f matroska - fails the same way): a Matroska header
            # written once, on a pipe, needs the AAC configuration that ADTS carries only in its packets
            raise InputError("Matroska on a pipe cannot hold this ADTS AAC audio (MPEG-TS, raw .aac: its "
                             "configuration comes only with its packets): use --format nut, or a file output")
        super().__init__(Path(STREAM), info, settings, scale, trim)

    def _open(self, dst: Path, settings: EncoderSettings):
        fmt = settings.container or DEFAULT_FORMAT
        if fmt not in STREAM_FORMATS:
            raise InputError(f"--format must be one of {', '.join(STREAM_FORMATS)}, not {fmt!r}")
        if stream_closed(1):
            raise InputError("standard output is closed: there is nowhere to write the video (pipe it into a "
                             "program or a file: vsr upscale IN - | ffmpeg -i - OUT, or give OUT a file name)")
        if os.isatty(1):
            raise InputError("standard output is a terminal: pipe vsr's output into a program or a file "
                             "(e.g. vsr upscale IN - | ffmpeg -i - OUT)")
        self.dst = dst
        self.tmp = None
        self.format = fmt
        # "unofficial": Y4M deeper than 8 bits (C420p10, ...), which FFmpeg writes only when asked
        options = {"strict": "unofficial"} if fmt == "y4m" else {}
        self._pipe = _HeaderPipe() if fmt == "matroska" else _Pipe()
        return av.open(self._pipe, "w", format=STREAM_FORMATS[fmt], options=options)

    def _add_video(self, choice):
        vs = super()._add_video(choice)
        if isinstance(getattr(self, "_pipe", None), _HeaderPipe):  # (before the header: at the first packet)
            self._pipe.extra = display_metadata("matroska", vs.codec_context).video or None
        return vs

    def _chapters_before_header(self, trim: bool) -> None:
        """A trimmed stream's chapters too, cut to the span its file's packets say: the header, written next, is
        the only place a stream has for them (given later, Matroska's muxer writes them after the last cluster,
        where no reader looks, and ffprobe found none); where the span cannot be known now, said in one line."""
        if not (self._chapters and trim) or self.format not in CHAPTERED:
            return super()._chapters_before_header(trim)
        span = frame_span(self.info, *self._frames)
        if isinstance(span, str):
            warnings.warn(f"the source's chapters are left out: a trimmed {self.format} stream holds them in its "
                          f"header, written before its frames, and where its span starts and ends cannot be known "
                          f"then ({span}); a file output keeps them", stacklevel=3)
            return
        first, end = span
        tb = Fraction(self.info.time_base)
        self._promised = (float(first * tb), end)
        self.oc.set_chapters(as_written(self._chapters, (first - self.info.start_pts + self.origin) * tb,
                                        (Fraction(self._promised[0]), Fraction(end))))

    def _container(self) -> OutputContainer:
        """A stream's container: read by another program (ffmpeg, a muxer), which takes any codec it holds; Y4M's
        raw frames in its own pixel formats (:func:`vsr.video.encoder_choice.y4m_pix_fmt`)."""
        return OutputContainer.of(self.oc, stream=self.format)

    def write(self, planes, pts: int, duration: int) -> None:
        try:
            super().write(planes, pts, duration)
        except OutputClosed as e:
            raise OutputClosed(f"{e} after {self.frames_written} frames: stopped") from None
        self.frames_written += 1

    def end(self) -> None:
        try:
            super().end()
            if isinstance(getattr(self, "_pipe", None), _HeaderPipe):
                self._pipe.finish()
                if self._pipe.problem:
                    warnings.warn(f"the sample aspect ratio could not be written into the Matroska stream's header "
                                  f"({self._pipe.problem}): players may show it square", stacklevel=2)
        except OutputClosed as e:
            raise OutputClosed(f"{e} after {self.frames_written} frames, before the end: stopped") from None
        promised, self._promised = self._promised, None
        if promised is not None and self.written_span != promised:  # (a frame the decoder dropped, ...)
            (a, b), (c, d) = promised, self.written_span
            warnings.warn(f"the stream's chapters were cut to {a:.6g}-{b:.6g} s of the source, as its packets said; "
                          f"its frames span {c:.6g}-{d:.6g} s: its chapters are off by the difference", stacklevel=2)

    def commit(self, before_rename=None) -> None:
        """Flush the encoder and end the stream (nothing to rename)."""
        try:
            super().commit(before_rename)
        except OutputClosed as e:
            raise OutputClosed(f"{e} after {self.frames_written} frames, before the end: stopped") from None

    def _move_into_place(self) -> None:
        pass

    def abort(self) -> None:
        self._close_quietly()  # what was written is the reader's; there is no file to remove


def _adts_aac(info: VideoInfo) -> bool:
    """Whether the source has AAC audio without its configuration in the header (ADTS: MPEG-TS, raw .aac)."""
    def adts(streams) -> bool:
        return any(st.type == "audio" and st.codec_context.name == "aac" and not st.codec_context.extradata
                   for st in streams)

    if info.side_packets is not None:
        return adts(info.side_packets.streams)
    if info.kind != "video":
        return False
    with open_input(str(info.path)) as c:
        return adts(c.streams)
