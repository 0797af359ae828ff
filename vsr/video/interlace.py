"""Interlaced sources: their frames deinterlaced before the model sees them.

An interlaced frame holds two fields sampled 1/50 s (or 1/60 s) apart; woven into one picture, anything that
moves is combed, and a model that upscales the comb four times makes it four times as visible (EDVR's aligner
also takes the comb for motion).  So a source whose stream or frames say interlaced is deinterlaced as it is
decoded, with FFmpeg's ``bwdif`` (motion adaptive, the field-blending of w3fdif with yadif's spatial check), one
frame out per frame in: the same frames at the same timestamps, each with its missing lines interpolated
(``mode=send_frame``; only frames flagged interlaced are touched, ``deint=interlaced``, so a mixed stream keeps
its progressive frames; the field order comes from each frame).  ``--deinterlace off`` keeps the frames as
decoded (a source flagged interlaced whose frames are progressive: PsF, film transferred to video).
"""

from __future__ import annotations

import warnings
from collections import deque
from dataclasses import replace
from typing import Iterator

import av

from vsr.errors import InputError

MODES = ("auto", "off")
FILTER = "bwdif"
FILTER_ARGS = "mode=send_frame:parity=auto:deint=interlaced"
# AVFieldOrder: how a stream's codec parameters say its frames are interlaced
FIELD_ORDERS = {2: "top field first", 3: "bottom field first", 4: "top field first", 5: "bottom field first"}


def field_order(stream: av.video.stream.VideoStream, first: av.VideoFrame) -> str | None:
    """How the source is interlaced ("top field first", "bottom field first", "interlaced"), or None
    (progressive): its stream's field order, else its first frame's flag."""
    said = FIELD_ORDERS.get(int(getattr(stream.codec_context, "field_order", 0) or 0))
    if said is None and first.interlaced_frame:
        said = "interlaced"
    return said


def deinterlaced(frames: Iterator[av.VideoFrame], template: av.video.stream.VideoStream) -> Iterator[av.VideoFrame]:
    """``frames`` through ``bwdif``: one frame out for each in, in order, with the input's timestamp, duration
    and pixel format (the filter works at twice the time base's resolution, and on planar formats: a packed
    one, uyvy422, comes back repacked losslessly)."""
    graph = av.filter.Graph()
    source = graph.add_buffer(template=template)
    bwdif = graph.add(FILTER, FILTER_ARGS)
    sink = graph.add("buffersink")
    source.link_to(bwdif)
    bwdif.link_to(sink)
    graph.configure()
    pending: deque[av.VideoFrame] = deque()  # frames in, whose filtered frame has not come out yet

    def out() -> Iterator[av.VideoFrame]:
        while True:
            try:
                f = graph.pull()
            except (av.BlockingIOError, av.EOFError):
                return
            inp = pending.popleft()
            if f.format.name != inp.format.name:
                f = f.reformat(format=inp.format.name)
            f.pts, f.time_base, f.duration = inp.pts, inp.time_base, inp.duration
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
    said in one line where an interlaced source is deinterlaced."""
    if mode not in MODES:
        raise InputError(f"--deinterlace must be one of {', '.join(MODES)}, not {mode!r}")
    on = info.interlaced is not None and mode == "auto"
    if on and str(info.path) not in _SAID_INTERLACED:  # once a process (a job's add opens its input twice)
        _SAID_INTERLACED.add(str(info.path))
        warnings.warn(f"{info.path} is interlaced ({info.interlaced}): its interlaced frames are deinterlaced "
                      f"({FILTER}) before they are upscaled, the same frames at the same times (--deinterlace off "
                      f"keeps them as decoded)", stacklevel=4)
    return replace(info, deinterlaced=on)
