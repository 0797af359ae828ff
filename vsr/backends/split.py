"""The split-plan backend: EDVR as ONNX Runtime segments bridged by vsr's own DCN / PixelShuffle kernels.

Implements :class:`vsr.backends.base.Backend`::

    infer(x float32 (N, T, 3, H, W)) -> float32 (N, 3, 4H, 4W)

A frame size that is not a bucket (:class:`~vsr.backends.buckets.BucketPolicy`) is padded to the bucket and the
output cropped back.
Per bucket, on first use: the ONNX model is exported (or the given file is used), its plan is taken from the
plan cache (built if absent), segment sessions are loaded, and the memory arena is planned for the batch size.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Callable, Union

import numpy as np
import onnx

from vsr.backends.base import ModelBackend
from vsr.backends.options import SplitOptions
from vsr.errors import BackendError, InputError
from vsr.kernels.threads import configure_kernel_threads
from vsr.plan.executor import BoundPlan, PlanExecutor
from vsr.plan.partition import DEFAULT_BRIDGE_OPS
from vsr.plan.plan import PlanCache, SubgraphPlan
from vsr.plan.segments import OrtSegmentBackend, SegmentBackend
from vsr.report.sample import StepStats, merge_step_stats

log = logging.getLogger(__name__)

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
        self.segment_backend = segment_backend or _segment_backend(options)
        self.cache = PlanCache(options.cache_dir)
        if options.threads:
            configure_kernel_threads(options.threads)
        self._fixed_bucket = None
        if not callable(onnx_source):
            shape = _input_shape(Path(onnx_source))
            self._fixed_bucket = (int(shape[-2]), int(shape[-1]))
        self._executors: dict[tuple[int, int], PlanExecutor] = {}
        self._build: dict[str, float] = {"build:export": 0.0, "build:plan": 0.0, "build:load": 0.0,
                                         "build:warmup": 0.0}
        self._warm: set[tuple[int, int, int]] = set()
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

    def prepare(self, height: int, width: int, batch: int) -> None:
        """Export, plan, segment sessions and the arena of ``batch`` frames of ``height x width``, then one
        warm-up run on zeros: the first run of a binding is about 1.5x slower (ONNX Runtime's first-run
        allocations, the kernels' first calls), which would otherwise count as frame time."""
        with self._lock:
            hb, wb = self.bucket(height, width)
            bound, step = self._bound(batch, hb, wb)
            if (step, hb, wb) in self._warm:
                return
            t0 = time.perf_counter()
            for buf in bound.inputs.values():
                buf[...] = 0.0
            bound.run(record=False)
            reset = getattr(self.segment_backend, "reset", None)
            if reset is not None:  # the warm-up's zeros must not steer run-time int8 scales
                reset()
            self._build["build:warmup"] += time.perf_counter() - t0
            self._warm.add((step, hb, wb))

    def _bound(self, n: int, hb: int, wb: int) -> tuple[BoundPlan, int]:
        """The plan of bucket ``hb x wb`` bound for ``n`` frames, and how many frames one run takes."""
        ex = self.executor(hb, wb)
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

    def executor(self, hb: int, wb: int) -> PlanExecutor:
        """The executor of bucket ``hb x wb`` (export, plan and sessions made on first use)."""
        ex = self._executors.get((hb, wb))
        if ex is None:
            t0 = time.perf_counter()
            path = Path(self.source(hb, wb)) if callable(self.source) else Path(self.source)
            t1 = time.perf_counter()
            plan = self.plan_for(path)
            t2 = time.perf_counter()
            ex = self.new_executor(plan)
            self._build["build:export"] += t1 - t0
            self._build["build:plan"] += t2 - t1
            self._build["build:load"] += time.perf_counter() - t2
            self._executors[(hb, wb)] = ex
            log.info("split plan for %dx%d: %d steps from %s", hb, wb, len(plan.steps), plan.directory)
        return ex

    def new_executor(self, plan: SubgraphPlan) -> PlanExecutor:
        """The executor of ``plan`` (host arena, the CPU bridge kernels); the CUDA runtime overrides it."""
        return PlanExecutor(plan, self.segment_backend)

    def plan_for(self, onnx_path: Path) -> SubgraphPlan:
        sb = self.segment_backend
        bridge_ops = DEFAULT_BRIDGE_OPS if self.options.bridge_ops is None else self.options.bridge_ops
        quant = {}
        if sb.precision == "int8":
            from vsr.quant import QuantConfig, int8_plan_transform

            cfg = QuantConfig(calibration=self.options.int8_calibration)
            quant = {"quant": cfg.digest, "transform": int8_plan_transform(cfg, self.options.threads)}
        return self.cache.get(onnx_path, backend=sb.name, backend_version=sb.version, precision=sb.precision,
                              bridge_ops=bridge_ops, fuse_activations=self.options.fuse_activations,
                              kernel_device=sb.device, **quant)


def _segment_backend(options: SplitOptions) -> SegmentBackend:
    if options.precision == "int8":
        from vsr.quant import Int8SegmentBackend

        return Int8SegmentBackend(threads=options.threads, scales=options.int8_scales)
    return OrtSegmentBackend(threads=options.threads)


def _input_shape(path: Path) -> list:
    if not path.is_file():
        raise InputError(f"{path}: no such ONNX file")
    try:
        m = onnx.load(str(path), load_external_data=False)
    except Exception as e:
        raise InputError(f"{path}: not a readable ONNX model ({e})") from None
    inits = {t.name for t in m.graph.initializer}
    ins = [vi for vi in m.graph.input if vi.name not in inits]
    if len(ins) != 1:
        raise BackendError(f"{path}: expected one input (N, T, 3, H, W), found {len(ins)}")
    dims = [d.dim_param if d.HasField("dim_param") else int(d.dim_value) for d in ins[0].type.tensor_type.shape.dim]
    if len(dims) != 5 or not all(isinstance(d, int) for d in dims[-2:]):
        raise BackendError(f"{path}: input shape {dims} is not (N, T, 3, H, W) with fixed H and W")
    return dims
