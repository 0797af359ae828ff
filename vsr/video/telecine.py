"""Inverse telecine (``--deinterlace film``): film's own frames back from video that carries it in 3:2 pulldown.

NTSC video carries 24 fps film by repeating a field every other frame (3:2 pulldown, "telecine"): of every 5
video frames at 29.97, 2 weave fields of two different film frames.  Deinterlacing those (``auto``) blurs them and
keeps the stutter; upscaling the woven ones magnifies the comb.  Inverse telecine matches the fields back into
the film frames (FFmpeg's ``fieldmatch``), deinterlaces what it cannot match (``bwdif`` on the frames it marks
combed), and drops the duplicate of each cycle of 5 (``decimate``): 4 frames of every 5, at 4/5 of the rate
(23.976 from 29.97), the film's own pictures.

Timing: frame ``n`` is at the first frame's time plus ``n`` x 5/4 of a source frame, exactly, in a quarter of
the source's time base (decimate's own timestamps round to its frame grid, up to a frame away from the audio).
Captions (:mod:`vsr.video.captions`) of every source frame, a dropped one's too, go with the next frame out, in
order.  Which frames come out depends on the whole cadence, so a batch job of a film source is one chunk, and
``--frames A:B`` counts the frames out (decoded from the top).  Only video at 29.97 (or 30) frames a second carries
pulldown: another rate (film already at 23.976, PAL's 25) is deinterlaced as ``auto`` does, said in one line.
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from typing import Iterator

import av

from vsr.errors import InputError
from vsr.video.captions import a53_of

FILTERS = (("fieldmatch", "order=auto"), ("bwdif", "mode=send_frame:parity=auto:deint=interlaced"), ("decimate", ""))
CYCLE, KEEP = 5, 4  # decimate's cycle: one frame of every 5 dropped


def carries_pulldown(rate: Fraction | None) -> bool:
    """Whether video at ``rate`` frames a second can carry film in 3:2 pulldown: NTSC's 29.97 (or 30).  Film at
    23.976 is film already (soft telecine decodes to its own frames), PAL's 25 carries it frame for frame."""
    return rate is not None and any(abs(rate / r - 1) < 0.002 for r in (Fraction(30000, 1001), Fraction(30)))


def as_film(info):
    """``info`` as ``--deinterlace film`` decodes it: 4/5 of the rate, in a quarter of the time base, frames not
    known before they are counted (:func:`count`)."""
    if not info.rate:
        raise InputError(f"--deinterlace film: {info.path} says no frame rate, which inverse telecine needs")
    return replace(info, deinterlaced=True, film=True, time_base=info.time_base / KEEP,
                   rate=info.rate * KEEP / CYCLE, frames=None, start_pts=info.start_pts * KEEP)


def _graph(template, rate: Fraction):
    graph = av.filter.Graph()
    chain = [graph.add("buffer", video_size=f"{template.width}x{template.height}",
                       pix_fmt=str(int(av.VideoFormat(template.format.name))), time_base=str(template.time_base),
                       pixel_aspect="1/1", frame_rate=str(rate))]
    chain += [graph.add(name, args) for name, args in FILTERS] + [graph.add("buffersink")]
    for a, b in zip(chain, chain[1:]):
        a.link_to(b)
    graph.configure()
    return graph


def inverse_telecined(frames: Iterator[av.VideoFrame], template, info) -> Iterator[av.VideoFrame]:
    """``frames`` (decoded from the top) through fieldmatch, bwdif and decimate, timed as the module says, each
    frame's ``opaque`` the captions of the source frames since the last frame out (bytes, or None); ``info``:
    the film :class:`VideoInfo` (:func:`as_film`)."""
    rate = info.rate * CYCLE / KEEP  # the source's
    step = 1 / (rate * info.time_base * KEEP)  # a source frame in the source's time base (a Fraction)
    graph = _graph(template, rate)
    first, n, captions = None, 0, b""

    def out() -> Iterator[av.VideoFrame]:
        nonlocal n, captions
        while True:
            try:
                f = graph.pull()
            except (av.BlockingIOError, av.EOFError):
                return
            if f.format.name != template.format.name:
                f = f.reformat(format=template.format.name)
            f.pts = first * KEEP + round(n * CYCLE * step)  # (from the first frame: no rounding adds up)
            f.time_base, f.duration = info.time_base, round((n + 1) * CYCLE * step) - round(n * CYCLE * step)
            f.opaque, captions = captions or None, b""
            n += 1
            yield f

    for frame in frames:
        if first is None:
            first = frame.pts if frame.pts is not None else 0
        captions += a53_of(frame) or b""
        graph.push(frame)
        yield from out()
    graph.push(None)
    yield from out()


def counter(info):
    """A function of a file's decoded frames and their stream that counts the frames ``--deinterlace film`` makes
    of them (filtered, no picture converted): what a batch job plans with, counted in the pass that scans the
    file (:func:`vsr.video.seek.scan_video`)."""
    def count(decoded, st) -> int:
        return sum(1 for _ in inverse_telecined(decoded, st, info))
    return count
