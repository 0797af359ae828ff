"""Each frame's features computed once: which (frame, tile) a stream's calls need computed, where each is kept.

A window of T frames shares T-1 of them with the next, so a backend that ``keeps_features`` (:mod:`vsr.backends.base`)
computes the feature pyramid of each (frame, tile) the first time a window names it and keeps it in a *slot*
until the calls' ``keep_from`` says no later window can need it.  :class:`FeatureSlots` does that bookkeeping;
the backend owns the storage (host arrays, torch tensors), one entry per slot, and grows it to :attr:`size`.

Features never depend on where a run starts: a backend runs its per-frame call at one fixed shape (``batch``
frames, the rows beyond those it has padded with zeros), so a frame's features are the same bits whichever
frames share its call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import count
from typing import Callable

import numpy as np

from vsr.backends.base import FrameKeys, pyramid_nbytes

__all__ = ["Call", "FeatureSlots", "SceneFollower", "keyless", "pyramid_nbytes"]

# infer() without keys runs as a stream of its own per call: ids below 0 never meet a runner's
_KEYLESS = count(-1, -1)


@dataclass
class Call:
    """One call's plan: ``slots[n, t]`` holds the features of input frame ``(n, t)``; ``new`` lists the input
    frames ``(slot, n, t)`` whose features are not kept yet (compute them, into their slot, before the windows)."""

    slots: np.ndarray
    new: list[tuple[int, int, int]] = field(default_factory=list)


class FeatureSlots:
    """The slots of one stream's kept features; :attr:`size` is the most slots held at once so far (the storage
    to keep).  A call of another stream drops everything kept."""

    def __init__(self):
        self.stream: tuple | None = None  # the stream's id and the size of its features
        self.slot_of: dict[tuple[int, int], int] = {}
        self.free: list[int] = []
        self.size = 0
        self.computed = 0  # pyramids computed, all streams (tests count them)

    def begin(self, keys: FrameKeys, size: tuple = ()) -> Call:
        """The slot of every input frame of a call, computing ``new`` ones for the keys not kept; ``size``: of
        the features (kept ones of another size are not used)."""
        if (keys.stream, size) != self.stream:
            self.stream = (keys.stream, size)
            self.free = list(range(self.size))[::-1]
            self.slot_of = {}
        table = keys.keys()
        call = Call(np.empty((len(table), len(table[0]) if table else 0), np.int64))
        for n, row in enumerate(table):
            for t, key in enumerate(row):
                slot = self.slot_of.get(key)
                if slot is None:
                    slot = self.slot_of[key] = self._take()
                    call.new.append((slot, n, t))
                call.slots[n, t] = slot
        self.computed += len(call.new)
        return call

    def forget(self) -> None:
        """Keep nothing (a call failed half-way: some slots may lack their features)."""
        self.stream = None

    def end(self, keys: FrameKeys) -> None:
        """After a call: free the slots of frames below ``keys.keep_from``."""
        for key in [k for k in self.slot_of if k[0] < keys.keep_from]:
            self.free.append(self.slot_of.pop(key))

    def _take(self) -> int:
        if self.free:
            return self.free.pop()
        self.size += 1
        return self.size - 1


class SceneFollower:
    """What a stream's calls show of its scenes, told to ``follow(context, anew)`` (int8 run-time scales, which
    follow the frames from call to call): a call's *context* is its tiles (each tile a picture of its own); it
    starts anew where it is the first call of a stream, or where its frames share none with the previous call
    of the same tile (windows never cross a scene cut: the first window after a cut shares no frame with the one
    before).  A call without keys (a stream of its own, :func:`keyless`) continues the context ``None``."""

    def __init__(self, follow: Callable[[tuple[int, ...] | None, bool], None] | None = None):
        self.tell = follow
        self.stream: int | None = None
        self.last: dict[int, set[int]] = {}

    def see(self, keys: FrameKeys) -> None:
        """Tell ``follow`` what the call of ``keys`` is."""
        if self.tell is not None:
            self.tell(*self.follow(keys))

    def follow(self, keys: FrameKeys) -> tuple[tuple[int, ...] | None, bool]:
        """``(context, anew)`` of the call of ``keys``."""
        if keys.stream < 0:
            return None, False
        anew = keys.stream != self.stream
        if anew:
            self.stream, self.last = keys.stream, {}
        now: dict[int, set[int]] = {}
        for row, tile in zip(keys.frames, keys.tiles):
            now.setdefault(tile, set()).update(row)
        anew |= any(not frames & self.last.get(tile, set()) for tile, frames in now.items())
        self.last.update(now)
        return tuple(sorted(now)), anew


def keyless(n: int, num_frame: int) -> FrameKeys:
    """Keys that make every input frame of one ``infer(x)`` call its own (a stream of one call)."""
    frames = tuple(tuple(range(i * num_frame, (i + 1) * num_frame)) for i in range(n))
    return FrameKeys(next(_KEYLESS), frames, (0,) * n, keep_from=n * num_frame)
