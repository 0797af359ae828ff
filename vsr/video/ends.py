"""Whether a source ended before it said it would: a file or a stream cut short (a copy or a download that
stopped, a pipe whose writer was killed).

FFmpeg's demuxers hand over what the bytes hold and stop, mostly without a word: a Matroska file cut at 60 %
decodes to its first frames, a NUT stream cut inside a packet gives that packet short, a Y4M stream cut inside a
frame drops it.  So once a source is decoded to its end it is held against what it declared
(:class:`EarlyEnd`, None where it is whole):

- a file's header: its frame count (MP4, MOV: exact); else the duration it declares (Matroska, WebM, AVI, whose
  index counts entries without a picture: a frame shown again, FFmpeg's dropped or repeated frame), when 2 or
  more of the frames that duration holds are missing and none of the file's streams reaches it (a file whose
  audio outlasts its video is whole);
- Y4M: everything after the header is whole frames (a file: its size; a stream: the bytes read);
- NUT: FFmpeg ends every NUT file and stream with its index, whose last 12 bytes point back to it; a NUT
  without one was cut after its last packet began.

A stream in another container (Matroska, MPEG-TS) declares neither a count nor a duration on a pipe: a cut
there is not seen.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av

from vsr.video.reading import open_input

NUT_INDEX = bytes.fromhex("4E58DD672F23E64E")  # the NUT index startcode
TAIL_BYTES = 1 << 20  # the bytes kept from a stream's end (a NUT index of hours of video fits)
HEAD_BYTES = 1 << 16
NUT_CUT = "it has no NUT index at its end: it was cut after its last packet began (that frame may be incomplete)"


@dataclass(frozen=True)
class EarlyEnd:
    """A source that ended early: ``decoded`` frames, of ``declared`` (None: it declares no count), and
    ``detail``, what says so."""

    decoded: int
    declared: int | None
    detail: str

    def message(self, path: str | os.PathLike, written: int | None = None) -> str:
        """One line; ``written``: the frames a run wrote (None: before a run, all that decode are upscaled)."""
        name = "standard input" if os.fspath(path) == "-" else os.fspath(path)
        return (f"{name} ended early: {self.detail}; {self.decoded} frame{'s' if self.decoded != 1 else ''} "
                f"decoded, {'all upscaled' if written is None else f'{written} written'}")

    def to_dict(self, written: int) -> dict:
        """For the run report's settings (``input_ended_early``)."""
        return {"frames_written": written, "frames_decoded": self.decoded, "frames_declared": self.declared,
                "detail": self.detail}


def y4m_frames(head: bytes, frame_bytes: int, total: int) -> tuple[int, int]:
    """``(whole frames, bytes of the partial one)`` of a Y4M of ``total`` bytes starting with ``head`` (its
    header line and at least the first ``FRAME`` line), whose frames are ``frame_bytes`` of samples each."""
    header = head.index(b"\n") + 1
    frame_line = head.find(b"\n", header) + 1 - header
    return divmod(total - header, max(frame_line, 0) + frame_bytes)


def nut_whole(tail: bytes, total: int) -> bool:
    """Whether the last bytes ``tail`` of a NUT of ``total`` bytes end with its index (index_ptr, the 8 bytes
    before the index packet's 4-byte checksum, is the index's length back from the end)."""
    if len(tail) < 12:
        return False
    back = int.from_bytes(tail[-12:-4], "big")
    if back > total:
        return False
    if back > len(tail):
        return True  # an index longer than what was kept: not judged
    return tail[len(tail) - back: len(tail) - back + 8] == NUT_INDEX


def file_end(path: Path, container: str, header_frames: int | None, duration_s: float | None,
             rate: Fraction | None, decoded: int, stream: int = 0) -> EarlyEnd | None:
    """How the video file ``path`` (in the FFmpeg format ``container``; its video: stream ``stream``) ended, decoded
    to its end in ``decoded`` frames, against its header's frame count or duration and (NUT) its index."""
    if container == "nut":
        size = path.stat().st_size
        with open(path, "rb") as f:
            f.seek(max(0, size - TAIL_BYTES))
            if not nut_whole(f.read(), size):
                return EarlyEnd(decoded, None, NUT_CUT)
        return None
    if header_frames and container != "avi":  # an AVI's index counts its empty entries: frames shown again
        if decoded < header_frames:
            shown, left_out = _packets(path, stream)
            if decoded < header_frames - left_out and shown < header_frames - left_out:
                return EarlyEnd(decoded, header_frames, f"its header declares {header_frames} frames")
        return None
    if not duration_s or not rate:
        return None
    declared = int(round(duration_s * float(rate)))
    if decoded > declared - 2:
        return None
    end = _streams_end(path)  # the rare path: a second read of the file, packets only
    if end is None or end >= duration_s - 1.5 / float(rate):
        return None
    return EarlyEnd(decoded, declared, f"it declares {duration_s:.2f} s (about {declared} frames at "
                                       f"{float(rate):.4g} fps) but its streams end at {end:.2f} s")


def _packets(path: Path, stream: int) -> tuple[int, int]:
    """``(shown, left out)``: the packets of video stream ``stream`` that are there to be shown, and those the
    file's edit list leaves out, which its header counts and no decoder shows (an MP4 cut with ``ffmpeg -ss ... -c
    copy`` or a phone's trim starts at the keyframe before the cut: it was said to have ended early).  All shown
    packets there, fewer frames decoded: frames lost to damage in the file's middle, which
    :mod:`vsr.video.damage` says, not an early end.  Demuxed, not decoded; the rare path, as :func:`_streams_end`."""
    shown = left_out = 0
    try:
        with open_input(str(path)) as c:
            for p in c.demux(c.streams[stream]):
                if p.size:
                    left_out += p.is_discard
                    shown += not p.is_discard
    except (av.FFmpegError, OSError, IndexError):
        pass  # (what was counted before the error stands)
    return shown, left_out


def _streams_end(path: Path) -> float | None:
    """Seconds from the file's start to the end of its last packet of any stream (demuxed, not decoded)."""
    try:
        with open_input(str(path)) as c:
            start = (c.start_time or 0) / 1e6
            end = None
            for p in c.demux():
                t = p.pts if p.pts is not None else p.dts
                if t is None or p.time_base is None:
                    continue
                t = float((t + (p.duration or 0)) * p.time_base) - start
                end = t if end is None else max(end, t)
            return end
    except (av.FFmpegError, OSError):
        return None


class CountedReader:
    """A binary file read in order (standard input), as PyAV reads it, counting the bytes and keeping the first
    :data:`HEAD_BYTES` and the last :data:`TAIL_BYTES` of them, for :func:`stream_end`.  Seeks pass through (a
    redirected file is seekable); only bytes past the furthest read so far count as new."""

    def __init__(self, file):
        self.file = file
        self.total = 0
        self.pos = 0
        self.head = bytearray()
        self.tail = bytearray()

    def read(self, n: int = -1) -> bytes:
        data = self.file.read(n)
        start, end = self.pos, self.pos + len(data)
        if end > self.total:
            if start > self.total:  # a seek past what was read: the kept tail would not be contiguous
                self.tail.clear()
            new = data[max(0, self.total - start):]
            if len(self.head) == self.total < HEAD_BYTES and start <= self.total:  # read from 0 without a gap
                self.head += new[:HEAD_BYTES - len(self.head)]
            self.tail += new
            if len(self.tail) > 2 * TAIL_BYTES:
                del self.tail[:-TAIL_BYTES]
            self.total = end
        self.pos = end
        return data

    def seekable(self) -> bool:
        return self.file.seekable()

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        self.pos = self.file.seek(offset, whence)
        return self.pos

    def tell(self) -> int:
        return self.pos

    def close(self) -> None:
        self.file.close()


def stream_end(reader: CountedReader, container: str, first_packet: int, decoded: int) -> EarlyEnd | None:
    """How a stream read through ``reader`` ended, decoded to its end in ``decoded`` frames (``first_packet``:
    the size of its first video packet, a Y4M frame's samples)."""
    if container == "yuv4mpegpipe" and first_packet:
        whole, rest = y4m_frames(bytes(reader.head), first_packet, reader.total)
        if rest:
            return EarlyEnd(decoded, None, f"its bytes end {rest} into Y4M frame {whole}, which is dropped")
    if container == "nut" and not nut_whole(bytes(reader.tail), reader.total):
        return EarlyEnd(decoded, None, NUT_CUT)
    return None
