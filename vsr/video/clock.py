"""Times on a source's clock, as a player shows them: ``--start``/``--end`` of ``vsr upscale`` and ``vsr jobs add``,
and ``vsr preview --at``.

A time counts from the source's first frame (its presentation time is 0), as a player's clock and ``ffmpeg -ss``
count.  :func:`frames_between` turns a span of such times into the frame range ``--frames A:B`` takes, by each
frame's own timestamp (read from the file's packets, nothing decoded), so a variable-frame-rate source is cut
where its frames really are, not at index x average rate.
"""

from __future__ import annotations

import math
from fractions import Fraction

import av

from vsr.errors import InputError
from vsr.video.reading import open_input
from vsr.video.source import VideoSource

TIME_FORMS = "seconds (90, 90.5) or [H:]M:S (1:30, 01:30:00.25)"


def parse_time(text, option: str) -> Fraction:
    """``90``, ``90.5``, ``12.5s``, ``1:30``, ``01:30:00.25`` -> seconds (exact: a decimal is not rounded to a
    float); anything else, or a negative time, is one line naming ``option``."""
    text = str(text).strip()
    parts = (text[:-1] if text.endswith("s") else text).split(":")
    try:
        if len(parts) > 3 or any(not p or p.strip() != p or p[0] in "+-" for p in parts):
            raise ValueError
        values = [Fraction(p) for p in parts]
        if any(v < 0 for v in values) or any(v >= 60 for v in values[1:]) or not math.isfinite(float(values[0])):
            raise ValueError
    except (ValueError, ZeroDivisionError, OverflowError):
        raise InputError(f"{option} must be a time: {TIME_FORMS}, not {text!r}") from None
    return sum((v * 60 ** k for k, v in enumerate(reversed(values))), Fraction(0))


def say_time(seconds) -> str:
    """Seconds as the user writes them, and :func:`parse_time` reads them back: ``90`` -> ``1:30``, ``5400.25`` ->
    ``1:30:00.25``, ``2.5`` -> ``2.5s``."""
    s = Fraction(seconds)
    whole, part = divmod(s, 1)
    tail = f"{float(part):.3f}".rstrip("0").rstrip(".")[1:] if part else ""
    h, rest = divmod(int(whole), 3600)
    m, sec = divmod(rest, 60)
    if h:
        return f"{h}:{m:02d}:{sec:02d}{tail}"
    return f"{m}:{sec:02d}{tail}" if m else f"{sec}{tail}s"


# Packets past the last time asked for that end a read of the timestamps: more than any decoder's reordering
# (H.264/HEVC hold at most 16 frames), so every frame before that time has been seen
PAST = 64


def frame_times(source, until: Fraction | None = None) -> list[Fraction]:
    """Each frame's presentation time in seconds from the first frame, in the order a run numbers them: a video
    file's by its packets' timestamps (those the demuxer discards, before an edit list's start, left out; a file
    whose packets carry none: one frame at the average rate each), a folder's frame i at i / its rate; each field
    a frame (``--deinterlace double``): a frame's second field half-way to the next frame.  None for a source
    whose frames are not known before they are decoded (a stream, inverse telecine, an animated WebP).
    ``until``: the times up to there are all that is asked: the read stops :data:`PAST` packets after it (a
    minute into a film is not a read of the whole file), the list then every frame before ``until`` and some
    after it, not every frame."""
    info = source.info
    if info.kind == "png" and info.frames and info.rate:
        return [Fraction(i) / info.rate for i in range(info.frames)]
    if not isinstance(source, VideoSource) or info.film:
        return None
    with open_input(str(source.path)) as c:
        st = c.streams[info.stream_index]
        try:
            pts = _packet_times(c.demux(st), None if until is None else until / st.time_base)
        except av.FFmpegError:
            return None
        time_base = st.time_base  # (the file's: info's is the output's, which fields made finer)
    rate = info.rate / 2 if info.field_rate and info.rate else info.rate  # the file's frames a second
    if not pts or (None in pts and not rate):
        return None
    if None in pts:  # (raw streams) the run synthesises them so: a frame at the average rate each
        times = [Fraction(i) / rate for i in range(len(pts))]
    else:
        pts.sort()
        times = [(p - pts[0]) * time_base for p in pts]
    if info.field_rate:
        halves = [(b - a) / 2 for a, b in zip(times, times[1:])] + [1 / (2 * rate) if rate else Fraction(0)]
        times = [t for a, half in zip(times, halves) for t in (a, a + half)]
    return times


def _packet_times(packets, until) -> list:
    """The timestamps of ``packets`` that are frames (not empty, not discarded), in file order; ``until`` (in the
    stream's time base, from its first frame; None: all): stop once :data:`PAST` of them lie past it."""
    pts, first, past = [], None, 0
    for p in packets:
        if not p.size or p.is_discard:
            continue
        pts.append(p.pts)
        if until is None or p.pts is None:
            continue
        first = p.pts if first is None else min(first, p.pts)  # (reordered: the earliest of those so far)
        past += p.pts - first >= until
        if past >= PAST:
            break
    return pts


def frames_between(source, start: Fraction | None, end: Fraction | None, said: str) -> tuple[int, int | None]:
    """The frames ``--frames A:B`` names for the times ``start`` (None: the top) to ``end`` (None: the end):
    those whose time is >= start and < end; B None where that is every frame to the end.  ``said``: how the user
    gave them (``--start 1:30 --end 1:40``), for the one-line errors."""
    bounds = [t for t in (start, end) if t is not None]
    times = frame_times(source, max(bounds) if bounds else None)
    if times is None:
        raise InputError(f"{said}: the frames' times of {source.info.path} are known only as it is decoded (a "
                         "stream, inverse telecine, an animated WebP); give --frames A:B")
    first = sum(1 for t in times if start is not None and t < start)  # (timestamps sorted: those before start)
    if first == len(times):
        length = times[-1] + _last_duration(source.info, times)
        raise InputError(f"{said}: the source is only {say_time(length)} long (its last frame starts at "
                         f"{say_time(times[-1])})")
    stop = None if end is None else sum(1 for t in times if t < end)
    if stop is not None and stop <= first:  # (end > start >= 0, and the first frame is at 0: first > 0 here)
        raise InputError(f"{said}: no frame starts between them (frames at {say_time(times[first - 1])} and "
                         f"{say_time(times[first])})")
    return first, None if stop == len(times) else stop


def _last_duration(info, times: list[Fraction]) -> Fraction:
    """The last frame's duration, as near as the source says: one frame at its average rate, else the step before."""
    if info.rate:
        return 1 / Fraction(info.rate)
    return times[-1] - times[-2] if len(times) > 1 else Fraction(0)
