"""What a trimmed output (``--frames A:B``, a batch job's join of such a run) keeps of the source's audio and
subtitle packets: the :class:`Window` of its span; a subtitle on screen at frame A, from A for the time it had
left (:func:`on_at`); a cue still on screen at the span's end, and a copied audio packet running past it, cut
to end with the video (:class:`CueEnds`, :func:`_cut`).

The span's end is not known while the packets are muxed (they go in ahead of the frames the encoder still holds,
and the run may end anywhere), so a cue that ends later than the frames written so far is held back until they
reach its end (muxed as it is) or the run ends (muxed ending where the last frame ends).  A held cue is a few
bytes and few are ever held; past :data:`MAX_HELD` the oldest goes in as it is, as before.  FFmpeg's muxer
puts a held cue in its place among the packets it still holds (10 s of them); one held longer lands later in
the file, at its own time (Matroska: before its cluster's).  A cue without a
duration (a PGS or DVB picture, taken off by a later packet) is not held: that later packet, past the end, is
left out, and the picture ends with the video.

A PGS picture on screen at frame A (its display set before A, the one taking it off after) has no duration to
carry over: :class:`OnScreen` keeps the display sets before A from the last one that draws the screen anew (an
epoch start or acquisition point: a later set may draw with its objects and palettes) and puts them in at A.
"""

from __future__ import annotations

import math
import struct
import warnings
from collections import deque
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable

try:  # (PyAV 15 and later)
    from av.packet import PacketSideData, packet_sidedata_type_from_literal
except ImportError:  # an older PyAV: an audio packet's duration alone is cut (a Matroska output plays it whole)
    PacketSideData = None

MAX_HELD = 256  # cues held back at once (subtitles overlap a few at a time; this bounds a damaged file's)
PGS = "hdmv_pgs_subtitle"


@dataclass(frozen=True)
class Window:
    """Which passthrough packets a trimmed output (``--frames A:B``) keeps, in source seconds: none that
    start before ``start`` (None: keep them: the codec's priming packets before the source's first frame),
    none at or after ``end`` once the video has ended (None: keep all); ``end`` is the end of the frames
    written so far, the span's own once the run has ended."""

    start: float | None
    end: float | None


def ticks(seconds: float, tb: Fraction, up: bool = False) -> int:
    """``seconds`` in ``tb`` ticks: rounded up (``up``), else to the nearest tick."""
    t = Fraction(seconds).limit_denominator(10**9) / tb
    return int(math.ceil(t)) if up else round(t)


def on_at(pkt, start: float) -> bool:
    """Whether ``pkt``, which starts before a trimmed output's ``start`` (source seconds), is a subtitle still on
    screen then: it is kept, from ``start`` for the time it had left (as a chapter running there is)."""
    if pkt.stream.type != "subtitle" or not pkt.duration or pkt.pts is None:
        return False
    begin = ticks(start, pkt.time_base, up=True)
    end = pkt.pts + pkt.duration
    if end <= begin:
        return False
    if pkt.dts is not None:
        pkt.dts += begin - pkt.pts
    pkt.pts, pkt.duration = begin, end - begin
    return True


def _ends_after(pkt, end: float) -> bool:
    return pkt.pts + pkt.duration > ticks(end, pkt.time_base)


def _cut(pkt, last: int, rate: int) -> None:
    """``pkt`` cut to end at ``last`` (ticks of its time base); a packet of audio at ``rate`` Hz (0: not audio)
    also says how many of its samples to discard at its end (FFmpeg's skip-samples side data: its decoders drop
    them, its Matroska muxer writes them as the block's DiscardPadding; its MP4 muxer ends the edit list at the
    packet's new end)."""
    drop = pkt.pts + pkt.duration - last
    pkt.duration = last - pkt.pts
    samples = round(drop * pkt.time_base * rate) if rate else 0
    if samples > 0 and PacketSideData is not None:
        old = bytes(pkt.get_sidedata("skip_samples"))
        old = old if len(old) >= 10 else bytes(10)  # (the samples a first packet skips at its start, kept)
        side = PacketSideData(packet_sidedata_type_from_literal("skip_samples"), len(old))
        side.update(old[:4] + struct.pack("<I", samples) + old[8:])
        pkt.set_sidedata(side)


class CueEnds:
    """The subtitle cues and audio packets of a trimmed output that end after the frames written so far, held
    back in their streams' order until :meth:`release` finds the video past their end or :meth:`flush` cuts them
    to the span's end (a packet of audio goes on up to a packet past the last frame, as ``ffmpeg -t``'s does,
    where the container holds no shorter end: :func:`_cut`); ``mux(index, pkt)`` puts a packet of the source's
    stream ``index`` into the output (a held packet's stream may be closed by then: its index is kept)."""

    def __init__(self, mux: Callable[[int, object], None]):
        self.mux = mux
        self._held: dict[int, deque] = {}  # source stream index -> its held cues, in order
        self._rates: dict[int, int] = {}  # -> its sample rate (audio; read while its demuxer is open)
        self._count = 0

    def take(self, pkt, end: float | None, copied: bool = True) -> bool:
        """Hold ``pkt`` where it is a cue, or a packet of audio ``copied`` as it is (audio decoded to be encoded
        again goes in now: :class:`vsr.video.sample_cut.SampleCut` cuts its samples), that ends after ``end``
        (the frames written so far), or one of a stream with packets held before it (they go in in order); False:
        mux it now."""
        index = pkt.stream.index
        queue = self._held.get(index)
        kinds = ("subtitle", "audio") if copied else ("subtitle",)
        if not queue and (end is None or pkt.stream.type not in kinds or not pkt.duration or pkt.pts is None
                          or not _ends_after(pkt, end)):
            return False
        self._held.setdefault(index, deque()).append(pkt)
        if index not in self._rates:
            self._rates[index] = pkt.stream.codec_context.sample_rate if pkt.stream.type == "audio" else 0
        self._count += 1
        if self._count > MAX_HELD:  # (the oldest, as it is: memory stays bounded)
            oldest = min((i for i, q in self._held.items() if q),
                         key=lambda i: self._held[i][0].pts * self._held[i][0].time_base)
            self._pop(oldest)
        return True

    def release(self, end: float | None) -> None:
        """Mux the held cues the frames written so far (up to ``end``) cover, each stream's in order."""
        for index, queue in self._held.items():
            while queue and (end is None or queue[0].pts is None or not queue[0].duration
                             or not _ends_after(queue[0], end)):
                self._pop(index)

    def flush(self, end: float) -> None:
        """The run has ended at ``end`` (source seconds): the held cues, each cut to end there (one starting at
        or after it is left out)."""
        for index, queue in self._held.items():
            while queue:
                pkt = queue[0]
                if pkt.pts is not None and pkt.duration and _ends_after(pkt, end):
                    last = ticks(end, pkt.time_base)
                    if pkt.pts >= last:
                        queue.popleft()
                        self._count -= 1
                        continue
                    _cut(pkt, last, self._rates[index])
                self._pop(index)

    def _pop(self, index: int) -> None:
        self._count -= 1
        self.mux(index, self._held[index].popleft())


def _composition(pkt) -> tuple[int, int] | None:
    """(composition state, objects shown) of the presentation segment a PGS packet starts with (a display set;
    in some files one segment a packet), or None: a packet of another segment."""
    data = bytes(pkt)
    return (data[10], data[13]) if len(data) >= 14 and data[0] == 0x16 else None


def _anew(pkt) -> bool:
    """Whether a PGS packet draws the screen anew (an epoch start 0x80 or an acquisition point 0x40)."""
    comp = _composition(pkt)
    return comp is not None and bool(comp[0] & 0xC0)


class OnScreen:
    """A trimmed output's PGS pictures on screen at its start (frame A, ``start`` in source seconds): the display
    sets before it of each PGS stream, from the last that draws the screen anew, put in moved to A (by
    ``mux(index, pkt)``) before the stream's first packet from A, or at the end where none came; a picture a set
    at A replaces is not.  An epoch longer than :data:`MAX_HELD` packets (a damaged file's) is not kept: a
    picture of it on screen at A is dropped, said in one warning line."""

    def __init__(self, mux: Callable[[int, object], None]):
        self._mux = mux
        self._sets: dict[int, list] = {}  # source stream index -> the display sets kept, in order
        self._shown: dict[int, bool] = {}  # -> whether the last of them shows a picture
        self._over: set[int] = set()  # the streams whose epoch ran past MAX_HELD packets

    def before(self, pkt) -> None:
        """Keep ``pkt``, which starts before A, where it is a PGS packet (another is left out)."""
        cc = pkt.stream.codec_context
        if pkt.stream.type != "subtitle" or cc is None or cc.codec.canonical_name != PGS or pkt.pts is None:
            return
        index, comp = pkt.stream.index, _composition(pkt)
        if _anew(pkt):
            self._sets[index] = []
            self._over.discard(index)
        if comp is not None:
            self._shown[index] = comp[1] > 0
        kept = self._sets.setdefault(index, [])
        if index not in self._over:
            kept.append(pkt)
            if len(kept) > MAX_HELD:
                self._over.add(index)
                kept.clear()

    def reached(self, pkt, start: float) -> None:
        """``pkt`` is the first of its stream from A (its own time: it goes in after what this puts in)."""
        if pkt.stream.index in self._sets:
            self._put(pkt.stream.index, start, pkt)

    def flush(self, start: float) -> None:
        """The run has ended: a picture on screen at A that nothing took off lasts to the end."""
        for index in list(self._sets):
            self._put(index, start, None)

    def _put(self, index: int, start: float, after) -> None:
        kept, shown = self._sets.pop(index), self._shown.pop(index, False)
        if after is not None and _anew(after):  # (it needs none of them)
            shown = shown and after.pts > ticks(start, after.time_base, up=True)
            if not shown:
                return
        elif not shown and after is None:
            return
        if index in self._over:
            self._over.discard(index)
            if shown:
                warnings.warn(f"the PGS subtitle picture on screen at the first frame (stream {index}) is dropped: "
                              f"its display sets before it run over {MAX_HELD} packets", stacklevel=4)
            return
        for pkt in kept:  # (each at A: the last one drawn is what shows)
            begin = ticks(start, pkt.time_base, up=True)
            pkt.pts = pkt.dts = begin
            self._mux(index, pkt)
