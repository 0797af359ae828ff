"""Where a trimmed output's (``--frames A:B``) audio starts and ends, to the sample where it can.

Copied audio: the packet running at frame A is kept, its head cut by the container where it can say so
(:func:`keeps_head`): FFmpeg's mov muxer makes a first packet before 0 the edit list's media time, which its
demuxer (and QuickTime) skip, as ``ffmpeg -ss`` with stream copy does.  Matroska could say it (CodecDelay, a
negative DiscardPadding) but FFmpeg's muxer writes neither for a copied packet, and the other containers hold whole
packets: there the packet is left out and the audio starts up to a packet after the video.  Not a Matroska block
before the video's first (its muxer's ``avoid_negative_ts`` disabled): FFmpeg and mkvinfo read one, but Firefox's
demuxer (nestegg) fails on a block whose time is below 0 and Chrome's Media Source parser on one before its
cluster's time, so such a .webm would not play in browsers; moving every stream on instead (FFmpeg's default) would
move the video.

Audio re-encoded for the container is decoded anyway, so :class:`SampleCut` cuts its decoded frames to the span
itself: the samples before A's time dropped (the packets a little before A decoded too, :data:`PREROLL`, so the
decoder's overlap is right at A), the frames past the frames written so far held until the run reaches them or
ends, then cut at the last frame's end.
"""

from __future__ import annotations

from fractions import Fraction

import av
import numpy as np

EDIT_LISTS = ("mp4", "mov", "ipod", "3gp", "3g2")  # FFmpeg's mov muxer: a start before 0 becomes the edit list's
PREROLL = 0.1  # seconds of re-encoded audio decoded before A, for the decoder's state (AAC's overlap, MP3's reservoir)


def keeps_head(pkt, start: float, route_mode: str, fmt: str) -> bool:
    """Whether ``pkt``, which starts before a trimmed output's ``start`` (source seconds), goes in all the same: a
    copied audio packet running at ``start`` in a container with edit lists (``fmt``), or a re-encoded one
    (``route_mode`` "encode") ending within :data:`PREROLL` of it: its samples before ``start`` are dropped."""
    if pkt.stream.type != "audio" or not pkt.duration or pkt.pts is None:
        return False
    begin = Fraction(start).limit_denominator(10**9)
    if route_mode == "encode":
        begin -= Fraction(PREROLL)
    elif route_mode != "copy" or fmt not in EDIT_LISTS:
        return False
    return (pkt.pts + pkt.duration) * pkt.time_base > begin


def span(window, shift: float) -> tuple[float | None, float | None]:
    """A trimmed output's span so far (its :class:`vsr.video.trimmed.Window` less ``shift``, output seconds: its
    start, the end of the frames written so far), where its re-encoded audio is cut; (None, None): untrimmed."""
    if window is None:
        return None, None
    return (None if window.start is None else window.start - shift,
            None if window.end is None else window.end - shift)


def _part(fr, first: int, last: int):
    """Samples ``first`` to ``last`` of the audio frame ``fr``, a frame of their own at their time (None: none)."""
    if first >= last:
        return None
    if first == 0 and last == fr.samples:
        return fr
    data = fr.to_ndarray()
    n = 1 if fr.format.is_planar else fr.layout.nb_channels  # (packed: the channels side by side in one row)
    out = av.AudioFrame.from_ndarray(np.ascontiguousarray(data[:, first * n:last * n]), format=fr.format.name,
                                     layout=fr.layout.name)
    out.sample_rate, out.time_base = fr.sample_rate, fr.time_base
    out.pts = fr.pts + round(Fraction(first, fr.sample_rate) / fr.time_base)
    return out


def _at(fr, t: Fraction) -> int:
    """The sample of ``fr`` at ``t`` seconds, within 0 to its count."""
    return min(max(round((t - fr.pts * fr.time_base) * fr.sample_rate), 0), fr.samples)


class SampleCut:
    """The decoded frames of the audio re-encoded for a trimmed output, cut to its span (output seconds): each
    route's (``key``) frames go to :meth:`take`, which gives back those to encode now, in order."""

    def __init__(self):
        self._held: dict[int, list] = {}  # key -> its frames that end after the frames written so far

    def take(self, key: int, fr, start: float | None, end: float | None) -> list:
        """``fr`` (its time moved to the output's) less its samples before ``start`` (None: all kept); the frames
        held so far and it, up to the first that ends after ``end`` (the frames written so far; None: all)."""
        if start is not None:
            fr = _part(fr, _at(fr, Fraction(start)), fr.samples)
        held = self._held.setdefault(key, [])
        if fr is not None:
            held.append(fr)
        n = 0
        while n < len(held) and (end is None or held[n].pts * held[n].time_base
                                 + Fraction(held[n].samples, held[n].sample_rate) <= Fraction(end)):
            n += 1
        ready, held[:n] = held[:n], []
        return ready

    def flush(self, key: int, end: float | None) -> list:
        """The run has ended at ``end``: the frames held, cut to end there (None: whole)."""
        held = self._held.pop(key, [])
        if end is None:
            return held
        cut = [_part(fr, 0, _at(fr, Fraction(end))) for fr in held]
        return [fr for fr in cut if fr is not None]


class PreRoll:
    """A copied audio stream's packets that the source's edit list leaves out (flagged discard): only the last
    before those it plays goes in, the decoder's pre-roll (AAC's priming, which FFmpeg's own copy keeps).  An MP4
    cut with ``ffmpeg -ss ... -c copy`` (a phone's trim) keeps its audio from the keyframe before the cut, seconds of
    it: all of it went into a Matroska output, which moved the video that far after the audio's start."""

    def __init__(self) -> None:
        self._held: dict[int, object] = {}  # stream index -> its latest discarded packet

    def take(self, pkt, copied: bool) -> list:
        """The packets to mux now for ``pkt`` (``copied``: its stream's packets go in as they are)."""
        if not copied or pkt.stream.type != "audio":
            return [pkt]
        if pkt.is_discard:
            self._held[pkt.stream.index] = pkt  # (the one held before is left out)
            return []
        held = self._held.pop(pkt.stream.index, None)
        return [pkt] if held is None else [held, pkt]
