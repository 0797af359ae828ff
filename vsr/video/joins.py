"""``JoinedPackets``: a source's audio and subtitle packets moved across the joins where its timestamps go back
(MPEG-TS files joined end to end: the second file's clock starts again), as its video is moved.

The source times the video frames after such a join one frame after another, on from the last frame before it
(:func:`vsr.video.source.timed_frames`): the video moves forward by the distance its clock went back.  As
``ffmpeg`` does for a format whose timestamps may jump (``AVFMT_TS_DISCONT``), every copied stream moves by that
same distance, so that after the join the sound is where it was against the picture.  That distance is read from
the video's own packets, which a file's packet demuxer reads beside the audio (the n-th join of a stream is the
n-th of the video); where there are none (a stream on standard input) or the video never goes back, a stream's
packets after a join follow its own packets before it.

An audio stream usually runs past the video's end (the encoder's last frame, padded), so the first packets of its
next part start inside what it already has: those that start more than half a packet before its end are dropped
(a stream's timestamps must increase).  Said once per stream, at its first join.  Only the sources whose clock
may restart read so (:data:`vsr.video.origin.CLOCKED`: MPEG-TS and MPEG-PS); in any other container a stream's
timestamps going back are damage, not a join (the packets a muxer refuses are dropped, :mod:`.passthrough`).
"""

from __future__ import annotations

import warnings
from collections import deque
from fractions import Fraction

__all__ = ["JoinedPackets"]

LOOK_AHEAD = 2000  # packets held while waiting for the video's join (then a stream's part follows its own)


class _StreamClock:
    """One stream's timestamps: where its clock went back (``part``: joins so far), the shift of each part (in its
    time base), and where its packets end (``end``, moved), to drop what overlaps at a join."""

    def __init__(self):
        self.part = 0
        self.last = None  # the last packet's dts (as read)
        self.end = None  # the end of the last packet passed on (moved): its dts + duration
        self.last_dts = None  # its dts (moved)
        self.floor = None  # after a join, until a packet passes: the earliest moved dts kept
        self.shifts: dict[int, int] = {0: 0}
        self.dropped = 0
        self.warned = False

    def read(self, pkt) -> int:
        """The part of the stream ``pkt`` (the next packet read) is in."""
        ts = pkt.dts if pkt.dts is not None else pkt.pts
        if ts is not None:
            if self.last is not None and ts < self.last:
                self.part += 1
            self.last = ts
        return self.part


class JoinedPackets:
    """The packets of ``feed`` (a :class:`~vsr.video.passthrough.PacketFeed`), each moved by its part's shift
    (those that overlap their stream at a join dropped); ``video``: the index of the video stream whose packets
    ``feed`` gives as well (never passed on), or None; ``name``: the source, as warnings name it."""

    def __init__(self, feed, video: int | None = None, name: str = "the source"):
        self._feed = feed
        self.streams = feed.streams
        self.ended = False
        self._video = video
        self._name = name
        self._shifts: list[Fraction] = []  # the video's shift after each of its joins, in seconds (cumulative)
        self._video_last = None  # the video's last dts as read
        self._video_end = None  # the end (moved) of the video read so far, in its time base
        self._waiting: deque = deque()  # (packet, part) read, in file order, waiting for the video's join
        self._clocks: dict[int, _StreamClock] = {}

    def select(self, indices: set[int]) -> None:
        self._feed.select(indices)

    def close(self) -> None:
        self._waiting.clear()
        self._feed.close()

    def next_packet(self):
        """The next packet (moved), or None: none now (:attr:`ended`: none ever)."""
        while True:
            if self._waiting and self._placeable(self._waiting[0][1]):
                pkt = self._moved(*self._waiting.popleft())
                if pkt is not None:
                    return pkt
                continue
            pkt = self._feed.next_packet()
            if pkt is None:
                if not self._feed.ended:
                    return None
                if not self._waiting:
                    self.ended = True
                    return None
                self._video = None  # (the end: no join of the video's will come any more)
            elif pkt.stream.index == self._video:
                self._clock(pkt)
            elif pkt.dts is not None or pkt.pts is not None:  # (else a flush marker)
                clock = self._clocks.setdefault(pkt.stream.index, _StreamClock())
                self._waiting.append((pkt, clock.read(pkt)))

    def _placeable(self, part: int) -> bool:
        return part <= len(self._shifts) or self._video is None or len(self._waiting) > LOOK_AHEAD

    def _clock(self, pkt) -> None:
        """A video packet: a join where its dts goes back, and the video's shift after it (the end of the video
        before the join, less the time of the join's first frame)."""
        ts = pkt.dts if pkt.dts is not None else pkt.pts
        if ts is None:
            return
        tb = pkt.time_base
        shift = round(self._shifts[-1] / tb) if self._shifts else 0
        start = (pkt.pts if pkt.pts is not None else ts) + shift
        if self._video_last is not None and ts < self._video_last:
            more = max(0, self._video_end - start)
            shift, start = shift + more, start + more
            self._shifts.append(Fraction(shift) * Fraction(tb))
        self._video_last = ts
        rate = pkt.stream.average_rate
        end = start + (pkt.duration or (max(1, round(1 / (rate * tb))) if rate else 1))
        self._video_end = end if self._video_end is None else max(self._video_end, end)

    def _moved(self, pkt, part: int):
        """``pkt`` moved by its part's shift, or None where it starts inside what its stream already has after a
        join (dropped; said once per stream)."""
        clock = self._clocks[pkt.stream.index]
        ts = pkt.dts if pkt.dts is not None else pkt.pts
        if part not in clock.shifts:
            if part <= len(self._shifts):  # the video's
                clock.shifts[part] = round(self._shifts[part - 1] / pkt.time_base)
            else:  # its own: on from its end before the join
                clock.shifts[part] = max(clock.shifts[part - 1], (clock.end or 0) - ts)
            if clock.end is not None:
                half = max(1, (clock.end - clock.last_dts) // 2) if pkt.stream.type == "audio" else 1
                clock.floor = clock.last_dts + half
        shift = clock.shifts[part]
        if clock.floor is not None and ts + shift < clock.floor:
            clock.dropped += 1
            return None
        if clock.floor is not None:
            self._said(pkt, clock, shift)
            clock.floor = None
        if shift:
            if pkt.pts is not None:
                pkt.pts += shift
            if pkt.dts is not None:
                pkt.dts += shift
        clock.last_dts = ts + shift
        clock.end = clock.last_dts + (pkt.duration or 0)
        return pkt

    def _said(self, pkt, clock: _StreamClock, shift: int) -> None:
        if clock.warned:
            return
        clock.warned = True
        st = pkt.stream
        codec = st.codec_context.name if st.codec_context else st.type
        n = clock.dropped
        dropped = f"; {n} packet{'s' if n != 1 else ''} overlapping its part before the join dropped" if n else ""
        warnings.warn(f"{self._name}: the timestamps of stream {st.index} ({codec} {st.type}) go back at a join "
                      f"(files joined end to end?): moved on by {float(shift * pkt.time_base):.6g} s after it, as "
                      f"the video is (in sync){dropped}", stacklevel=2)
