"""Each video packet's duration, which FFmpeg's encoders leave 0 though the frame had one: a muxer then guesses
the last frame's from the one before (a GIF's last delay, a Matroska or MP4 file's last frame), and a variable
rate source's last frame comes out as long as the frame before it.

What a packet's duration means depends on the container: in Matroska it is its own frame's time on screen, in
whatever order the packets come (B-frames reorder them); in MP4 and QuickTime every sample lasts until the next
one's decode time, and only the last sample's duration is the muxer's to take, so the last packet in decode
order reaches to where the last frame ends (the muxer's edit list ends at the latest packet time plus
duration); elsewhere a packet gets its frame's duration only where packets come in
the frames' order.
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
        self.end = 0  # where the frames given so far end
        self.last = 0  # the last frame's duration (an animation's is written into the closed file)

    def frame(self, pts: int, duration: int) -> None:
        if duration:
            self._held[pts] = duration
            self.end, self.last = max(self.end, pts + duration), duration
            while len(self._held) > MAX_HELD:  # (an encoder that gave other timestamps)
                self._held.pop(next(iter(self._held)))

    def packet(self, pkt: av.Packet) -> av.Packet:
        """``pkt`` with its frame's duration, where the container takes it (the module's docstring)."""
        self._recent.append((pkt.pts, pkt.dts))
        duration = self._held.pop(pkt.pts, 0) if pkt.pts is not None else 0
        if duration and not pkt.duration and (pkt.pts == pkt.dts or self.container in PER_FRAME):
            pkt.duration = duration
        return pkt

    def flushed(self, packets: list[av.Packet]) -> list[av.Packet]:
        """The encoder's last ``packets``: in MP4 and QuickTime, where the frame shown last would end before its
        time is over (its sample lasts until the next decode time, which the frames before it set: a last frame
        longer than those), the last packet in decode order (a B-frame's, shown before it) reaching to where the
        last frame ends.  (The samples then last longer than the frames shown, which the edit list cuts: left
        alone where not needed, as a constant rate's last frame is not, whose average rate they would change.)"""
        last = packets[-1] if packets else None
        if last is None or self.container not in DECODE_ORDER or last.duration or last.pts is None:
            return packets
        order = list(self._recent) + [(p.pts, p.dts) for p in packets]  # (decode order)
        if any(pts is None or dts is None for pts, dts in order) or len(order) < 2:
            return packets
        shown = max(range(len(order)), key=lambda i: order[i][0])  # the frame shown last
        after = shown + 1 if shown + 1 < len(order) else shown  # (the last sample: the muxer repeats the one before)
        ends = order[shown][0] + order[after][1] - order[after - 1][1]
        if ends < self.end and last.pts != last.dts:
            last.duration = self.end - last.pts
        return packets
