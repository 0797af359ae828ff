"""``DtsRepair``: encoder packets with an impossible decode timestamp, mended before the muxer sees them."""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


class DtsRepair:
    """Mends encoder packets whose decode timestamp is garbage, before the muxer refuses them.

    Seen with libx265 4.2 through FFmpeg under CPU load (about 1 run in 10 on a loaded 2-core machine): the first
    packet of a stream came out with dts = -9.6e15 and MP4 muxing failed ("Not yet implemented in FFmpeg").  A
    dts later than its pts, or more than ``max_delay_s`` before it, cannot be right; such a packet is held back
    until the next packet's dts is known and then given the latest dts that keeps the order: below the next
    one, not above its own pts, after the previous one.
    """

    def __init__(self, max_delay_s: float = 60.0):
        self.max_delay_s = max_delay_s
        self.held: list = []
        self.prev_dts: int | None = None
        self.repaired = 0

    def _bad(self, pkt) -> bool:
        if pkt.dts is None or pkt.pts is None:
            return False
        return pkt.dts > pkt.pts or float((pkt.pts - pkt.dts) * pkt.time_base) > self.max_delay_s

    def _release(self, next_dts: int | None) -> list:
        """The held packets with dts counted back from ``next_dts`` (None: the end: each gets its pts)."""
        bound = next_dts
        for h in reversed(self.held):
            dts = h.pts if bound is None else min(h.pts, bound - 1)
            # (mended, nothing lost: not a warning a user can act on; the log at info level says it)
            log.info("encoder gave packet pts %s a dts of %s; muxed with dts %s", h.pts, h.dts, dts)
            h.dts = bound = dts
            self.repaired += 1
        out, self.held = self.held, []
        return out

    def repair(self, packets, last: bool = False):
        """Encoder packets in order -> the same packets, a bad one held back until the next good dts
        (``last``: the encoder's final packets; everything held comes out)."""
        for pkt in packets:
            if self._bad(pkt):
                self.held.append(pkt)
                continue
            for h in self._release(pkt.dts):
                yield self._emit(h)
            yield self._emit(pkt)
        if last:
            for h in self._release(None):
                yield self._emit(h)

    def _emit(self, pkt):
        if pkt.dts is not None:
            if self.prev_dts is not None and pkt.dts <= self.prev_dts:
                pkt.dts = self.prev_dts + 1  # only repaired packets at the very end can get here
            self.prev_dts = pkt.dts
        return pkt
