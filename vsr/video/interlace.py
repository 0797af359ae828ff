"""Interlaced sources: their frames deinterlaced before the model sees them.

An interlaced frame holds two fields sampled 1/50 s (or 1/60 s) apart; woven into one picture, anything that
moves is combed, and a model that upscales the comb four times makes it four times as visible (EDVR's aligner
also takes the comb for motion).  So a source whose stream or frames say interlaced is deinterlaced as it is
decoded, with FFmpeg's ``bwdif`` (motion adaptive, the field-blending of w3fdif with yadif's spatial check), one
frame out per frame in: the same frames at the same timestamps, each with its missing lines interpolated
(``mode=send_frame``; only frames flagged interlaced are touched, ``deint=interlaced``, so a mixed stream keeps
its progressive frames; the field order comes from each frame).  ``--deinterlace off`` keeps the frames as
decoded (a source flagged interlaced whose frames are progressive: PsF, film transferred to video).

``--deinterlace double`` makes each field a frame of its own (``mode=send_field``: 50 frames a second from 25
interlaced ones, the motion of every field kept, as broadcast and camcorder video was shot): frame ``2i`` is frame
``i``'s first field at its time, ``2i + 1`` its second half a frame later; the time base is halved so both times
are exact, and every frame of the stream is split (``deint=all``), so frame ``i`` of the file is always output
frames ``2i`` and ``2i + 1``: ``--frames A:B``, batch jobs and their seeks count output frames.

``--deinterlace film`` is inverse telecine (:mod:`vsr.video.telecine`): the 24 fps film frames of 3:2 pulldown.
"""

from __future__ import annotations

import warnings
from collections import deque
from dataclasses import replace
from typing import Iterator

import av

from vsr.errors import InputError
from vsr.video.telecine import as_film, carries_pulldown

MODES = ("auto", "off", "double", "film")
FILTER = "bwdif"
FILTER_ARGS = "mode=send_frame:parity=auto:deint=interlaced"
DOUBLE_ARGS = "mode=send_field:parity=auto:deint=all"
# AVFieldOrder: how a stream's codec parameters say its frames are interlaced
FIELD_ORDERS = {2: "top field first", 3: "bottom field first", 4: "top field first", 5: "bottom field first"}


def field_order(stream: av.video.stream.VideoStream, first: av.VideoFrame) -> str | None:
    """How the source is interlaced ("top field first", "bottom field first", "interlaced"), or None
    (progressive): its stream's field order, else its first frame's flag."""
    said = FIELD_ORDERS.get(int(getattr(stream.codec_context, "field_order", 0) or 0))
    if said is None and first.interlaced_frame:
        said = "interlaced"
    return said


def deinterlaced(frames: Iterator[av.VideoFrame], template: av.video.stream.VideoStream, double: bool = False,
                 frame_step: int = 1) -> Iterator[av.VideoFrame]:
    """``frames`` through ``bwdif``: one frame out for each in, in order, with the input's timestamp, duration
    and pixel format (the filter works at twice the time base's resolution, and on planar formats: a packed
    one, uyvy422, comes back repacked losslessly).  ``double``: two out for each in, its fields, at twice its
    timestamp and twice it plus its duration (``frame_step`` where it has none), each a half frame long, in half
    the time base."""
    graph = av.filter.Graph()
    source = graph.add_buffer(template=template)
    bwdif = graph.add(FILTER, DOUBLE_ARGS if double else FILTER_ARGS)
    sink = graph.add("buffersink")
    source.link_to(bwdif)
    bwdif.link_to(sink)
    graph.configure()
    pending: deque[av.VideoFrame] = deque()  # frames in, whose filtered frames have not all come out yet
    field = 0  # of the oldest pending frame, in double mode: the next to come out

    def out() -> Iterator[av.VideoFrame]:
        nonlocal field
        while True:
            try:
                f = graph.pull()
            except (av.BlockingIOError, av.EOFError):
                return
            inp = pending[0]
            if f.format.name != inp.format.name:
                f = f.reformat(format=inp.format.name)
            f.time_base, f.duration = inp.time_base, inp.duration
            if not double:
                f.pts = pending.popleft().pts
            else:
                half = int(inp.duration or frame_step)
                f.time_base, f.duration = inp.time_base / 2, half
                f.pts = None if inp.pts is None else 2 * inp.pts + field * half
                field += 1
                if field == 2:
                    pending.popleft()
                    field = 0
            yield f

    for frame in frames:
        pending.append(frame)
        graph.push(frame)
        yield from out()
    graph.push(None)
    yield from out()


_SAID_INTERLACED: set[str] = set()


def with_deinterlace(info, mode: str):
    """``info`` with :attr:`VideoInfo.deinterlaced` decided by ``mode`` (:data:`vsr.video.interlace.MODES`),
    said in one line where an interlaced source is deinterlaced; in ``double`` mode with twice the frames at
    twice the rate, in half the time base (:attr:`VideoInfo.field_rate`)."""
    if mode not in MODES:
        raise InputError(f"--deinterlace must be one of {', '.join(MODES)}, not {mode!r}")
    if mode == "film" and not carries_pulldown(info.rate):
        warnings.warn(f"--deinterlace film: {info.path} runs at {float(info.rate or 0):.3f} fps, not NTSC's 29.97: "
                      f"no 3:2 pulldown to undo (23.976 is film already, 25 carries it frame for frame); "
                      f"deinterlaced as --deinterlace auto does", stacklevel=3)
        mode = "auto"
    if mode == "film":  # asked for: telecined video is often flagged progressive
        film = as_film(info)
        if str(info.path) not in _SAID_INTERLACED:
            _SAID_INTERLACED.add(str(info.path))
            warnings.warn(f"{info.path}: inverse telecine (fieldmatch, decimate): the film's frames, 4 of every 5, "
                          f"at {float(film.rate):.3f} fps", stacklevel=4)
        return film
    on = info.interlaced is not None and mode != "off"
    double = on and mode == "double"
    if on and str(info.path) not in _SAID_INTERLACED:  # once a process (a job's add opens its input twice)
        _SAID_INTERLACED.add(str(info.path))
        what = (f"each field made a frame of its own ({FILTER}): twice the frames at twice the rate" if double else
                f"its interlaced frames are deinterlaced ({FILTER}) before they are upscaled, the same frames at the "
                f"same times (--deinterlace double makes each field a frame; off keeps them as decoded)")
        warnings.warn(f"{info.path} is interlaced ({info.interlaced}): {what}", stacklevel=4)
    return as_fields(info) if double else replace(info, deinterlaced=on)


def as_fields(info):
    """``info`` of an interlaced source as ``--deinterlace double`` decodes it: each field a frame, twice the
    frames at twice the rate, timestamps in half the time base."""
    return replace(info, deinterlaced=True, field_rate=True, time_base=info.time_base / 2,
                   rate=info.rate * 2 if info.rate else None, frames=info.frames * 2 if info.frames else None,
                   start_pts=info.start_pts * 2)
