"""The post stage: the backend's results -> whole output frames in the sink's own planes.

Each tile's core is converted (:func:`vsr.video.planes.convert_tile`: colour matrix, quantisation, chroma
subsampling, one parallel pass on the cores the backend leaves) or, where the backend made the sink's planes
itself (the CUDA runtime, on its device), copied into place; the conversion's own counts check the model's output
(:func:`check_model_output`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

from vsr.machine import usable_cores
from vsr.pipeline.batches import Result
from vsr.pipeline.checks import OUTPUT_LIMITS, check_model_output, looks_suspicious
from vsr.pipeline.tiles import Tile
from vsr.video.planes import PlaneBatch, convert_tile, place, plane_views, region


@dataclass
class HrFrame:
    """One output frame while its tiles arrive: ``planes`` from ``sink.new_planes()``, then what
    ``sink.finish()`` made of it once ``tiles_left`` is 0."""

    index: int
    pts: int
    duration: int
    planes: object
    tiles_left: int


def hr_frames(results: Iterator[Result], sink, height: int, width: int, scale: int,
              tiles_per_frame: int, weights: str | None = None) -> Iterator[HrFrame]:
    """The post stage: backend results -> whole finished output frames, in order.

    Results are RGB ``(N, 3, s*h, s*w)`` (float 32 or 16 bit in [0, 1], or uint8 0..255 quantised by the
    backend), or the sink's planes made by the backend (a :class:`~vsr.video.planes.PlaneBatch`).  A float
    result that is not finite or is saturated stops the run (:func:`check_model_output`, naming ``weights``;
    counted by the conversion itself, no pass of its own).

    Each tile's core is converted (:func:`~vsr.video.planes.convert_tile`: colour matrix, quantisation, chroma
    subsampling in one parallel pass), or its planes copied, straight into the planes of the frame from
    ``sink.new_planes`` (of the format ``sink.planes``); a frame whose last tile arrived is handed to
    ``sink.finish`` and goes on.
    """
    fmt = sink.planes
    sc = scale
    current: HrFrame | None = None
    for res in results:
        for n, slot in enumerate(res.slots):
            t = slot.tile
            if current is None or current.index != slot.index:
                current = HrFrame(slot.index, slot.pts, slot.duration, sink.new_planes(height * sc, width * sc),
                                  tiles_per_frame)
            core = (sc * (t.cy0 - t.y0), sc * (t.cy1 - t.y0), sc * (t.cx0 - t.x0), sc * (t.cx1 - t.x0))
            out = region(plane_views(current.planes), fmt, sc * t.cy0, sc * t.cy1, sc * t.cx0, sc * t.cx1)
            if isinstance(res.y, PlaneBatch):
                place(res.y.planes(n), fmt, out, core)
            elif res.y.dtype == np.uint8:  # RGB a backend quantised already (the CUDA runtime's uint8 download)
                convert_tile(res.y[n], fmt, out, core)
            else:
                counts = convert_tile(res.y[n], fmt, out, core, OUTPUT_LIMITS)
                if looks_suspicious(counts, 3 * (core[1] - core[0]) * (core[3] - core[2])):
                    check_model_output(res.y[n, :, core[0]:core[1], core[2]:core[3]], slot.index, weights)
            current.tiles_left -= 1
            if current.tiles_left == 0:
                current.planes = sink.finish(current.planes, current.pts)
                done, current = current, None
                yield done
                done = None
        res = None


def prepare_post(sink, height: int, width: int, scale: int, tile: Tile) -> None:
    """Set up the post stage's compiled pass before the first frame, as a backend's warm-up is: numba's first
    call in a process loads its machinery and the pass (0.15-0.3 s on 2 cores), which would otherwise be the
    first frame's post time.  A call of the run's types (float32 RGB; views of the sink's own planes over the
    columns of ``tile``'s core, whose layout picks the compiled version) on a few rows."""
    fmt = sink.planes
    sc = scale
    rows = min(2 << fmt.sub_y, sc * height)  # two chroma rows: a view of one row would be contiguous
    out = region(plane_views(sink.new_planes(height * sc, width * sc)), fmt, 0, rows, sc * tile.cx0, sc * tile.cx1)
    rgb = np.zeros((3, rows, sc * (tile.x1 - tile.x0)), np.float32)
    convert_tile(rgb, fmt, out, (0, rows, sc * (tile.cx0 - tile.x0), sc * (tile.cx1 - tile.x0)), OUTPUT_LIMITS)


def post_threads(backend) -> int | None:
    """The cores the post stage converts on: those the backend's own inference threads leave (``options.threads``,
    None there: all cores), at least one; all of them (None) for a backend whose work is on a GPU.  Measured on 2
    shared cores: a conversion on both beside a busy inference thread took twice its time on one
    (docs/benchmarks.md, "The post stage per 4K frame")."""
    options = getattr(backend, "options", None)
    if not hasattr(options, "threads") or getattr(options, "on_gpu", False):
        return None
    cores = usable_cores()
    return max(1, cores - (options.threads or cores))
