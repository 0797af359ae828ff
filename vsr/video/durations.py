"""Each video packet's duration, which FFmpeg's encoders leave 0 though the frame had one: a muxer then guesses
the last frame's from the one before (a GIF's last delay, a Matroska or MP4 file's last frame), and a variable
rate source's last frame comes out as long as the frame before it.

What a packet's duration means depends on the container: in Matroska it is its own frame's time on screen, in
whatever order the packets come (B-frames reorder them); elsewhere a packet gets its frame's duration only where
packets come in the frames' order.  In MP4 and QuickTime every sample lasts until the next one's decode time
(only the last sample's duration is the muxer's to take), while the edit list, what a player shows, ends at the
latest packet time plus duration (FFmpeg's ``end_pts``; a packet without one gets a guess from the frame rate):
so at the end of the stream the packet of the frame shown last carries that frame's duration, and the last
packet in decode order one that ends the samples there too (:meth:`PacketDurations.flushed`).

A frame lasts at most until the next one: a decoded frame's duration is its packet's, and in an MP4 or MOV with
B-frames that is its sample's, the time to the next sample in decode order; the frame decoded just before a gap
in the timestamps, shown after it, claimed the gap (a 5 s gap made a 5.6 s clip 10.4 s long).
"""

from __future__ import annotations

from collections import deque

import av

# containers whose packet duration is its own frame's, in any order; those whose samples last until the next one
PER_FRAME = ("matroska", "webm")
DECODE_ORDER = ("mp4", "mov")
# frames whose packets the encoder still holds, at most (x264's lookahead and frame threads hold ~60)
MAX_HELD = 1024
RECENT = 64  # packets looked back at for the frame shown last (B-frames reorder a few: x264 at most 16)


class PacketDurations:
    """Of one output stream in FFmpeg's format ``container``: :meth:`frame` for each frame given to the encoder
    (its output timestamp and duration, in the encoder's time base), :meth:`packet` for each packet it gives back,
    :meth:`flushed` for those of its flush, the last packets of the stream."""

    def __init__(self, container: str) -> None:
        self.container = container
        self._held: dict[int, int] = {}  # each frame's duration by its timestamp, until its packet
        self._recent: deque[tuple[int | None, int | None]] = deque(maxlen=RECENT)  # (pts, dts) of the last packets
        self.end = 0  # where the frame shown last so far ends
        self._shown: int | None = None  # the timestamp of the frame shown last so far
        self.first: tuple[int, int] | None = None  # the first packet's (pts, dts): the decode delay
        self.last = 0  # the last frame's duration (an animation's is written into the closed file)

    def frame(self, pts: int, duration: int) -> None:
        """Frames come in the order they are shown: one ends where the next begins, whatever it said (the
        module's docstring)."""
        if self._shown is not None and pts > self._shown:
            before = self._held.get(self._shown)
            if before and self._shown + before > pts:
                self._held[self._shown] = pts - self._shown
            self.end = min(self.end, pts)
        self._shown = pts
        if duration:
            self._held[pts] = duration
            self.end, self.last = max(self.end, pts + duration), duration
            while len(self._held) > MAX_HELD:  # (an encoder that gave other timestamps)
                self._held.pop(next(iter(self._held)))

    def packet(self, pkt: av.Packet) -> av.Packet:
        """``pkt`` with its frame's duration, where the container takes it (the module's docstring)."""
        self._recent.append((pkt.pts, pkt.dts))
        if self.first is None and pkt.pts is not None and pkt.dts is not None:
            self.first = (pkt.pts, pkt.dts)
        duration = self._held.pop(pkt.pts, 0) if pkt.pts is not None else 0
        if duration and not pkt.duration and (pkt.pts == pkt.dts or self.container in PER_FRAME):
            pkt.duration = duration
        return pkt

    def flushed(self, packets: list[av.Packet]) -> list[av.Packet]:
        """The encoder's last ``packets``; in MP4 and QuickTime (the module's docstring): the packet of the frame
        shown last, where it is among them, lasting to where that frame ends (the edit list ends there: with
        B-frames, a variable-rate source's last frame of 200 ms was shown for the 40 ms the muxer guessed), and
        the last in decode order lasting to where the samples end (the track's duration, its average rate; not
        past where the last frame ends).  A constant rate's come out as the muxer would have made them."""
        if not packets or self.container not in DECODE_ORDER or not self.end:
            return packets
        if any(p.pts is None or p.dts is None for p in packets):
            return packets
        first = self.first or (packets[0].pts, packets[0].dts)  # (a short clip: every packet comes at the end)
        latest = max([pts for pts, _ in self._recent if pts is not None], default=None)
        shown = max(packets, key=lambda p: p.pts)
        if latest is None or shown.pts >= latest:
            if shown.pts + (shown.duration or 0) < self.end:
                shown.duration = self.end - shown.pts
        last = packets[-1]
        if last is not shown and not last.duration:
            delay = first[0] - first[1]
            duration = min(self.end - last.dts - delay, self.end - last.pts)
            if duration > 0:
                last.duration = duration
        return packets
