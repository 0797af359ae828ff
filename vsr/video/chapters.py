"""A source's chapters (Matroska, mp4/mov, ...), written into the output at the times the output plays them.

An untrimmed output keeps the source's timestamps, so its chapters are the source's as they are, set before the
header (mp4 then gets its QuickTime chapter track).  A trimmed one (``--frames A:B``, a batch job's join of
such a run) starts where frame A was: its chapters move back by frame A's time, those before the span are left
out, the one running at its start starts at 0, and none runs past its end; they are set once the span is known, before
the file is closed (Matroska and mp4 both write chapters given then).  A stream (``vsr upscale IN -``) has no end to
write them at (Matroska's, on a pipe, is after its index, where no reader looks): a trimmed one's are written in its
header, cut to the span its file's packets say (:func:`frame_span`), or said to be left out where they cannot.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from fractions import Fraction

import av

from vsr.video.reading import open_input, tags


# FFmpeg's muxers that write chapters (given before the header or, to a file, before it is closed); the others
# (MPEG-TS and PS, AVI, FLV, MXF, Y4M, GIF, raw streams, ...) drop them without a word
CHAPTER_MUXERS = frozenset({"matroska", "webm", "mp4", "mov", "3gp", "3g2", "ipod", "ismv", "f4v", "psp", "nut",
                            "asf"})


@dataclass(frozen=True)
class Chapter:
    """One chapter: ``start`` and ``end`` in seconds of the container's timeline, its ``metadata`` (title...)."""

    start: Fraction
    end: Fraction
    metadata: tuple[tuple[str, str], ...] = ()


def read_chapters(container) -> tuple[Chapter, ...]:
    """The chapters of an opened PyAV input container, in order."""
    out = []
    for c in container.chapters():
        tb = Fraction(c["time_base"])
        out.append(Chapter(c["start"] * tb, c["end"] * tb, tuple(sorted(tags(c.get("metadata", {})).items()))))
    return tuple(sorted(out, key=lambda c: c.start))


def as_written(chapters: tuple[Chapter, ...], offset: Fraction = Fraction(0), span: tuple | None = None,
               time_base: Fraction = Fraction(1, 1_000_000_000)) -> list[dict]:
    """``chapters`` for PyAV's ``set_chapters``: moved back by ``offset`` seconds, kept to ``span`` (start, end
    in source seconds; None: all), in ``time_base`` (nanoseconds: Matroska's own unit; each muxer converts)."""
    out = []
    for c in chapters:
        start, end = c.start - offset, c.end - offset
        if span is not None:
            lo, hi = span
            if c.end <= lo or c.start >= hi:
                continue
            # one already running at the span's start runs from the output's start (0, as the source's first
            # chapter does, audio priming and all); none runs past the span's end
            start, end = (start if c.start >= lo else Fraction(0)), min(c.end, hi) - offset
        out.append({"id": len(out) + 1, "start": round(start / time_base), "end": round(end / time_base),
                    "time_base": time_base, "metadata": dict(c.metadata)})
    return out


def frame_span(info, start: int, stop: int | None) -> tuple[int, float] | str:
    """Frame ``start``'s timestamp and where frame ``stop - 1`` (None: the last) ends, in source seconds, of the
    file ``info`` (a :class:`~vsr.video.source.VideoInfo`) describes, from its video packets, not decoded: a frame
    a packet, in timestamp order; read until a packet's decode time passes frame ``stop - 1``'s (no later one can
    come before it).  Where that may not be the frames a run decodes, why not (a string)."""
    if info.kind != "video" or info.side_packets is not None:
        return "the source is a stream, read once"
    if info.field_rate or info.film:
        return "its frames are made by the deinterlacer, not read from the file"
    frames: list[tuple[int, int]] = []  # (-pts, duration): the ``stop`` first frames by timestamp (a max-heap)
    try:
        with open_input(str(info.path)) as c:
            st = c.streams[info.stream_index]
            if st.time_base != info.time_base:
                return "its timestamps are not its video stream's"
            for pkt in c.demux(st):
                if not pkt.size:
                    continue
                if pkt.pts is None or pkt.is_discard:
                    return "its video packets do not all have a timestamp"
                if stop is not None and len(frames) >= stop and pkt.dts is not None and pkt.dts > -frames[0][0]:
                    break
                heapq.heappush(frames, (-pkt.pts, int(pkt.duration or 0)))
                if stop is not None and len(frames) > stop:
                    heapq.heappop(frames)
    except (av.FFmpegError, OSError):
        return "its packets could not be read again"
    pts = sorted((-p, d) for p, d in frames)
    if start >= len(pts):
        return f"it has {len(pts)} video packets"
    if any(a[0] == b[0] for a, b in zip(pts, pts[1:])):
        return "its timestamps repeat"
    tb = info.time_base
    return pts[start][0], float(pts[-1][0] * tb) + float(pts[-1][1] * tb)


def chapters_dropped(muxer: str, chapters: tuple[Chapter, ...]) -> str | None:
    """The one line that says the output's ``muxer`` leaves the source's ``chapters`` out, or None (it keeps
    them, or there are none)."""
    if not chapters or muxer in CHAPTER_MUXERS:
        return None
    n = len(chapters)
    return (f"{muxer} cannot hold the source's chapters: dropped {n} chapter{'s' if n > 1 else ''} (.mkv and .mp4 "
            "keep them)")
