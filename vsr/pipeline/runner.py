"""The frame-queue runner: decode -> windows -> batches -> backend -> post-processing -> encode.

Each stage runs in its own thread and talks to its neighbours through bounded queues
(:mod:`vsr.pipeline.stages`), so a slow stage holds the others back (back-pressure) and memory stays bounded
whatever the video's length: at most ``queue`` items wait between two stages, plus the ``3 * radius + 1``
source frames the window stage holds.  numpy, PyAV, ONNX Runtime and torch release the GIL in their heavy
loops, so the stages overlap.

    decode      source frames, float32 RGB (3, H, W)
    scenes      each frame with whether it starts a new scene (:mod:`vsr.pipeline.scenes`; not with
                ``scene_cuts="off"``)
    window      FrameWindow: the T frames around each output frame (clip ends padded as configured)
    batch       up to ``batch`` (window, tile) items stacked into (N, T, 3, h, w), or what is ready
                after ``batch_wait_s``
    infer       backend.infer -> (N, 3, 4h, 4w) RGB (``infer_stream`` with the batch's frame keys where the
                backend streams and the memory plan keeps the features), or the sink's planes where the backend
                makes them (the CUDA runtime, on its device)
    post        tile cores -> output planes (colour matrix, quantisation, chroma subsampling: one parallel pass)
                of whole HR frames, written into the sink's own frame buffers (colour tags set there;
                :mod:`vsr.pipeline.post`)
    encode      sink.write (PyAV encoder + muxer, or PNG files)
"""

from __future__ import annotations

import time
import warnings
from contextlib import closing
from itertools import count
from dataclasses import dataclass, replace
from typing import Callable, Iterator

import numpy as np

from vsr.errors import InputError, MemoryBudgetError
from vsr.machine import usable_cores
from vsr.pipeline.batches import Batch, Result, batches, inferred, kept_features
from vsr.pipeline.memory import (MARGIN, MB, PER_WINDOW_COST, Budget, DeviceMemory, MemoryPlan, ModelMemory,
                                 budget_for, plan_memory, run_budget, tiles_cost, with_features)
from vsr.pipeline.scenes import CUT_CONTEXT, SCENE_MODES, WINDOW, CutDetector, CutRule, mark_listed
from vsr.pipeline.stages import Stage, StagePipeline, abandoned_still_running
from vsr.pipeline.tiles import Tile, tile_grid
from vsr.pipeline.windows import FrameWindow, windows
from vsr.pipeline.post import HrFrame, hr_frames, post_threads, prepare_post
from vsr.report import RunReport
from vsr.video.damage import message as damage_message, unwatched
from vsr.video.formats import has_alpha
from vsr.video.planes import conversion_threads

_STREAMS = count(1)  # one stream of frame keys per run

def hr_bytes_per_pixel(sink) -> int:
    """Bytes of one output pixel's integer planes: three 4:4:4 ones, and the alpha's where the output has it."""
    return (4 if has_alpha(sink.pix_fmt) else 3) * np.dtype(sink.plane_dtype()).itemsize


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
    largest that keeps the whole process within ``memory_budget_mb`` (None: half of the machine's
    memory), see :mod:`vsr.pipeline.memory`; 0: never
    tile); overlap: LR pixels of context around each tile's core;
    frames: output frames ``start:stop`` (Python slice semantics, neighbours outside still feed windows);
    queue: items between two stages; batch_wait_s: how long the batcher waits to fill a batch;
    stop_grace_s: how long a stop waits for a backend call in progress before leaving it behind;
    scene_cuts: "auto" (detect them, :mod:`vsr.pipeline.scenes`), "off" (windows run across cuts, as before
    the detector existed: outputs bit-identical to then) or "list" (the frames in ``scene_list`` start new
    scenes); no window crosses a cut.  "auto" is the default: a window across a hard cut feeds the aligner two
    shots it cannot align and the other shot leaks into the frames next to the cut, while the detector costs
    5-30 ms a frame in its own thread (EDVR-S takes seconds) and found every cut with no false one on the real
    clips (docs/benchmarks.md, "Scene cuts: detector"); scene_threshold: overrides ``threshold`` of
    ``configs/pipeline/scenes.toml``; deinterlace: "auto" (an interlaced source's frames are deinterlaced as they are
    decoded, :mod:`vsr.video.interlace`) or "off"; frame_rate: a folder of frames' rate (``--frame-rate``, as
    text: ``"24000/1001"``; None: 25), refused for a video.
    """

    batch: int = 1
    tile: int | None = None
    overlap: int = 16
    memory_budget_mb: int | None = None  # None: half of the machine's memory (memory.machine_budget)
    frames: tuple[int, int | None] = (0, None)
    queue: int = 2
    # finished frames waiting for the encoder.  8 was tried on an H200 (540p -> 4K, x264 medium): the model no
    # longer waited on the encoder, but the run was no faster (14.5 fps against 16.0 with 2, another machine
    # of the kind): fed without pause, x264 itself ran at 16.9 fps, the real bottleneck; so 2, the memory kept
    encode_queue: int = 2
    batch_wait_s: float = 0.02
    stop_grace_s: float = 2.0
    scene_cuts: str = "auto"
    scene_list: tuple[int, ...] = ()
    scene_threshold: float | None = None
    deinterlace: str = "auto"
    frame_rate: str | None = None


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


class SceneStage:
    """The scenes stage: each source frame with whether it starts a new scene (``settings.scene_cuts``
    "auto": detected; "list": ``settings.scene_list``); remembers the cuts for the report."""

    def __init__(self, settings: RunnerSettings):
        self.mode = settings.scene_cuts
        self.rule = CutRule.load(threshold=settings.scene_threshold) if self.mode == "auto" else None
        self.detector = CutDetector(self.rule) if self.rule else None
        self.listed = settings.scene_list

    def __call__(self, inbox: Iterator) -> Iterator:
        return self.detector.mark(inbox) if self.detector else mark_listed(inbox, self.listed)

    def to_dict(self, start: int, stop: int) -> dict:
        """For the run report: the mode, the rule, and the cuts among the output frames ``start:stop``."""
        if self.mode == "off":
            return {"mode": "off"}
        cuts = self.detector.cuts if self.detector else self.listed
        out = {"mode": self.mode, "cuts": [k for k in cuts if start <= k < stop]}
        if self.rule is not None:
            out.update(threshold=self.rule.threshold, min_score=self.rule.min_score)
        return out


def encoded(frames: Iterator[HrFrame], sink) -> Iterator[int]:
    """The encode stage: each finished frame into ``sink``; yields the index of each frame written.  After the
    last one, the sink's ``end()`` (a video encoder's flush and the file's close) runs here, in the stage: a run's
    wall time, fps and encode stage include it (libx264 holds most of a short 4K clip in its lookahead)."""
    for f in frames:
        sink.write(f.planes, f.pts, f.duration)
        index, f = f.index, None
        yield index
    end = getattr(sink, "end", None)
    if end is not None:
        end()



def decode_range(settings: RunnerSettings, radius: int) -> tuple[int, int | None]:
    """The source frames ``first:stop`` a run of ``settings.frames`` decodes: the output frames and the neighbours
    their windows reach (``2 * radius`` each side), and with detected cuts the ``CUT_CONTEXT`` frames that decide
    every cut a window meets: those after ``start - 2 * radius`` (a reflection reaches that far back) and up to
    ``radius`` after the last output frame.  A batch job's chunk decodes the same range."""
    start, stop = settings.frames
    before = after = 2 * radius
    if settings.scene_cuts == "auto":
        before, after = max(before, 2 * radius - 1 + CUT_CONTEXT), max(after, radius + CUT_CONTEXT - 1)
    return max(start - before, 0), None if stop is None else stop + after

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
        fields of :class:`DeviceMemory` as a dict (None: the model works in host memory).  Asked once per runner:
        the CUDA runtime measures it by capturing its programs."""
        if not hasattr(self, "_device"):
            probe = getattr(self.backend, "device_memory", None)
            facts = probe() if callable(probe) else None
            self._device = DeviceMemory(**facts) if facts else None
        return self._device

    def plan_tile(self, height: int, width: int, sink) -> tuple[int | tuple[int, int] | None, MemoryPlan]:
        """The LR tile (a side, ``(h, w)``, or None: whole frames) and the memory plan that checked it
        (raises :class:`vsr.errors.MemoryBudgetError` when the run cannot fit ``--memory-budget``; without one,
        the run plans within half of the machine's memory, :func:`vsr.pipeline.memory.machine_budget`)."""
        s = self.settings
        budget = run_budget(s.memory_budget_mb)
        plan = self._plan(budget.mb, height, width, sink)
        tile = (s.tile if (height > s.tile or width > s.tile) else None) if s.tile else plan.tile
        if getattr(self.backend, "keeps_features", False):
            tile, plan = self._keep_features(plan, tile, height, width, sink, budget)
        return tile, replace(plan, budget_from=budget.why)

    def _plan(self, budget_mb: float, height: int, width: int, sink) -> MemoryPlan:
        s = self.settings
        # the scenes stage: its queue, and the frames the detector holds until it has decided them
        extra = 0 if s.scene_cuts == "off" else s.queue + (WINDOW + 1 if s.scene_cuts == "auto" else 0)
        return plan_memory(budget_mb=budget_mb, height=height, width=width, scale=self.scale,
                           num_frame=self.num_frame, batch=s.batch, queue=s.queue, hr_queue=s.encode_queue,
                           overlap=s.overlap,
                           encoder_mb=sink.memory_estimate_mb(),
                           hr_bytes_per_pixel=hr_bytes_per_pixel(sink), tile=s.tile,
                           device=self.device_memory(), extra_lr_frames=extra,
                           model=ModelMemory.of(getattr(self.backend, "config", None)))

    def _features_mb(self, height: int, width: int, tile) -> float:
        grid = tile_grid(height, width, tile, self.settings.overlap)
        item = self.backend.feature_nbytes(grid[0].y1 - grid[0].y0, grid[0].x1 - grid[0].x0)
        return kept_features(self.num_frame, self.settings.batch, len(grid)) * item / MB

    def _keep_features(self, plan: MemoryPlan, tile, height: int, width: int, sink,
                       budget: Budget) -> tuple[object, MemoryPlan]:
        """A streaming backend's plan: each frame's features kept where they fit beside ``plan``; else in
        smaller automatic tiles where those cost less than computing the features per window
        (:data:`PER_WINDOW_COST`); else per window, with a warning saying what it costs and the budget that
        would keep them."""
        s = self.settings
        device = self.device_memory()
        planned = with_features(plan, self._features_mb(height, width, tile), device)
        if planned.features == "kept":
            return tile, planned
        if s.tile is None:  # room for the features: the tiles planned without their share of the budget
            try:
                smaller = self._plan(budget.mb - planned.features_mb / (1.0 - MARGIN), height, width, sink)
            except MemoryBudgetError:
                smaller = None
            if smaller is not None:
                kept = with_features(replace(smaller, budget_mb=plan.budget_mb),
                                     self._features_mb(height, width, smaller.tile), device)
                cost = tiles_cost(height, width, smaller.tile, s.overlap) / tiles_cost(height, width, tile, s.overlap)
                if kept.features == "kept" and cost < PER_WINDOW_COST:
                    return kept.tile, kept
        if device is not None:
            where = f"the GPU has free ({device.free_mb:.0f} MB)"
        else:
            where = (f"{budget.named()} leaves; --memory-budget "
                     f"{budget_for(planned.total_mb + planned.features_mb)} keeps them")
        warnings.warn(f"each frame's features are computed per window, about {PER_WINDOW_COST:.2f}x slower: "
                      f"keeping them needs {planned.features_mb:.0f} MB more than {where}", stacklevel=3)
        return tile, planned

    def decode_range(self) -> tuple[int, int | None]:
        """The source frames ``first:stop`` this run decodes (:func:`decode_range`)."""
        return decode_range(self.settings, self.radius)

    def run(self, source, sink, progress: Callable[[int], None] | None = None,
            settings_for_report: dict | None = None, on_start: Callable[[], None] | None = None,
            on_phase: Callable[[str], None] | None = None) -> RunReport:
        """Upscale every frame of ``source`` in ``settings.frames`` into ``sink``; returns the timings.

        The backend is prepared for the run's tile shape first (``on_phase(name)``, if given, hears each of its
        steps: :meth:`vsr.backends.base.Backend.prepare`); then ``on_start()`` (if given) is called, just
        before the first frame is decoded.  The sink is neither committed nor aborted here: the caller owns
        the output file's fate.
        """
        s = self.settings
        if s.scene_cuts not in SCENE_MODES:
            raise ValueError(f"scene_cuts must be one of {SCENE_MODES}, not {s.scene_cuts!r}")
        info = source.info
        tile, memory = self.plan_tile(info.height, info.width, sink)
        fmt = sink.planes
        tiles = tile_grid(info.height, info.width, tile, s.overlap)
        scenes = SceneStage(s)  # reads the thresholds' config before minutes of warm-up
        shape = (tiles[0].y1 - tiles[0].y0, tiles[0].x1 - tiles[0].x0, s.batch)
        # told the sink's planes: a backend that makes them itself (the CUDA runtime, on its device) gives them
        self.backend.prepare(*shape, phase=on_phase, planes=fmt)
        prepare_post(sink, info.height, info.width, self.scale, tiles[0])
        if on_start is not None:
            on_start()
        decode = SourceFrames(source, *self.decode_range())
        stream = next(_STREAMS) if memory.features == "kept" else None
        weights = (settings_for_report or {}).get("weights")
        written_at: list[float] = []  # when each frame left the encode stage (the report's steady rate)
        marks: list[tuple[tuple[int, float], ...]] = []  # the stages' numbers at the first frames' writes
        pipeline = self._pipeline(decode, scenes, sink, tiles, info.height, info.width, progress, stream, weights,
                                  written_at, marks)
        if hasattr(source, "stop_reads"):  # (a stage's error stops the run while a pipe's producer is silent)
            source.stop_reads(pipeline.stop.is_set)
        t0 = time.perf_counter()
        pipeline.run()
        facts = self.backend.facts() if hasattr(self.backend, "facts") else {}
        wall = time.perf_counter() - t0
        stats = pipeline.stats()
        written = stats[-1].items
        self._check_count(decode, written)
        settings = dict(settings_for_report or {})
        early = getattr(source, "early_end", None) if decode.ended else None
        if early is not None:  # said, and kept in the report (a batch job's list marks it)
            warnings.warn(early.message(info.path, written), stacklevel=2)
            settings["input_ended_early"] = early.to_dict(written)
        damage = getattr(source, "damage", None)
        if damage:  # said once, at the end; a source cut short is said as an early end alone (the last packet, cut
            # in two, is its decoder's error), unless its demuxer met damage too: a .mkv whose overwritten block header
            # stopped it said only "ended early"
            if early is None or damage.get("demuxer_error_lines"):
                warnings.warn(damage_message(info.path, damage), stacklevel=2)
            settings["input_damaged"] = damage
        settings.update(tile=tile, tiles_per_frame=len(tiles), overlap=s.overlap, batch=s.batch, queue=s.queue,
                        encode_queue=s.encode_queue,
                        padding=self.padding, num_frame=self.num_frame,
                        backend_facts=facts, cores=usable_cores(),  # threads' default: affinity, quota, share
                        memory_plan=memory.to_dict(),
                        scene_cuts=scenes.to_dict(s.frames[0], s.frames[0] + written))
        return RunReport(stats, settings, wall, written, dict(self.backend.timings()), started=t0,
                         step_stats=self.backend.step_stats() or None, written_at=written_at, marks=marks)

    def _pipeline(self, decode: SourceFrames, scenes: SceneStage, sink, tiles: list[Tile], height: int,
                  width: int, progress: Callable[[int], None] | None, stream: int | None,
                  weights: str | None, written_at: list[float],
                  marks: list[tuple[tuple[int, float], ...]]) -> StagePipeline:
        s = self.settings
        start, stop = s.frames
        unit = "tiles" if len(tiles) > 1 else "frames"
        marked = s.scene_cuts != "off"

        def infer(inbox: Iterator[Batch]) -> Iterator[Result]:
            return inferred(inbox, self.backend, stream is not None)

        def n_slots(item: Batch | Result) -> int:
            return len(item.slots)

        def post(inbox: Iterator[Result]) -> Iterator[HrFrame]:
            conversion_threads(threads)  # in this stage's own thread
            yield from hr_frames(inbox, sink, height, width, self.scale, len(tiles), weights)

        threads = post_threads(self.backend)
        stages = [
            Stage("decode", decode),
            *([Stage("scenes", scenes)] if marked else []),
            Stage("window", lambda inbox: windows(inbox, self.num_frame, self.padding, start, stop, marked)),
            Stage("batch", lambda inbox: batches(inbox, tiles, s.batch, stream or 0), unit, n_slots,
                  idle_s=s.batch_wait_s),
            Stage("infer", infer, unit, n_slots, grace_s=s.stop_grace_s),
            Stage("post", post),
            Stage("encode", lambda inbox: unwatched(encoded(inbox, sink))),  # (its FFmpeg lines: not the source's)
        ]
        # the batch stage sends one batch at a time, and a result waits for post-processing one at a time
        queues = [s.queue] * marked + [s.queue, s.queue, 1, 1, s.encode_queue]

        def written(_index: int) -> None:
            written_at.append(time.perf_counter())
            if len(marks) < RunReport.STEADY_AFTER:  # where the report's steady span may start
                marks.append(pipeline.snapshot())
            if progress is not None:
                progress(1)

        pipeline = StagePipeline(stages, queues, on_output=written)
        return pipeline

    def _check_count(self, decode: SourceFrames, written: int) -> None:
        """Zero frames written is an error naming the source's real length; fewer than asked, a warning."""
        start, stop = self.settings.frames
        asked = f"{start}:{'' if stop is None else stop}"
        if written == 0:
            if decode.seen == 0 and decode.first == 0:
                raise InputError(f"zero frames to write: {decode.source.info.path} decodes to no frame")
            n = decode.seen
            if n == 0 and decode.ended:  # decoded to its end before the run's first frame: the frames before it
                n = getattr(decode.source, "frames_decoded", None) or 0
            if n == 0:  # the source ended before the first frame decoded for the run
                info = decode.source.info
                n = info.frames
                if n is None or n > decode.first:  # unknown, or a header that says more than there is
                    about = info.frames_estimate
                    guess = f" (about {about} by its duration)" if about is not None and about < decode.first else ""
                    raise InputError(f"--frames {asked}: the source has fewer than {decode.first} frames{guess}")
            raise InputError(f"--frames {asked}: the source has only {n} frame{'s' if n != 1 else ''}")
        if stop is not None and written < stop - start:
            # a warning, not a log line: the CLI prints it as 'vsr: warning: ...' above the progress bar
            seen = f"{decode.seen} frame{'s' if decode.seen != 1 else ''}"
            warnings.warn(f"--frames {asked}: the source has only {seen}; wrote {written}, frames "
                          f"{start}:{start + written}", stacklevel=2)
