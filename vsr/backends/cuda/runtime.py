"""The CUDA runtime with torch segments: the bridged EDVR (:mod:`vsr.backends.cuda.bridges`) in fp16 (TSA's
temporal attention kept fp32) or fp32, channels-last (:mod:`~vsr.backends.cuda.layout`), captured into CUDA
graphs and replayed.

Implements :class:`vsr.backends.base.Backend`: ``infer(x float32 (N, T, 3, H, W)) -> (N, 3, 4H, 4W)`` as
``CudaOptions.output`` (uint8, float16 or float32), and -- with ``stream_features``, the default -- ``infer_stream``:
each (frame, tile)'s features computed once and kept on the device for the windows that use them
(:mod:`~vsr.backends.cuda.feature_store`); ``infer`` then computes every frame of its windows the same way.

* Programs (:meth:`CudaTorchBackend.graph_specs`): the whole model (``window``), or ``features`` (per frame)
  and ``windows`` (the rest, on the windows' gathered features).
* Graphs: ``prepare(h, w, batch)`` captures the bucket's programs for the planned batch (:mod:`~vsr.backends.cuda.
  graphs`: one pool, largest first, what left the plan released); a run pads a partial batch to the planned one
  and replays; it never captures (an unprepared bucket runs eagerly).  ``device_memory()`` measures what a run
  takes on the device for the memory plan (:mod:`~vsr.backends.cuda.memory`).
* Per chunk of the planned batch the only copies are the input's upload and the output's download, from and
  to pinned host memory on a copy stream (:mod:`~vsr.backends.cuda.transfer`); every step between them runs on
  the backend's own stream (torch's convolutions, vsr's kernels through cupy's ExternalStream of it), with
  cuDNN's benchmark mode on (each shape's fastest algorithm, timed in the warm-up before its capture).

With ``device="cpu"`` the same runtime runs with the kernels on the CPU harness (the CPU emulation of CI): no
graphs, no streams, plain copies.
"""

from __future__ import annotations

import logging
import os
import time
from contextlib import ExitStack, contextmanager, nullcontext

import numpy as np
import torch

from vsr.backends.base import FrameKeys, ModelBackend, Pending
from vsr.backends.cuda import memory
from vsr.backends.cuda.bridges import DCNBridge, Timeline, bridge_model, keep_attention_fp32
from vsr.backends.cuda.graphs import GraphSet, GraphSpec, static_inputs
from vsr.backends.cuda.layout import Layout
from vsr.backends.cuda.feature_store import FeatureStore, pyramid_shapes, slot_nbytes
from vsr.backends.cuda.tensors import kernel_cache_dir, open_tensor_launcher
from vsr.backends.cuda.planes import OutputConversion, quantise
from vsr.backends.cuda.transfer import Transfers
from vsr.backends.features import FeatureSlots, keyless
from vsr.backends.cuda.options import CudaOptions
from vsr.report.sample import StepStats, StepTimes
from vsr.video.planes import PlaneFormat

log = logging.getLogger(__name__)
DTYPES = {"fp16": torch.float16, "fp32": torch.float32}
PROBE_SIDES = (128, 256)  # device_memory()'s probes, LR pixels squared


class CudaTorchBackend(ModelBackend):
    """EDVR on torch segments bridged by vsr's CUDA kernels.  ``timings()``: ``upload`` (host padding and the
    copy's launch), ``run`` (on a GPU the launches: the work is asynchronous), ``download`` (waiting for the GPU
    and the copy back) and, for runs not captured in a graph, seconds per segment and per bridge kernel
    (``features``, ``segment_<i>``, ``dcn:<module>``, ``shuffle:...``).

    ``infer`` returns ``options.output`` (uint8 RGB quantised as the post stage would, float16 or float32), or in a
    run the sink's planes made on the device (:meth:`prepare`'s ``planes``).
    Everything runs on a stream of the backend's own (the kernels follow torch's current stream onto it)."""

    name = "cuda"
    scale = 4

    def __init__(self, model, config, options: CudaOptions, device: torch.device):
        super().__init__(config, options.buckets)
        self.options = options
        self.device = device
        self.dtype = DTYPES[options.precision]
        self.layout = Layout(options.memory_format)  # the one place this backend's layout is decided
        self.keeps_features = options.stream_features
        kernels = kernel_cache_dir(device, options.cache_dir)
        self.launcher = open_tensor_launcher(options.launcher, device, graphs=options.cuda_graphs, cache_dir=kernels)
        if options.dcn_gemm in ("fused", "auto") and kernels is not None:  # Triton's kernels beside vsr's own
            from vsr.kernels.cuda.fused_dcn import cache_in

            cache_in(os.path.join(kernels, "triton"))
        self.timeline = Timeline(device)
        self.model, self.bridged = bridge_model(model.eval(), self.launcher, self.timeline, options.dcn_gemm,
                                                self.layout)
        self.model = self.model.to(device=device, dtype=self.dtype)
        self.fp32_modules = keep_attention_fp32(self.model) if self.dtype != torch.float32 else []
        self.graphs_on = options.cuda_graphs and device.type == "cuda" and self.launcher.graph_safe
        if options.cuda_graphs and device.type == "cuda" and not self.graphs_on:
            log.info("no CUDA graphs: the %s launcher's kernels cannot be captured", self.launcher.name)
        self.timeline.enabled = not self.graphs_on
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self.graphs = GraphSet(device)
        self.io = Transfers(device)
        self.out = OutputConversion()
        self.slots = FeatureSlots()
        self.store = FeatureStore(model.center_frame_idx)
        self.planned: dict[tuple[int, int], int] = {}  # bucket -> the batch prepare() was given
        self._slot = 0  # the transfers' slot of the next chunk (alternating across calls)
        self._owed: dict[int, Pending] = {}  # slot -> the Pending whose download from it is not collected yet
        self._times = {"upload": 0.0, "run": 0.0, "download": 0.0, "build:capture": 0.0}
        self._steps = StepTimes(())
        log.info("cuda backend on %s, %s (fp32: %s), %s, features %s, launcher %s, graphs %s, bridged %s", device,
                 options.precision, ", ".join(self.fp32_modules) or "-", self.layout.memory_format,
                 "kept" if self.keeps_features else "per window", self.launcher.name, self.graphs_on,
                 ", ".join(self.bridged))

    def program(self, x: torch.Tensor) -> torch.Tensor:
        """float32 ``(N, T, 3, H, W)`` on the device -> ``(N, 3, 4H, 4W)`` as ``options.output``."""
        return quantise(self.model(self.layout.frames(x, self.dtype)), self.options.output)

    def features_program(self, frames: torch.Tensor) -> list[torch.Tensor]:
        """float32 ``(M, 3, H, W)`` -> ``[RGB (M, 3, H, W), L1 (M, C, H, W), L2, L3]`` in the model's dtype and
        layout: what a slot of the store keeps."""
        rgb = self.layout.frames(frames, self.dtype)
        return [rgb, *self.model.features(rgb)]

    def windows_program(self, l1: torch.Tensor, l2: torch.Tensor, l3: torch.Tensor,
                        centre: torch.Tensor) -> torch.Tensor:
        """The windows' pyramids ``(N*T, C, h, w)`` and centre frames ``(N, 3, H, W)`` -> ``(N, 3, 4H, 4W)`` as
        ``options.output``."""
        return quantise(self.model.from_features([l1, l2, l3], centre), self.options.output)

    def graph_specs(self, hb: int, wb: int, batch: int) -> list[GraphSpec]:
        """The programs a run of ``batch`` items of the bucket ``hb x wb`` takes, with their static inputs: one
        definition for the graphs, the eager runs and the memory probes."""
        fmt, t = self.layout.torch_format, self.num_frame
        f32, plain = torch.float32, torch.contiguous_format
        if not self.keeps_features:
            return [GraphSpec(("window", batch, hb, wb), self.program, (((batch, t, 3, hb, wb), f32, plain),),
                              2 * batch * hb * wb)]
        levels = tuple(((batch * t, *shape), self.dtype, fmt) for shape in pyramid_shapes(self.config.num_feat,
                                                                                            hb, wb))
        return [GraphSpec(("windows", batch, hb, wb), self.windows_program,
                          levels + (((batch, 3, hb, wb), self.dtype, fmt),), 2 * batch * hb * wb),
                GraphSpec(("features", batch, hb, wb), self.features_program, (((batch, 3, hb, wb), f32, plain),),
                          batch * hb * wb)]

    def _on_device(self):
        # the pipeline calls from its own thread, whose current CUDA device is torch's default (0); the work goes
        # on the backend's own stream, which the kernels (cupy's ExternalStream of torch's current) follow
        if self.device.type != "cuda":
            return nullcontext()
        stack = ExitStack()
        stack.enter_context(torch.cuda.device(self.device))
        stack.enter_context(torch.cuda.stream(self.stream))
        stack.enter_context(_cudnn_benchmark())
        return stack

    def timings(self) -> dict[str, float]:
        out = dict(self._times)
        out.update(self._steps.totals())
        return out

    def step_stats(self) -> dict[str, StepStats]:
        return self._steps.stats()

    def facts(self) -> dict:
        """:meth:`ModelBackend.facts`, the layout, graphs, the device and what is downloaded: the sink's planes
        (made there) or RGB."""
        what = f"planes {self.out.fmt.pix_fmt}" if self.out.fmt is not None else f"rgb {self.options.output}"
        return {**super().facts(), "memory_format": self.layout.memory_format, "cuda_graphs": self.graphs_on,
                "device": _device_label(self.options.device or str(self.device), self.device), "download": what,
                "dcn": self.dcn_forms()}

    def dcn_forms(self) -> dict[str, str]:
        """Per bridged DCN, the form(s) its calls ran (``CudaOptions.dcn_gemm``; "auto": chosen per shape by
        timing), e.g. ``{"dcn:pcd_align.dcn_pack.l1": "fused"}``."""
        out = {}
        for module in self.model.modules():
            if isinstance(module, DCNBridge):
                chosen = sorted(set(module.forms.values()))
                out[module.step_name] = "/".join(chosen) if chosen else (
                    "torch" if module.gemm == "auto" else module.gemm)
        return out

    def feature_nbytes(self, height: int, width: int) -> int:
        """Bytes one kept (frame, tile) takes on the device: its RGB and pyramid in the model's dtype."""
        if not self.keeps_features:
            return 0
        return slot_nbytes(self.config.num_feat, *self.buckets.bucket(height, width), self.dtype.itemsize)

    @torch.inference_mode()
    def device_memory(self, sides: tuple[int, int] = PROBE_SIDES) -> dict | None:
        """The GPU memory a run takes, for the run's memory plan (``vsr.pipeline.memory.DeviceMemory``), measured
        on the device (:func:`vsr.backends.cuda.memory.device_memory`: what capturing -- or eagerly running --
        this backend's programs at ``sides`` squared took, released again).  None on the CPU: the host memory
        plan applies as for every backend."""
        if self.device.type != "cuda":
            return None
        with self._on_device():
            return memory.device_memory(self, sides)

    @torch.inference_mode()
    def prepare(self, height: int, width: int, batch: int, phase=None, planes: PlaneFormat | None = None) -> None:
        """Plan ``batch`` items per run for the bucket of ``height x width`` and capture its graphs (or run them
        once): every later run of that bucket replays them, partial batches padded to ``batch``.  ``planes``: from
        now on ``infer`` returns them, made on the device (a PlaneBatch), unless ``options.device_planes`` is off;
        None: RGB."""
        self.out.fmt = planes if self.options.device_planes else None
        hb, wb = self.buckets.bucket(height, width)
        self.planned[(hb, wb)] = max(int(batch), 1)
        specs = self.graph_specs(hb, wb, self.planned[(hb, wb)])
        with self._on_device():
            t0 = time.perf_counter()
            if phase is not None:
                phase("warming up")  # the capture runs the model once
            if self.graphs_on:
                self.graphs.plan((hb, wb), specs)
            else:
                for spec in specs:
                    spec.program(*self._inputs(spec))
            self._times["build:capture"] += time.perf_counter() - t0

    @torch.inference_mode()
    def infer(self, x: np.ndarray) -> np.ndarray:
        return self.submit(x).result()

    @torch.inference_mode()
    def infer_stream(self, x: np.ndarray, keys: FrameKeys) -> np.ndarray:
        return self.submit(x, keys).result()

    @torch.inference_mode()
    def submit(self, x: np.ndarray, keys: FrameKeys | None = None) -> Pending:
        """The batch queued on the device: its uploads, programs and downloads, all but the last chunk's download
        collected (a batch of the planned size is one chunk); the :class:`Pending`'s ``result()`` waits for that
        one.  Meanwhile the caller may queue the next batch, which the device runs right after this one: at most
        one batch's download is left uncollected per slot (a third submit collects the first's)."""
        with self._on_device():
            if not self.keeps_features:
                return self._infer(x)
            if keys is None:  # every frame of the windows computed once, as one stream of its own
                keys = keyless(np.shape(x)[0], self.num_frame)
            return self._infer_stream(x, keys)

    def _step(self, n: int, hb: int, wb: int) -> int:
        step = self.planned.get((hb, wb))
        if step is None:  # not prepared: eager runs of the batch as it comes, never a capture mid-run
            log.info("cuda backend: %dx%d was not prepared; running it without a graph", hb, wb)
        return step or n

    def _graph(self, spec: GraphSpec):
        """``spec``'s captured graph, where graphs are on (None: run it eagerly)."""
        return self.graphs.get(spec.key) if self.graphs_on else None

    def _inputs(self, spec: GraphSpec) -> tuple[torch.Tensor, ...]:
        """The static inputs of ``spec``'s graph, or (not captured) new ones."""
        run = self._graph(spec)
        if run is not None:
            return run.inputs
        return static_inputs(spec, self.device)

    def _call(self, spec: GraphSpec, inputs: tuple[torch.Tensor, ...]):
        """``spec``'s program on ``inputs``: its graph replayed (inputs copied in unless they are its own)."""
        run = self._graph(spec)
        self.timeline.reset()
        if run is None:
            return spec.program(*inputs)
        return run() if inputs is run.inputs else run(*inputs)

    def _infer(self, x: np.ndarray) -> np.ndarray:
        x = self.check_input(x)
        n, _, _, h, w = x.shape
        hb, wb = self.buckets.bucket(h, w)
        step = self._step(n, hb, wb)
        (spec,) = self.graph_specs(hb, wb, step)

        def compute(slot: int, i: int, m: int) -> torch.Tensor:
            t0 = time.perf_counter()
            host = self.io.input_buffer(slot, spec.inputs[0][0])
            _pad_into(self.buckets, x[i:i + m], host)
            lr = self.io.upload(slot, host)
            t1 = time.perf_counter()
            y = self._call(spec, (lr,))
            self.io.consumed(slot)
            self._times["upload"] += t1 - t0
            self._times["run"] += time.perf_counter() - t1
            self._record_steps(spec, t1)
            return y

        return self._chunks(n, h, w, step, compute)

    def _infer_stream(self, x: np.ndarray, keys: FrameKeys) -> np.ndarray:
        x = self.check_input(x)
        self.check_keys(x, keys)
        n, _, _, h, w = x.shape
        hb, wb = self.buckets.bucket(h, w)
        step = self._step(n, hb, wb)
        windows, features = self.graph_specs(hb, wb, step)
        call = self.slots.begin(keys, (hb, wb))
        try:
            self._features(features, x, call.new)

            def compute(slot: int, i: int, m: int) -> torch.Tensor:
                t1 = time.perf_counter()
                inputs = self._inputs(windows)
                self.store.gather(call.slots[i:i + m], inputs)
                y = self._call(windows, inputs)
                self._times["run"] += time.perf_counter() - t1
                self._record_steps(windows, t1)
                return y

            return self._chunks(n, h, w, step, compute)
        except BaseException:
            self.slots.forget()
            raise
        finally:
            self.slots.end(keys)

    def _features(self, spec: GraphSpec, x: np.ndarray, new: list[tuple[int, int, int]]) -> None:
        """The features program on the frames ``new`` names, its batch at a time (rows beyond them zeros); each
        frame's features into its slot of the store."""
        shape = spec.inputs[0][0]
        for k, i in enumerate(range(0, len(new), shape[0])):
            rows, slot = new[i:i + shape[0]], k % 2
            t0 = time.perf_counter()
            host = self.io.input_buffer(slot, shape)
            dst = host.numpy()
            for r, (_, n, t) in enumerate(rows):
                self.buckets.pad_into(x[n, t], dst[r])
            dst[len(rows):] = 0.0
            frames = self.io.upload(slot, host)
            t1 = time.perf_counter()
            outs = self._call(spec, (frames,))
            self.store.keep([(s, r) for r, (s, _, _) in enumerate(rows)], outs)
            self.io.consumed(slot)
            self._times["upload"] += t1 - t0
            self._times["run"] += time.perf_counter() - t1
            self._record_steps(spec, t1)

    def _chunks(self, n: int, h: int, w: int, step: int, compute) -> Pending:
        """``compute(slot, i, m)`` (the device output of items ``i:i+m``) per chunk of ``step`` items, each output
        downloaded while the next chunk computes; the last chunk's download is left for the returned Pending.
        Slots alternate across calls; a slot's download still owed to an earlier Pending is collected into it
        before the slot's pinned buffer is written again."""
        state = {"out": None}
        pending = []
        for i in range(0, n, step):
            m, slot = min(step, n - i), self._slot
            self._slot = 1 - self._slot
            y = self.out.on_device(compute(slot, i, m), m, 4 * h, 4 * w)
            owed = self._owed.pop(slot, None)
            if owed is not None:
                owed.result()
            pending.append((i, m, slot, self.io.start_download(slot, y)))
            if len(pending) == 2:
                self._collect(state, n, h, w, *pending.pop(0))

        def finish():
            t3 = time.perf_counter()
            for item in pending:
                self._collect(state, n, h, w, *item)
                if self._owed.get(item[2]) is result:
                    del self._owed[item[2]]
            self._times["download"] += time.perf_counter() - t3
            return self.out.result(state["out"], 4 * h, 4 * w)

        result = Pending(finish)
        for item in pending:
            self._owed[item[2]] = result
        return result

    def _collect(self, state: dict, n: int, h: int, w: int, i: int, m: int, slot: int, pinned) -> None:
        state["out"] = self.out.collect(state["out"], n, i, m, self.io.finish(slot, pinned), 4 * h, 4 * w)

    def _record_steps(self, spec: GraphSpec, t: float) -> None:
        if self._graph(spec) is not None or not self.timeline.enabled:
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


def _device_label(name: str, device: torch.device) -> str:
    """``name``, and which GPUs this process was shown (a ``vsr jobs run --devices`` worker sees its one GPU as
    cuda:0): a report names the machine's GPU."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return f"{name} (CUDA_VISIBLE_DEVICES={visible})" if device.type == "cuda" and visible else name


@contextmanager
def _cudnn_benchmark():
    """cuDNN times its algorithms for each new shape (in the warm-up before a capture: the capture then finds them
    chosen) and keeps the fastest, rather than guessing from heuristics."""
    saved = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = True
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = saved
