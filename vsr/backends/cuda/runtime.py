"""The CUDA runtime with torch segments: the bridged EDVR (:mod:`vsr.backends.cuda.bridges`) in fp16 or fp32,
captured once per input shape into a CUDA graph and replayed.

Implements :class:`vsr.backends.base.Backend`: ``infer(x float32 (N, T, 3, H, W)) -> float32 (N, 3, 4H, 4W)``.
Per call the only copies are the input's upload and the output's download; every step between them runs on
torch's stream (torch's convolutions, vsr's kernels through cupy on the same stream) on device tensors.
With ``device="cpu"`` the same runtime runs with the kernels on the CPU harness (the CPU emulation of CI).
"""

from __future__ import annotations

import logging
import time
from contextlib import nullcontext

import numpy as np
import torch

from vsr.backends.base import ModelBackend
from vsr.backends.cuda.bridges import Timeline, bridge_model
from vsr.backends.cuda.tensors import kernel_cache_dir, open_tensor_launcher
from vsr.backends.options import CudaOptions
from vsr.report.sample import StepStats, StepTimes

log = logging.getLogger(__name__)
DTYPES = {"fp16": torch.float16, "fp32": torch.float32}


class CapturedRun:
    """One CUDA graph of the bridged model for a fixed input shape: static input and output tensors."""

    def __init__(self, model, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device):
        self.input = torch.zeros(shape, dtype=dtype, device=device)
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):  # warm-up outside the capture: cuDNN picks its algorithms, pools grow
            for _ in range(2):
                model(self.input)
        torch.cuda.current_stream(device).wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.output = model(self.input)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        self.input.copy_(x)
        self.graph.replay()
        return self.output


class CudaTorchBackend(ModelBackend):
    """EDVR on torch segments bridged by vsr's CUDA kernels.  ``timings()``: ``run`` and, for runs not captured
    in a graph, seconds per segment and per bridge kernel (``segment_<i>``, ``dcn:<module>``, ``shuffle:...``)."""

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
        self.graphs_on = options.cuda_graphs and device.type == "cuda" and self.launcher.graph_safe
        if options.cuda_graphs and device.type == "cuda" and not self.graphs_on:
            log.info("no CUDA graphs: the %s launcher's kernels cannot be captured", self.launcher.name)
        self.timeline.enabled = not self.graphs_on
        self._captured: dict[tuple[int, ...], CapturedRun] = {}
        self._times = {"upload": 0.0, "run": 0.0, "download": 0.0, "build:capture": 0.0}
        self._steps = StepTimes(())
        log.info("cuda backend on %s, %s, launcher %s, graphs %s, bridged %s", device, options.precision,
                 self.launcher.name, self.graphs_on, ", ".join(self.bridged))

    def _on_device(self):
        # the pipeline calls from its own thread, whose current CUDA device is torch's default (0)
        return torch.cuda.device(self.device) if self.device.type == "cuda" else nullcontext()

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
        per LR pixel and its fixed part, measured here by two probe runs (``sides`` squared, batch 1) as
        peaks of torch's allocator.  None on the CPU: the host memory plan applies as for every backend."""
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
            self.model(torch.zeros((1, self.num_frame, 3, side, side), dtype=self.dtype, device=self.device))
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
    def prepare(self, height: int, width: int, batch: int) -> None:
        """Capture the graph of ``batch`` frames of the bucket of ``height x width`` (or one warm-up run)."""
        hb, wb = self.buckets.bucket(height, width)
        shape = (batch, self.num_frame, 3, hb, wb)
        with self._on_device():
            if self.graphs_on:
                self._graph(shape)
            else:
                self.model(torch.zeros(shape, dtype=self.dtype, device=self.device))

    def _graph(self, shape: tuple[int, ...]) -> CapturedRun:
        run = self._captured.get(shape)
        if run is None:
            t0 = time.perf_counter()
            run = self._captured[shape] = CapturedRun(self.model, shape, self.dtype, self.device)
            self._times["build:capture"] += time.perf_counter() - t0
            log.info("captured a CUDA graph for %s", shape)
        return run

    @torch.inference_mode()
    def infer(self, x: np.ndarray) -> np.ndarray:
        with self._on_device():
            return self._infer(x)

    def _infer(self, x: np.ndarray) -> np.ndarray:
        x = self.check_input(x)
        h, w = x.shape[-2:]
        xp, _ = self.buckets.pad(x)
        t0 = time.perf_counter()
        lr = torch.from_numpy(xp).to(self.device, non_blocking=True).to(self.dtype)
        t1 = time.perf_counter()
        y = self._graph(tuple(lr.shape))(lr) if self.graphs_on else self.model(lr)
        if self.device.type == "cuda":  # "run" is the GPU's time, not the launches'
            torch.cuda.current_stream(self.device).synchronize()
        t2 = time.perf_counter()
        if not self.graphs_on:
            t = t1  # the steps ran one after another from the upload's end
            for name, seconds in self.timeline.durations().items():
                self._steps.add(name, t, t + seconds)
                t += seconds
        out = y[:, :, : 4 * h, : 4 * w].float().cpu().numpy()
        t3 = time.perf_counter()
        self._times["upload"] += t1 - t0
        self._times["run"] += t2 - t1
        self._times["download"] += t3 - t2
        return out
