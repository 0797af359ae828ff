"""The CUDA runtime with torch segments: the bridged EDVR (:mod:`vsr.backends.cuda.bridges`) in fp16 (TSA's
temporal attention kept fp32) or fp32, captured into CUDA graphs and replayed.

Implements :class:`vsr.backends.base.Backend`: ``infer(x float32 (N, T, 3, H, W)) -> (N, 3, 4H, 4W)`` as
``CudaOptions.output`` (uint8, float16 or float32).

* Graphs: ``prepare(h, w, batch)`` captures one graph per (bucket, planned batch) -- in ``thread_local`` mode,
  into one memory pool shared by all of them (:class:`GraphSet`); a run pads a partial batch to the planned one
  and replays that graph; it never captures (an unprepared bucket runs eagerly).  The pool holds one graph's
  working memory, which is what ``device_memory()`` measures for the memory plan.
* Per chunk of the planned batch the only copies are the input's upload and the output's download, from and
  to pinned host memory on a copy stream (:mod:`~vsr.backends.cuda.transfer`); every step between them runs on
  the backend's own stream (torch's convolutions, vsr's kernels through cupy's ExternalStream of it).

With ``device="cpu"`` the same runtime runs with the kernels on the CPU harness (the CPU emulation of CI): no
graphs, no streams, plain copies.
"""

from __future__ import annotations

import logging
import time
from contextlib import ExitStack, nullcontext

import numpy as np
import torch

from vsr.backends.base import ModelBackend
from vsr.backends.cuda.bridges import Timeline, bridge_model, keep_attention_fp32
from vsr.backends.cuda.tensors import kernel_cache_dir, open_tensor_launcher
from vsr.backends.cuda.transfer import OutputConversion, Transfers, quantise
from vsr.backends.options import CudaOptions
from vsr.report.sample import StepStats, StepTimes
from vsr.video.planes import PlaneFormat

log = logging.getLogger(__name__)
DTYPES = {"fp16": torch.float16, "fp32": torch.float32}


class CapturedRun:
    """One CUDA graph of ``program`` for a fixed input shape: a static float32 input and the static output.

    Captured into the shared ``pool`` in ``thread_local`` mode: another thread's CUDA calls during the capture
    (the decoder's, the encoder's) neither break it nor are recorded into it."""

    def __init__(self, program, shape: tuple[int, ...], device: torch.device, pool):
        self.input = torch.zeros(shape, dtype=torch.float32, device=device)
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):  # warm-up outside the capture: cuDNN picks its algorithms, pools grow
            for _ in range(2):
                program(self.input)
        torch.cuda.current_stream(device).wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, pool=pool, capture_error_mode="thread_local"):
            self.output = program(self.input)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        self.input.copy_(x)
        self.graph.replay()
        return self.output


class GraphSet:
    """The CUDA graphs of one backend: one per input shape, i.e. per (bucket, planned batch) -- partial batches
    are padded to the planned batch, so a run replays one graph -- all drawing on one memory pool.  ``capture``
    is called by ``prepare`` only; during a run ``get`` looks graphs up and never captures."""

    def __init__(self, program, device: torch.device):
        self.program = program
        self.device = device
        self.pool = None
        self.runs: dict[tuple[int, ...], CapturedRun] = {}

    def capture(self, shape: tuple[int, ...]) -> CapturedRun:
        run = self.runs.get(shape)
        if run is None:
            if self.pool is None:
                self.pool = torch.cuda.graph_pool_handle()
            run = self.runs[shape] = CapturedRun(self.program, shape, self.device, self.pool)
            torch.cuda.empty_cache()  # the warm-ups' cached blocks: the pool now holds what the graphs need
            log.info("captured a CUDA graph for %s (%d in the shared pool)", shape, len(self.runs))
        return run

    def get(self, shape: tuple[int, ...]) -> CapturedRun | None:
        return self.runs.get(shape)


class CudaTorchBackend(ModelBackend):
    """EDVR on torch segments bridged by vsr's CUDA kernels.  ``timings()``: ``upload`` (host padding and the
    copy's launch), ``run`` (on a GPU the launches: the work is asynchronous), ``download`` (waiting for the GPU
    and the copy back) and, for runs not captured in a graph, seconds per segment and per bridge kernel
    (``segment_<i>``, ``dcn:<module>``, ``shuffle:...``).

    ``infer`` returns ``options.output`` (uint8 RGB quantised as the post stage would, float16 or float32).
    Everything runs on a stream of the backend's own (the kernels follow torch's current stream onto it)."""

    name = "cuda"
    scale = 4

    def __init__(self, model, config, options: CudaOptions, device: torch.device):
        super().__init__(config, options.buckets)
        self.options = options
        self.device = device
        self.dtype = DTYPES[options.precision]
        self.launcher = open_tensor_launcher(options.launcher, device, graphs=options.cuda_graphs,
                                             cache_dir=kernel_cache_dir(device, options.cache_dir))
        self.timeline = Timeline(device)
        self.model, self.bridged = bridge_model(model.eval(), self.launcher, self.timeline, options.dcn_gemm)
        self.model = self.model.to(device=device, dtype=self.dtype)
        self.fp32_modules = keep_attention_fp32(self.model) if self.dtype != torch.float32 else []
        self.graphs_on = options.cuda_graphs and device.type == "cuda" and self.launcher.graph_safe
        if options.cuda_graphs and device.type == "cuda" and not self.graphs_on:
            log.info("no CUDA graphs: the %s launcher's kernels cannot be captured", self.launcher.name)
        self.timeline.enabled = not self.graphs_on
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self.graphs = GraphSet(self.program, device)
        self.io = Transfers(device)
        self.out = OutputConversion()
        self.planned: dict[tuple[int, int], int] = {}  # bucket -> the batch prepare() was given
        self._times = {"upload": 0.0, "run": 0.0, "download": 0.0, "build:capture": 0.0}
        self._steps = StepTimes(())
        log.info("cuda backend on %s, %s (fp32: %s), launcher %s, graphs %s, bridged %s", device,
                 options.precision, ", ".join(self.fp32_modules) or "-", self.launcher.name, self.graphs_on,
                 ", ".join(self.bridged))

    def program(self, x: torch.Tensor) -> torch.Tensor:
        """float32 ``(N, T, 3, H, W)`` on the device -> ``(N, 3, 4H, 4W)`` as ``options.output``."""
        return quantise(self.model(x.to(self.dtype)), self.options.output)

    def _on_device(self):
        # the pipeline calls from its own thread, whose current CUDA device is torch's default (0); the work goes
        # on the backend's own stream, which the kernels (cupy's ExternalStream of torch's current) follow
        if self.device.type != "cuda":
            return nullcontext()
        stack = ExitStack()
        stack.enter_context(torch.cuda.device(self.device))
        stack.enter_context(torch.cuda.stream(self.stream))
        return stack
    def timings(self) -> dict[str, float]:
        out = dict(self._times)
        out.update(self._steps.totals())
        return out

    def step_stats(self) -> dict[str, StepStats]:
        return self._steps.stats()

    @torch.inference_mode()
    def device_memory(self, sides: tuple[int, int] = (64, 128)) -> dict | None:
        """The GPU memory the model works in, for the run's memory plan (``vsr.pipeline.memory.DeviceMemory``):
        free memory now (``torch.cuda.mem_get_info`` plus torch's cached free blocks), and the working memory
        per LR pixel and its fixed part, measured here by two probe runs of what a run does (``sides`` squared,
        batch 1: the float32 input, the model, the output's conversion) as peaks of torch's allocator.  The CUDA
        graphs add no multiple of it: one per (bucket, planned batch), all in one pool that holds one run's working
        memory, the warm-ups' cached blocks given back after each capture (:class:`GraphSet`).  None on the CPU:
        the host memory plan applies as for every backend."""
        if self.device.type != "cuda":
            return None
        with self._on_device():
            return self._measure_memory(sides)

    def _measure_memory(self, sides: tuple[int, int]) -> dict:
        peaks = []
        for side in sides:
            torch.cuda.synchronize(self.device)
            base = torch.cuda.memory_allocated(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.program(torch.zeros((1, self.num_frame, 3, side, side), device=self.device))
            torch.cuda.synchronize(self.device)
            peaks.append(torch.cuda.max_memory_allocated(self.device) - base)
        per_pixel = max((peaks[1] - peaks[0]) / (sides[1] ** 2 - sides[0] ** 2), 1.0)
        fixed = max(peaks[0] - per_pixel * sides[0] ** 2, 0.0)
        free, _ = torch.cuda.mem_get_info(self.device)
        cached = torch.cuda.memory_reserved(self.device) - torch.cuda.memory_allocated(self.device)
        # the probes' blocks stay cached by torch's allocator: free for what follows (torch releases cached
        # blocks before it fails an allocation, also for a CUDA graph's private pool)
        return {"name": torch.cuda.get_device_name(self.device), "free_mb": (free + cached) / 2**20,
                "bytes_per_pixel": per_pixel, "fixed_mb": fixed / 2**20}

    @torch.inference_mode()
    def prepare(self, height: int, width: int, batch: int, phase=None) -> None:
        """Plan ``batch`` items per run for the bucket of ``height x width`` and capture its graph (or run once):
        every later run of that bucket replays this one graph, partial batches padded to ``batch``."""
        hb, wb = self.buckets.bucket(height, width)
        self.planned[(hb, wb)] = max(int(batch), 1)
        shape = (self.planned[(hb, wb)], self.num_frame, 3, hb, wb)
        with self._on_device():
            t0 = time.perf_counter()
            if phase is not None:
                phase("warming up")  # the capture runs the model once
            if self.graphs_on:
                self.graphs.capture(shape)
            else:
                self.program(torch.zeros(shape, device=self.device))
            self._times["build:capture"] += time.perf_counter() - t0

    @torch.inference_mode()
    def infer(self, x: np.ndarray) -> np.ndarray:
        with self._on_device():
            return self._infer(x)

    def _infer(self, x: np.ndarray) -> np.ndarray:
        x = self.check_input(x)
        n, _, _, h, w = x.shape
        hb, wb = self.buckets.bucket(h, w)
        step = self.planned.get((hb, wb))
        if step is None:  # not prepared: eager runs of the batch as it comes, never a capture mid-run
            step = n
            log.info("cuda backend: %dx%d was not prepared; running it without a graph", hb, wb)
        out, pending = None, []
        for k, i in enumerate(range(0, n, step)):
            chunk, slot = x[i:i + step], k % 2
            t0 = time.perf_counter()
            host = self.io.input_buffer(slot, (step, self.num_frame, 3, hb, wb))
            _pad_into(self.buckets, chunk, host)
            lr = self.io.upload(slot, host)
            t1 = time.perf_counter()
            graph = self.graphs.get(tuple(lr.shape)) if self.graphs_on else None
            y = graph(lr) if graph is not None else self.program(lr)
            y = self.out.on_device(y, chunk.shape[0], 4 * h, 4 * w)
            self.io.consumed(slot)
            pending.append((i, chunk.shape[0], slot, self.io.start_download(slot, y)))
            t2 = time.perf_counter()
            if len(pending) == 2:
                out = self._collect(out, n, h, w, *pending.pop(0))
            self._times["upload"] += t1 - t0
            self._times["run"] += t2 - t1
            self._record_steps(graph is None, t1)
        t3 = time.perf_counter()
        for item in pending:
            out = self._collect(out, n, h, w, *item)
        self._times["download"] += time.perf_counter() - t3
        return self.out.result(out, 4 * h, 4 * w)

    def _collect(self, out, n: int, h: int, w: int, i: int, m: int, slot: int, pinned) -> np.ndarray:
        return self.out.collect(out, n, i, m, self.io.finish(slot, pinned), 4 * h, 4 * w)

    def facts(self) -> dict:
        """:meth:`ModelBackend.facts`, the device and what is downloaded: the sink's planes (made there) or RGB."""
        what = f"planes {self.out.fmt.pix_fmt}" if self.out.fmt is not None else f"rgb {self.options.output}"
        return super().facts() | {"device": self.options.device or str(self.device), "download": what}

    def output_planes(self, fmt: PlaneFormat | None) -> bool:
        """From now on ``infer`` returns the planes of ``fmt`` made on the device (a PlaneBatch), unless
        ``options.device_planes`` is off (None: RGB again); whether it will."""
        self.out.fmt = fmt if self.options.device_planes else None
        return self.out.fmt is not None

    def _record_steps(self, eager: bool, t: float) -> None:
        if not eager or not self.timeline.enabled:
            return
        for name, seconds in self.timeline.durations().items():  # the steps ran one after another
            self._steps.add(name, t, t + seconds)
            t += seconds


def _pad_into(buckets, chunk: np.ndarray, host: torch.Tensor) -> None:
    """``chunk (m, T, 3, h, w)`` padded into the pinned ``host (step, T, 3, hb, wb)``; rows from m: zeros."""
    dst = host.numpy()
    m = chunk.shape[0]
    if m < dst.shape[0]:
        dst[m:] = 0.0
    buckets.pad_into(chunk, dst[:m])
