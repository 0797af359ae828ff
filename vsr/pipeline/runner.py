"""The frame-queue runner: decode -> windows -> batches -> backend -> post-processing -> encode.

Each stage runs in its own thread and talks to its neighbours through bounded queues
(:mod:`vsr.pipeline.stages`), so a slow stage holds the others back (back-pressure) and memory stays bounded
whatever the video's length: at most ``queue`` items wait between two stages, plus the ``3 * radius + 1``
source frames the window stage holds.  numpy, PyAV, ONNX Runtime and torch release the GIL in their heavy
loops, so the stages overlap.

    decode      source frames, float32 RGB (3, H, W)
    window      FrameWindow: the T frames around each output frame (clip ends padded as configured)
    batch       up to ``batch`` (window, tile) items stacked into (N, T, 3, h, w), or what is ready
                after ``batch_wait_s``
    infer       backend.infer -> (N, 3, 4h, 4w) float32
    post        tile cores -> output planes (colour matrix, quantisation) of whole HR frames, written into
                the sink's own frame buffers, then finished there (chroma subsampling, colour tags)
    encode      sink.write (PyAV encoder + muxer, or PNG files)
"""

from __future__ import annotations

import logging
import time
from contextlib import closing
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

from vsr.errors import InputError
from vsr.pipeline.batches import Batch, Result, batches
from vsr.pipeline.memory import DeviceMemory, MemoryPlan, plan_memory
from vsr.pipeline.stages import Stage, StagePipeline, abandoned_still_running
from vsr.pipeline.tiles import Tile, tile_grid
from vsr.pipeline.windows import FrameWindow, windows
from vsr.report import RunReport
from vsr.video.colour import encode_planes

log = logging.getLogger(__name__)

__all__ = ["FrameQueueRunner", "FrameWindow", "RunnerSettings", "infer_still_running"]


def infer_still_running() -> bool:
    """True while an inference call that a stop left behind is still running (see
    :meth:`vsr.pipeline.stages.StagePipeline.wind_down`).

    A process must not run its normal interpreter shutdown then: the native libraries' global state would be
    torn down under the running call.  The CLI ends such a process with ``os._exit`` after its cleanup.
    """
    return abandoned_still_running()


@dataclass(frozen=True)
class RunnerSettings:
    """Knobs of the runner.

    batch: items (windows, or tiles of windows) per backend call; tile: LR tile side (None: automatic, the
    largest that keeps the whole process within ``memory_budget_mb``, see :mod:`vsr.pipeline.memory`; 0: never
    tile); overlap: LR pixels of context around each tile's core;
    frames: output frames ``start:stop`` (Python slice semantics, neighbours outside still feed windows);
    queue: items between two stages; batch_wait_s: how long the batcher waits to fill a batch;
    stop_grace_s: how long a stop waits for a backend call in progress before leaving it behind.
    """

    batch: int = 1
    tile: int | None = None
    overlap: int = 16
    memory_budget_mb: int = 3072
    frames: tuple[int, int | None] = (0, None)
    queue: int = 2
    batch_wait_s: float = 0.02
    stop_grace_s: float = 2.0


@dataclass
class HrFrame:
    """One output frame while its tiles arrive: ``planes`` from ``sink.new_planes()``, then what
    ``sink.finish()`` made of it once ``tiles_left`` is 0."""

    index: int
    pts: int
    duration: int
    planes: object
    tiles_left: int


class SourceFrames:
    """The decode stage: source frames ``first <= index < stop``, in order.

    Remembers what it saw of the source, for the messages about a clip shorter than asked: ``seen`` (the last
    frame's index plus one) and ``ended`` (the source ran out: ``seen`` is its length).
    """

    def __init__(self, source, first: int, stop: int | None):
        self.source, self.first, self.stop = source, first, stop
        self.seen = 0
        self.ended = False

    def __call__(self, _inbox: None = None) -> Iterator:
        with closing(self.source.frames(self.first)) as frames:
            for f in frames:
                self.seen = f.index + 1
                if self.stop is not None and f.index >= self.stop:
                    return  # the clip goes on beyond
                if f.index >= self.first:
                    yield f
                f = None
        self.ended = True


def hr_frames(results: Iterator[Result], sink, height: int, width: int, scale: int,
              tiles_per_frame: int) -> Iterator[HrFrame]:
    """The post stage: backend results ``(N, 3, s*h, s*w)`` -> whole finished output frames, in order.

    Each tile's core is converted (colour matrix, quantisation) straight into the frame's planes from
    ``sink.new_planes``; a frame whose last tile arrived is handed to ``sink.finish`` and goes on.
    """
    pix_fmt, spec = sink.planes_format()
    sc = scale
    current: HrFrame | None = None
    for res in results:
        for n, slot in enumerate(res.slots):
            t = slot.tile
            if current is None or current.index != slot.index:
                current = HrFrame(slot.index, slot.pts, slot.duration, sink.new_planes(height * sc, width * sc),
                                  tiles_per_frame)
            core = res.y[n, :, sc * (t.cy0 - t.y0): sc * (t.cy1 - t.y0), sc * (t.cx0 - t.x0): sc * (t.cx1 - t.x0)]
            encode_planes(core, pix_fmt, spec, out=current.planes[:, sc * t.cy0: sc * t.cy1, sc * t.cx0: sc * t.cx1])
            current.tiles_left -= 1
            if current.tiles_left == 0:
                current.planes = sink.finish(current.planes)
                done, current = current, None
                yield done
                done = None
        res = None


def encoded(frames: Iterator[HrFrame], sink) -> Iterator[int]:
    """The encode stage: each finished frame into ``sink``; yields the index of each frame written."""
    for f in frames:
        sink.write(f.planes, f.pts, f.duration)
        index, f = f.index, None
        yield index


class FrameQueueRunner:
    """Runs one source through a backend into one sink.  Library object; the CLI only wires it up.

    ``backend``: a :class:`vsr.backends.base.Backend`; ``source``/``sink`` from :mod:`vsr.video`.
    """

    def __init__(self, backend, settings: RunnerSettings = RunnerSettings()):
        self.backend = backend
        self.settings = settings
        self.padding = backend.padding
        self.num_frame = backend.num_frame
        self.radius = self.num_frame // 2
        self.scale = backend.scale

    def device_memory(self) -> DeviceMemory | None:
        """The GPU memory the backend's model works in, where it says: ``backend.device_memory()`` gives the
        fields of :class:`DeviceMemory` as a dict (None: the model works in host memory)."""
        probe = getattr(self.backend, "device_memory", None)
        facts = probe() if callable(probe) else None
        return DeviceMemory(**facts) if facts else None

    def plan_tile(self, height: int, width: int, sink) -> tuple[int | tuple[int, int] | None, MemoryPlan]:
        """The LR tile (a side, ``(h, w)``, or None: whole frames) and the memory plan that checked it
        (raises :class:`vsr.errors.MemoryBudgetError` when the run cannot fit ``--memory-budget``)."""
        s = self.settings
        plan = plan_memory(budget_mb=s.memory_budget_mb, height=height, width=width, scale=self.scale,
                           num_frame=self.num_frame, batch=s.batch, queue=s.queue, overlap=s.overlap,
                           encoder_mb=sink.memory_estimate_mb(),
                           hr_bytes_per_pixel=3 * np.dtype(sink.plane_dtype()).itemsize, tile=s.tile,
                           device=self.device_memory())
        if s.tile:
            return (s.tile if (height > s.tile or width > s.tile) else None), plan
        return plan.tile, plan

    def run(self, source, sink, progress: Callable[[int], None] | None = None,
            settings_for_report: dict | None = None, on_start: Callable[[], None] | None = None) -> RunReport:
        """Upscale every frame of ``source`` in ``settings.frames`` into ``sink``; returns the timings.

        The backend is prepared for the run's tile shape first; then ``on_start()`` (if given) is called, just
        before the first frame is decoded.  The sink is neither committed nor aborted here: the caller owns
        the output file's fate.
        """
        s = self.settings
        info = source.info
        start, stop = s.frames
        tile, memory = self.plan_tile(info.height, info.width, sink)
        tiles = tile_grid(info.height, info.width, tile, s.overlap)
        self.backend.prepare(tiles[0].y1 - tiles[0].y0, tiles[0].x1 - tiles[0].x0, s.batch)
        if on_start is not None:
            on_start()
        r = self.radius
        decode = SourceFrames(source, max(start - 2 * r, 0), None if stop is None else stop + 2 * r)
        pipeline = self._pipeline(decode, sink, tiles, info.height, info.width, progress)
        t0 = time.perf_counter()
        pipeline.run()
        wall = time.perf_counter() - t0
        stats = pipeline.stats()
        written = stats[-1].items
        self._check_count(decode, written)
        settings = dict(settings_for_report or {})
        settings.update(tile=tile, tiles_per_frame=len(tiles), overlap=s.overlap, batch=s.batch, queue=s.queue,
                        padding=self.padding, num_frame=self.num_frame,
                        memory_plan=memory.to_dict())
        return RunReport(stats, settings, wall, written, dict(self.backend.timings()), started=t0,
                         step_stats=self.backend.step_stats() or None)

    def _pipeline(self, decode: SourceFrames, sink, tiles: list[Tile], height: int, width: int,
                  progress: Callable[[int], None] | None) -> StagePipeline:
        s = self.settings
        start, stop = s.frames
        unit = "tiles" if len(tiles) > 1 else "frames"

        def infer(inbox: Iterator[Batch]) -> Iterator[Result]:
            for b in inbox:
                result = Result(b.slots, self.backend.infer(b.x))
                b = None
                yield result
                result = None

        def n_slots(item: Batch | Result) -> int:
            return len(item.slots)

        stages = [
            Stage("decode", decode),
            Stage("window", lambda inbox: windows(inbox, self.num_frame, self.padding, start, stop)),
            Stage("batch", lambda inbox: batches(inbox, tiles, s.batch), unit, n_slots, idle_s=s.batch_wait_s),
            Stage("infer", infer, unit, n_slots, grace_s=s.stop_grace_s),
            Stage("post", lambda inbox: hr_frames(inbox, sink, height, width, self.scale, len(tiles))),
            Stage("encode", lambda inbox: encoded(inbox, sink)),
        ]
        # the batch stage sends one batch at a time, and a result waits for post-processing one at a time
        queues = [s.queue, s.queue, 1, 1, s.queue]
        return StagePipeline(stages, queues, on_output=None if progress is None else (lambda _: progress(1)))

    def _check_count(self, decode: SourceFrames, written: int) -> None:
        """Zero frames written is an error naming the source's real length; fewer than asked, a warning."""
        start, stop = self.settings.frames
        asked = f"{start}:{'' if stop is None else stop}"
        if written == 0:
            if decode.seen == 0 and decode.first == 0:
                raise InputError(f"zero frames to write: {decode.source.info.path} decodes to no frame")
            n = decode.seen
            if n == 0:  # the source ended before the first frame decoded for the run
                n = decode.source.info.frames
                if n is None or n > decode.first:  # unknown, or a header that says more than there is
                    raise InputError(f"--frames {asked}: the source has at most {decode.first} frames")
            raise InputError(f"--frames {asked}: the source has only {n} frames")
        if stop is not None and written < stop - start:
            log.warning("--frames %s: the source has only %d frames; wrote %d", asked, decode.seen, written)
