"""The batch stage: (window, tile) items stacked into the arrays a backend takes, and what comes back."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from typing import Iterable, Iterator, Sequence

import numpy as np

from vsr.pipeline.tiles import Tile
from vsr.pipeline.windows import FrameWindow


@dataclass(frozen=True)
class Slot:
    """Where one result goes: ``tile`` of output frame ``index`` (timestamp ``pts``, ``duration``)."""

    index: int
    pts: int
    duration: int
    tile: Tile


@dataclass(frozen=True)
class Batch:
    """``x`` float32 ``(N, T, 3, h, w)``: item ``n`` is the tile ``slots[n].tile`` of that frame's window."""

    slots: tuple[Slot, ...]
    x: np.ndarray


@dataclass(frozen=True)
class Result:
    """``y`` float32 ``(N, 3, s*h, s*w)``: the backend's output for the batch of the same ``slots``."""

    slots: tuple[Slot, ...]
    y: np.ndarray


def batches(windows: Iterable[FrameWindow | None], tiles: Sequence[Tile], batch: int) -> Iterator[Batch]:
    """Windows -> :class:`Batch` es of ``batch`` (window, tile) items, in order, tiles of a frame row-major.

    A ``None`` among the windows means "nothing more is ready now": the items waiting go out at once as a
    smaller batch rather than wait for the batch to fill.  The last batch holds what is left.
    """
    pending: list[tuple[FrameWindow, Tile]] = []
    for window in chain(windows, [None]):  # the end: nothing more will come, so all that waits goes out
        idle = window is None
        if not idle:
            pending.extend((window, t) for t in tiles)
        window = None
        while len(pending) >= batch or (idle and pending):
            items, pending = pending[:batch], pending[batch:]
            out = stack(items)
            items = None  # the LR frames may go as soon as they are stacked
            yield out
            out = None


def stack(items: Sequence[tuple[FrameWindow, Tile]]) -> Batch:
    """(window, tile) items of one tile size -> their :class:`Batch` ``(N, T, 3, h, w)``."""
    t0 = items[0][1]
    x = np.empty((len(items), len(items[0][0].frames), 3, t0.y1 - t0.y0, t0.x1 - t0.x0), np.float32)
    for n, (w, t) in enumerate(items):
        for k, f in enumerate(w.frames):
            x[n, k] = f[:, t.y0:t.y1, t.x0:t.x1]
    return Batch(tuple(Slot(w.index, w.pts, w.duration, t) for w, t in items), x)
