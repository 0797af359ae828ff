"""The batch stage: (window, tile) items stacked into the arrays a backend takes, and what comes back.

Each batch also names its frames (:class:`~vsr.backends.base.FrameKeys`: source frame and tile of every input
frame, and the first frame a later batch can still need), so that a backend that streams computes each
(frame, tile)'s features once.  Windows come in order of their centre ``c`` and never reach below ``c - 2r``
(a reflection at a clip's or scene's end reaches that far back, ``r = T // 2``), so after a batch whose next
window is ``c`` the frames below ``c - 2r`` are done with: at most :func:`kept_features` (frame, tile)s are
kept at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from typing import Iterable, Iterator, Sequence

import numpy as np

from vsr.backends.base import FrameKeys, Pending
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
    """``x`` float32 ``(N, T, 3, h, w)``: item ``n`` is the tile ``slots[n].tile`` of that frame's window;
    ``keys``: which source frame and tile each input frame is."""

    slots: tuple[Slot, ...]
    x: np.ndarray
    keys: FrameKeys | None = None


@dataclass(frozen=True)
class Result:
    """``y``: the backend's output for the batch of the same ``slots``: RGB ``(N, 3, s*h, s*w)``, or the sink's
    planes (:class:`vsr.video.planes.PlaneBatch`)."""

    slots: tuple[Slot, ...]
    y: np.ndarray


def kept_features(num_frame: int, batch: int, tiles: int) -> int:
    """The most (frame, tile) features a streaming backend keeps at once in a run of :func:`batches` (see the
    module's docstring): those of the frames ``c - 2r`` to ``c' + 2r`` of a batch's windows ``c..c'``, for
    every tile."""
    r = num_frame // 2
    return (4 * r + 1 + -(-(batch - 1) // tiles)) * tiles


def batches(windows: Iterable[FrameWindow | None], tiles: Sequence[Tile], batch: int,
            stream: int = 0) -> Iterator[Batch]:
    """Windows -> :class:`Batch` es of ``batch`` (window, tile) items, in order, tiles of a frame row-major;
    their keys carry ``stream`` (one value per run).

    A ``None`` among the windows means "nothing more is ready now": the items waiting go out at once as a
    smaller batch rather than wait for the batch to fill.  The last batch holds what is left.
    """
    pending: list[tuple[FrameWindow, int]] = []
    for window in chain(windows, [None]):  # the end: nothing more will come, so all that waits goes out
        idle = window is None
        if not idle:
            pending.extend((window, k) for k in range(len(tiles)))
        window = None
        while len(pending) >= batch or (idle and pending):
            items, pending = pending[:batch], pending[batch:]
            out = stack([(w, tiles[k]) for w, k in items], _keys(items, len(tiles), stream))
            items = None  # the LR frames may go as soon as they are stacked
            yield out
            out = None


def _keys(items: Sequence[tuple[FrameWindow, int]], tiles: int, stream: int) -> FrameKeys:
    """The keys of the (window, tile index) ``items`` of a batch (see the module's docstring)."""
    last, k = items[-1]
    after = last.index + 1 if k == tiles - 1 else last.index  # the centre of the next window to come
    return FrameKeys(stream, tuple(w.sources for w, _ in items), tuple(k for _, k in items),
                     keep_from=after - 2 * (len(last.frames) // 2))


def stack(items: Sequence[tuple[FrameWindow, Tile]], keys: FrameKeys | None = None) -> Batch:
    """(window, tile) items of one tile size -> their :class:`Batch` ``(N, T, 3, h, w)`` (with ``keys``)."""
    t0 = items[0][1]
    x = np.empty((len(items), len(items[0][0].frames), 3, t0.y1 - t0.y0, t0.x1 - t0.x0), np.float32)
    for n, (w, t) in enumerate(items):
        for k, f in enumerate(w.frames):
            x[n, k] = f[:, t.y0:t.y1, t.x0:t.x1]
    return Batch(tuple(Slot(w.index, w.pts, w.duration, t) for w, t in items), x, keys)


def inferred(inbox: Iterator[Batch], backend, stream: bool) -> Iterator[Result]:
    """The infer stage: each batch's :class:`Result` (``infer_stream`` with its keys where ``stream``, else
    ``infer``).  Each batch is queued (``backend.submit``) before the previous one's output is collected, so that
    a device runs the next batch while the host collects this one; a result is not held back while nothing more
    waits in the inbox (a pipe's frames come when they come), nor when it was computed as it was submitted (every
    backend but a device's: holding it would only hand it on one inference later, a tile's seconds on a CPU)."""
    submit = getattr(backend, "submit", None)
    held = None
    for b in inbox:
        if submit is None:
            queued = Pending.done(backend.infer_stream(b.x, b.keys) if stream else backend.infer(b.x))
        else:
            queued = submit(b.x, b.keys if stream else None)
        slots, b = b.slots, None
        if held is not None:
            yield Result(held[0], held[1].result())
            held = None
        if queued.finished or not _more_waiting(inbox):
            yield Result(slots, queued.result())
        else:
            held = (slots, queued)
        queued = None
    if held is not None:
        yield Result(held[0], held[1].result())


def _more_waiting(inbox) -> bool:
    """Whether another item already waits in a stage's inbox (:class:`~vsr.pipeline.stages.StagePipeline`'s);
    True for any other iterator (a list in a test: every item is there)."""
    ready = getattr(inbox, "ready", None)
    return True if ready is None else ready()
