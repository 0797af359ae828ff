"""The split-plan backend: EDVR as ONNX Runtime segments bridged by vsr's own DCN / PixelShuffle kernels.

Implements :class:`vsr.backends.base.Backend`::

    infer(x float32 (N, T, 3, H, W)) -> float32 (N, 3, 4H, 4W)

A frame size that is not a bucket (:class:`~vsr.backends.buckets.BucketPolicy`) is padded to the bucket and the
output cropped back.
Per bucket, on first use: the ONNX model is exported (or the given file is used), its plan is taken from the
plan cache (built if absent), segment sessions are loaded, and the memory arena is planned for the batch size.
:class:`StreamingSplitBackend` (the default) also ``keeps_features``: its plan's per-frame front runs once per frame.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Union

import numpy as np

from vsr.backends.base import FrameKeys, ModelBackend, announce
from vsr.backends.buckets import BucketPolicy
from vsr.backends.features import FeatureSlots, SceneFollower, keyless
from vsr.backends.registry import BackendKind, needs, register
from vsr.errors import BackendError, InputError
from vsr.report.sample import StepStats, merge_step_stats

if TYPE_CHECKING:  # the plan machinery imports ONNX and numba: loaded when a backend opens, not with this file
    from vsr.plan.executor import BoundPlan, FrontAndWindows, PlanExecutor
    from vsr.plan.plan import SubgraphPlan
    from vsr.plan.segments import SegmentBackend

log = logging.getLogger(__name__)

SPLIT_PRECISIONS = ("fp32", "int8")
INT8_SCALES = ("runtime", "static", "exact")


@dataclass(frozen=True)
class SplitOptions:
    """The subgraph plan: ONNX Runtime segments bridged by vsr's own kernels (the default).

    threads: cores for ONNX Runtime segments and vsr's kernels (default: all);
    bridge_ops: op types cut out of the graph and run on vsr's kernels (None: DCN, PixelShuffle and the
    output-resolution conv_last, ``vsr.plan.partition.CPU_BRIDGE_OPS``);
    fuse_activations: let a kernel apply the LeakyReLU after it;
    cache_dir: plan cache root (default ``<engine dir>/plans``, see :func:`vsr.files.engine_dir`);
    precision: "fp32" | "int8" (segments' convs in int8, :mod:`vsr.quant`);
    int8_scales: activation scales of int8 segments, "runtime" (follow the frames) | "static" (calibration);
    int8_calibration: folder of PNG frames that calibrates int8 plans (None: synthetic frames);
    stream_features: compute each frame's features once and keep them for the windows that share the frame
    (``vsr.backends.features``); False: every window computes its frames' features (the plan of before).
    Tuning: ``threads`` = the cores the run may have; ``int8`` where the CPU has VNNI.
    """

    threads: int | None = None
    bridge_ops: tuple[str, ...] | None = None
    fuse_activations: bool = True
    cache_dir: str | None = None
    buckets: BucketPolicy | None = None
    precision: str = "fp32"
    int8_scales: str = "runtime"
    int8_calibration: str | None = None
    stream_features: bool = True

    def __post_init__(self):
        if self.precision not in SPLIT_PRECISIONS:
            raise BackendError(f"unknown precision {self.precision!r} (choose from {', '.join(SPLIT_PRECISIONS)})")
        if self.int8_scales not in INT8_SCALES:
            raise BackendError(f"unknown int8 scales {self.int8_scales!r} (choose from {', '.join(INT8_SCALES)})")

# An ONNX file (one bucket: the size it was exported at) or ``exporter(height, width) -> path`` (any bucket).
OnnxSource = Union[str, os.PathLike, Callable[[int, int], Path]]


class SplitBackend(ModelBackend):
    """EDVR x4 on a subgraph plan.  ``infer((N, T, 3, H, W)) -> (N, 3, 4H, 4W)``; ``timings()`` per step."""

    name = "ort-split"
    scale = 4

    def __init__(self, onnx_source: OnnxSource, config, options: SplitOptions = SplitOptions(),
                 segment_backend: SegmentBackend | None = None):
        super().__init__(config, options.buckets)
        self.options = options
        if options.precision != "fp32":
            self.name = f"{self.name}-{options.precision}"  # reports and eval tables tell int8 runs apart
        self.source = onnx_source
        from vsr.kernels.threads import configure_kernel_threads
        from vsr.plan.plan import PlanCache, window_input_shape

        self.segment_backend = segment_backend or _segment_backend(options)
        self.cache = PlanCache(options.cache_dir)
        configure_kernel_threads(options.threads)  # (None: the default, as a worker's share now makes it)
        self._fixed_bucket = None
        if not callable(onnx_source):
            shape = window_input_shape(Path(onnx_source))
            self._fixed_bucket = (int(shape[-2]), int(shape[-1]))
        self._executors: dict[tuple[int, int], PlanExecutor] = {}
        self._build: dict[str, float] = {"build:export": 0.0, "build:plan": 0.0, "build:load": 0.0,
                                         "build:warmup": 0.0}  # the first two: base.CACHED_BUILDS
        self._warm: set[tuple] = set()
        self._io: dict[str, float] = {"pad": 0.0, "crop": 0.0}
        # one arena per bound shape: calls from several threads take turns (the pipeline calls from one)
        self._lock = threading.Lock()

    @classmethod
    def from_model(cls, model, config, options: SplitOptions = SplitOptions()) -> "SplitBackend":
        """Export ``model`` per bucket through the export cache (``vsr.export.cache.cached_export``)."""
        from vsr.export.cache import cached_export
        from vsr.export.onnx import state_checksum

        sha = state_checksum(model)

        def exporter(h: int, w: int) -> Path:
            return cached_export(model, config, h, w, sha)

        return cls(exporter, config, options)

    # -- Backend protocol -------------------------------------------------------------------------------
    def timings(self) -> dict[str, float]:
        """Seconds per plan step (summed over buckets), plus padding/cropping and one-off build costs."""
        out: dict[str, float] = {}
        for ex in self._executors.values():
            for k, v in ex.timings().items():
                out[k] = out.get(k, 0.0) + v
        out.update(self._io)
        out.update(self._build)
        return out

    def step_stats(self) -> dict[str, StepStats]:
        """Per-call records of each plan step, merged over the buckets used."""
        return merge_step_stats(ex.step_stats() for ex in self._executors.values())

    def facts(self) -> dict:
        """:meth:`ModelBackend.facts`, the precision, and the segment backend's own of these steps (int8: ISA,
        re-runs and their share of the time)."""
        own = getattr(self.segment_backend, "facts", None)
        return super().facts() | {"precision": self.options.precision} | (own(self.timings()) if own else {})

    def prepare(self, height: int, width: int, batch: int, phase: Callable[[str], None] | None = None,
                planes=None) -> None:
        """Export, plan, segment sessions and the arena of ``batch`` frames of ``height x width``, then one
        warm-up run on zeros: the first run of a binding is about 1.5x slower (ONNX Runtime's first-run
        allocations, the kernels' first calls), which would otherwise count as frame time."""
        with self._lock:
            hb, wb = self.bucket(height, width)
            bound, step = self._bound(batch, hb, wb, phase)
            announce(phase, "warming up")
            self._warm_up(bound, ("windows", step, hb, wb))

    def _warm_up(self, bound: BoundPlan, key: tuple) -> None:
        """One untimed run of ``bound`` on zeros, once per ``key``."""
        if key in self._warm:
            return
        t0 = time.perf_counter()
        for buf in bound.inputs.values():
            buf[...] = 0.0
        held = getattr(self.segment_backend, "held", None)  # int8: the zeros must not steer run-time scales
        with held() if held is not None else contextlib.nullcontext():
            bound.run(record=False)
        self._build["build:warmup"] += time.perf_counter() - t0
        self._warm.add(key)

    def _bound(self, n: int, hb: int, wb: int, phase=None) -> tuple[BoundPlan, int]:
        """The plan of bucket ``hb x wb`` bound for ``n`` frames, and how many frames one run takes."""
        ex = self.executor(hb, wb, phase)
        in_name = ex.plan.inputs[0]
        batch = ex.plan.tensors[in_name].shape[0]
        step = n if isinstance(batch, str) else int(batch)  # a static-batch export runs in chunks
        return ex.bind({in_name: (step, self.num_frame, 3, hb, wb)}), step

    def infer(self, x: np.ndarray) -> np.ndarray:
        with self._lock:
            return self._infer(x)

    def _infer(self, x: np.ndarray) -> np.ndarray:
        x = self.check_input(x)
        n, _, _, h, w = x.shape
        hb, wb = self.bucket(h, w)
        bound, step = self._bound(n, hb, wb)
        plan = self.executor(hb, wb).plan
        in_name, out_name = plan.inputs[0], plan.outputs[0]
        out = None  # as read_output gives it: float32 here, the CUDA runtime's own output dtype there
        for i in range(0, n, step):
            chunk = x[i:i + step]
            m = chunk.shape[0]
            t0 = time.perf_counter()
            self.load_input(chunk, bound.inputs[in_name])
            t1 = time.perf_counter()
            bound.run()
            t2 = time.perf_counter()
            y = self.read_output(bound.outputs[out_name], m, 4 * h, 4 * w)
            if out is None:
                out = np.empty((n, *y.shape[1:]), y.dtype)
            out[i:i + m] = y
            self._io["pad"] += t1 - t0
            self._io["crop"] += time.perf_counter() - t2
        return out

    # -- where the arena lives: host arrays here, device tensors in the CUDA runtime ----------------------
    def load_input(self, chunk: np.ndarray, dst) -> None:
        """``chunk (m, T, 3, h, w)`` padded into the bound input ``dst (step, T, 3, hb, wb)``; rows from m: zeros."""
        m = chunk.shape[0]
        if m < dst.shape[0]:
            dst[m:] = 0.0
        self.buckets.pad_into(chunk, dst[:m])

    def read_output(self, src, m: int, height: int, width: int) -> np.ndarray:
        """The first ``m`` frames of the bound output ``src (step, 3, Hb, Wb)``, cropped to ``height x width``."""
        return src[:m, :, :height, :width]

    # -- buckets ----------------------------------------------------------------------------------------
    def bucket(self, h: int, w: int) -> tuple[int, int]:
        if self._fixed_bucket is not None:
            hb, wb = self._fixed_bucket
            if h > hb or w > wb:
                raise InputError(f"frames of {h}x{w} do not fit the ONNX model's input of {hb}x{wb}; "
                                 "give an exporter instead of a file to get other buckets")
            return hb, wb
        return self.buckets.bucket(h, w)

    def executor(self, hb: int, wb: int, phase: Callable[[str], None] | None = None) -> PlanExecutor:
        """The executor of bucket ``hb x wb`` (export, plan, sessions made on first use, announced to ``phase``)."""
        ex = self._executors.get((hb, wb))
        if ex is None:
            from vsr.export.cache import announcing

            t0 = time.perf_counter()
            # each step said only when it is done, not for the cached export or plan read back
            with announcing(lambda: announce(phase, "exporting ONNX")):
                path = Path(self.source(hb, wb)) if callable(self.source) else Path(self.source)
            t1 = time.perf_counter()
            plan = self.plan_for(path, on_build=lambda: announce(phase, "building plan"))
            t2 = time.perf_counter()
            announce(phase, "loading sessions")
            ex = self.new_executor(plan)
            for step, seconds in (("export", t1 - t0), ("plan", t2 - t1), ("load", time.perf_counter() - t2)):
                self._build[f"build:{step}"] += seconds
            self._executors[(hb, wb)] = ex
            log.info("split plan for %dx%d: %d steps from %s", hb, wb, len(plan.steps), plan.directory)
        return ex

    def new_executor(self, plan: SubgraphPlan) -> PlanExecutor:
        """The executor of ``plan`` (host arena, the CPU bridge kernels); the CUDA runtime overrides it."""
        from vsr.plan.executor import PlanExecutor

        return PlanExecutor(plan, self.segment_backend)

    def plan_for(self, onnx_path: Path, on_build: Callable[[], None] = lambda: None) -> SubgraphPlan:
        from vsr.plan.partition import CPU_BRIDGE_OPS

        sb = self.segment_backend
        front = {"front": True} if self.keeps_features else {}
        bridge_ops = CPU_BRIDGE_OPS if self.options.bridge_ops is None else self.options.bridge_ops
        quant = {}
        if sb.precision == "int8":
            from vsr.quant import QuantConfig, int8_plan_transform

            cfg = QuantConfig(calibration=self.options.int8_calibration)
            quant = {"quant": cfg.digest, "transform": int8_plan_transform(cfg, self.options.threads)}
        return self.cache.get(onnx_path, backend=sb.name, backend_version=sb.version, precision=sb.precision,
                              bridge_ops=bridge_ops, fuse_activations=self.options.fuse_activations,
                              kernel_device=sb.device, on_build=on_build, **front, **quant)


class StreamingSplitBackend(SplitBackend):
    """The split plan with each frame's features computed once per stream (:mod:`vsr.backends.features`).

    Its plan has the per-frame front (``segment_features``) as a segment of its own: that runs on ``batch``
    frames at a time (the batch prepared: one fixed shape, rows beyond the frames zero), its outputs are kept
    per (frame, tile), and the rest of the plan runs on windows whose features are copied in from them.
    ``infer(x)`` without keys computes every frame of its windows (as :class:`SplitBackend`).
    """

    keeps_features = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.slots = FeatureSlots()
        self.scenes = SceneFollower(getattr(self.segment_backend, "follow", None))  # int8: scales per tile
        self._store: dict[str, list[np.ndarray]] = {}
        self._frames = 1  # frames per front call
        self._io.update({"features:keep": 0.0, "features:gather": 0.0})

    def new_executor(self, plan: SubgraphPlan) -> FrontAndWindows:
        from vsr.plan.executor import FrontAndWindows

        return FrontAndWindows(plan, self.segment_backend, executor=super().new_executor)

    def prepare(self, height: int, width: int, batch: int, phase: Callable[[str], None] | None = None,
                planes=None) -> None:
        """:meth:`SplitBackend.prepare`, and the front bound for ``batch`` frames per call, warmed up on zeros."""
        self._frames = batch
        super().prepare(height, width, batch, phase)
        with self._lock:
            hb, wb = self.bucket(height, width)
            self._warm_up(self._front(hb, wb), ("frames", batch, hb, wb))

    def _front(self, hb: int, wb: int) -> BoundPlan:
        front = self.executor(hb, wb).front
        return front.bind({front.plan.inputs[0]: (self._frames, 3, hb, wb)})

    def infer(self, x: np.ndarray) -> np.ndarray:
        return self.infer_stream(x, keyless(np.shape(x)[0], self.num_frame))

    def infer_stream(self, x: np.ndarray, keys: FrameKeys) -> np.ndarray:
        with self._lock:
            x = self.check_input(x)
            self.check_keys(x, keys)
            self.scenes.see(keys)
            hb, wb = self.bucket(*x.shape[-2:])
            call = self.slots.begin(keys, (hb, wb))
            try:
                self._compute(x, call.new, hb, wb)
                return self._windows(x, call.slots, hb, wb)
            except BaseException:
                self.slots.forget()
                raise
            finally:
                self.slots.end(keys)

    def _compute(self, x: np.ndarray, new: list[tuple[int, int, int]], hb: int, wb: int) -> None:
        """The front on the frames ``new`` names, ``batch`` at a time; each frame's features into its slot."""
        bound = self._front(hb, wb)
        frames = next(iter(bound.inputs.values()))
        outs = list(bound.outputs.items())
        for name, arr in outs:  # one array per slot and output, allocated once (per size)
            kept = self._store.setdefault(name, [])
            if kept and kept[0].shape != arr.shape[1:]:
                kept.clear()
            kept.extend(np.empty(arr.shape[1:], arr.dtype) for _ in range(self.slots.size - len(kept)))
        m = frames.shape[0]
        for i in range(0, len(new), m):
            rows = new[i:i + m]
            t0 = time.perf_counter()
            for r, (_, n, t) in enumerate(rows):
                self.buckets.pad_into(x[n, t], frames[r])
            frames[len(rows):] = 0.0
            t1 = time.perf_counter()
            bound.run()
            t2 = time.perf_counter()
            for r, (slot, _, _) in enumerate(rows):
                for name, arr in outs:
                    np.copyto(self._store[name][slot], arr[r])
            self._io["pad"] += t1 - t0
            self._io["features:keep"] += time.perf_counter() - t2

    def _windows(self, x: np.ndarray, slots: np.ndarray, hb: int, wb: int) -> np.ndarray:
        """The rest of the plan on the windows of ``x``, their features gathered from ``slots (N, T)``."""
        n, t_, _, h, w = x.shape
        bound, step = self._bound(n, hb, wb)
        plan = self.executor(hb, wb).plan
        in_name, out_name = plan.inputs[0], plan.outputs[0]
        feats = plan.inputs[1:]
        out = np.empty((n, 3, 4 * h, 4 * w), np.float32)
        for i in range(0, n, step):
            m = min(step, n - i)
            t0 = time.perf_counter()
            self.load_input(x[i:i + m], bound.inputs[in_name])
            t1 = time.perf_counter()
            for name in feats:
                dst, kept = bound.inputs[name], self._store[name]
                for r, slot in enumerate(slots[i:i + m].reshape(-1)):
                    np.copyto(dst[r], kept[slot])
                dst[m * t_:] = 0.0
            t2 = time.perf_counter()
            bound.run()
            t3 = time.perf_counter()
            out[i:i + m] = self.read_output(bound.outputs[out_name], m, 4 * h, 4 * w)
            self._io["pad"] += t1 - t0
            self._io["features:gather"] += t2 - t1
            self._io["crop"] += time.perf_counter() - t3
        return out


def _segment_backend(options: SplitOptions) -> SegmentBackend:
    if options.precision == "int8":
        from vsr.quant import Int8SegmentBackend

        return Int8SegmentBackend(threads=options.threads, scales=options.int8_scales)
    from vsr.plan.segments import OrtSegmentBackend

    return OrtSegmentBackend(threads=options.threads)


def _open(model, config, options: SplitOptions) -> SplitBackend:
    return (StreamingSplitBackend if options.stream_features else SplitBackend).from_model(model, config, options)


# measured faster than the whole graph on the 2-core CPU machine (1.17x wall, 1.20x CPU on EDVR-M 180x320;
# docs/benchmarks.md, "Subgraph plan and bridge kernels"): ONNX Runtime's choice for --plan auto
register(BackendKind("ort-split", "ort", "split", SplitOptions, _open, SplitOptions, available=needs("onnxruntime"),
                     precisions=SPLIT_PRECISIONS, auto=1))
