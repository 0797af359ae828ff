"""The model cases of ``scripts/gpu_check.py`` (``edvr_m_speed``, ``memory``): each (precision, LR size, batch) in
a backend of its own, everything it made freed after it (del, gc, ``torch.cuda.empty_cache``) and its error -- an
out-of-memory included -- recorded as that case's, so that one failing case never fails the next.

* :func:`speed_case`: ms per frame of the CUDA runtime through ``infer_stream`` on windows sliding by the batch
  (steady state: a call computes the features of its batch's new frames and keeps the rest), CUDA graphs, the
  default float16 download; with ``stream=False`` the per-window path (``--per-window-features``);
* :func:`peer_case`: the same windows on vsr's EDVR as ``--backend torch`` builds it (torchvision's DCN on a GPU,
  eager, NCHW; fp16 by ``.half()``), upload and download included: BasicSR's architecture, the issue's peer;
* :func:`steps_case`: ms per step of a run without graphs (``features``, ``segment_<i>``, ``dcn:...``, ``shuffle:...``);
* :func:`kernels_case`: the kernels of a few steady calls under torch's profiler, by name and by kind;
* :func:`memory_case`: the memory plan of the case (``device_memory()``'s measured probe, the kept features)
  against what the device gave during ``prepare`` and the runs (torch's peak reserved memory), and the
  reserved / allocated peak; :func:`shapes_case`: several shapes prepared on one backend, smallest first, their
  pool against the largest single graph plus every graph's statics (``GraphMemory.bound``).
"""

from __future__ import annotations

import dataclasses
import gc
import time
import warnings

import numpy as np
import torch

MB = 2**20


def isolated(gpu: bool, fn, *args, **kwargs) -> dict:
    """``fn(*args, **kwargs)`` (a dict), or ``{"error": ...}``; whatever it allocated is freed before returning."""
    try:
        return fn(*args, **kwargs)
    except Exception as e:  # recorded; the next case runs
        return {"error": f"{type(e).__name__}: {str(e)[:300]}"}
    finally:
        gc.collect()
        if gpu:
            torch.cuda.empty_cache()


def open_backend(weights: str, config: str, options):
    from vsr.backends import open_backend as _open

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _open(weights, config, options)


class Sliding:
    """Calls of ``backend`` on windows ``c .. c+batch-1`` of an endless clip, ``c`` advancing by ``batch`` per
    call, with their frame keys where the backend streams: each call's first ``2r`` windows' frames are kept.

    The windows' arrays are stacked before any call is timed (one per phase of the clip's cycle), as a run's
    batch stage stacks them in a thread of its own and as :func:`peer_case` stacks its input: a call is timed
    for what the infer stage does with a batch, not for making it (31 MB of copies a frame at 540x960)."""

    def __init__(self, backend, frames: np.ndarray, batch: int):
        self.backend, self.frames, self.batch = backend, frames, batch
        self.t = backend.num_frame
        self.c = self.t // 2  # the first window whose frames need no reflection
        self._arrays: dict[int, np.ndarray] = {}
        c = self.c
        while c % len(frames) not in self._arrays:
            self._arrays[c % len(frames)] = self._stack(c)
            c += batch

    def _rows(self, c: int) -> list[tuple[int, ...]]:
        r = self.t // 2
        return [tuple(range(centre - r, centre + r + 1)) for centre in range(c, c + self.batch)]

    def _stack(self, c: int) -> np.ndarray:
        n = len(self.frames)
        return np.ascontiguousarray(np.stack([self.frames[[f % n for f in row]] for row in self._rows(c)]))

    def __call__(self):
        return self.submit().result()

    def submit(self):
        """The next call queued (``backend.submit``): a Pending."""
        from vsr.backends.base import FrameKeys

        rows, x = self._rows(self.c), self._arrays[self.c % len(self.frames)]
        self.c += self.batch
        if not self.backend.keeps_features:
            return self.backend.submit(x)
        r = self.t // 2
        return self.backend.submit(x, FrameKeys(1, tuple(rows), (0,) * self.batch, keep_from=self.c - r))


def pipelined_s(ctx, call: Sliding, n: int) -> float:
    """Seconds per call of ``call`` when each is queued before the previous one is collected, as a run's infer
    stage does (the device runs call k+1 while the host collects call k), over ``n`` calls after a warm one."""
    call()
    ctx.sync()
    t0 = time.perf_counter()
    held = call.submit()
    for _ in range(n - 1):
        queued = call.submit()
        held.result()
        held = queued
    held.result()
    ctx.sync()
    return (time.perf_counter() - t0) / n


def cuda_options(ctx, precision: str, **kw):
    from vsr.backends import CudaOptions

    return CudaOptions(device=str(ctx.device), precision=precision, **kw)


def run_planes():
    """What a ``vsr upscale`` run to H.264 asks the backend for: 8-bit 4:2:0 BT.709 limited-range planes, made on
    the device (a 4K frame 12.4 MB)."""
    from vsr.video.colour import ColourSpec
    from vsr.video.planes import PlaneFormat

    return PlaneFormat.of("yuv420p", ColourSpec.of("yuv420p", 3840, 2160, 1, 1, 1, 1))


def speed_case(ctx, precision: str, h: int, w: int, batch: int, stream: bool = True, dcn_gemm: str = "torch") -> dict:
    """ms per frame as a run gets them (the sink's uint8 planes made on the device, downloaded, copied once on the
    host): one call at a time (``ms_per_frame``, as earlier windows measured), and each call queued before the
    previous one is collected, as a run's infer stage now does (``pipelined_ms_per_frame``); and the device time
    alone: the CUDA graphs' replays back to back, CUDA events around them.
    ``dcn_gemm``: the DCN's form (``CudaOptions.dcn_gemm``; "fused": the one-kernel Triton DCN)."""
    backend = open_backend("random", ctx.speed_config, cuda_options(ctx, precision, stream_features=stream,
                                                                    dcn_gemm=dcn_gemm))
    frames, _ = ctx.frames(backend.num_frame + 3, h, w)
    t0 = time.perf_counter()
    backend.prepare(h, w, batch, planes=run_planes())
    prepare_s = time.perf_counter() - t0
    call = Sliding(backend, frames, batch)
    s = ctx.timed(call)
    queued = pipelined_s(ctx, call, max(2 * ctx.repeats, 4))
    return {"ms_per_frame": 1e3 * s / batch, "fps": batch / s, "prepare_s": prepare_s, "graphs": backend.graphs_on,
            "pipelined_ms_per_frame": 1e3 * queued / batch,
            "features": "streaming" if backend.keeps_features else "per-window", "download": backend.facts()["download"],
            "memory_format": backend.layout.memory_format,
            "device_ms_per_frame": _device_ms(ctx, backend, h, w, batch)}


def _device_ms(ctx, backend, h: int, w: int, batch: int) -> float | None:
    """ms per frame of the bucket's graphs replayed back to back (features of ``batch`` new frames and the
    windows of ``batch`` items, or the whole model), no transfers: the device's own time.  None without graphs."""
    if not (ctx.gpu and backend.graphs_on):
        return None
    runs = [backend.graphs.get(spec.key) for spec in backend.graph_specs(*backend.buckets.bucket(h, w), batch)]
    if any(r is None for r in runs):
        return None
    stream = backend.stream
    with torch.cuda.device(ctx.device), torch.cuda.stream(stream):
        for r in runs:  # warm
            r.graph.replay()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        n = max(ctx.repeats, 3)
        start.record(stream)
        for _ in range(n):
            for r in runs:
                r.graph.replay()
        end.record(stream)
        end.synchronize()
    return start.elapsed_time(end) / n / batch


def peer_case(ctx, precision: str, h: int, w: int, batch: int) -> dict:
    """vsr's EDVR as ``--backend torch`` builds it (BasicSR's architecture; torchvision's DCN where it imports),
    eager, NCHW, each window computing its frames' features; fp16 by ``.half()`` (TSA's attention may overflow on
    random weights: the time is what is measured here)."""
    from vsr.backends import TorchOptions
    from vsr.model.dcn import _torchvision_deform_conv2d

    ref = open_backend("random", ctx.speed_config, TorchOptions(device=str(ctx.device), stream_features=False))
    model = ref.model.to(torch.float16 if precision == "fp16" else torch.float32)
    dtype = next(model.parameters()).dtype
    # BasicSR's EDVR takes sides that are multiples of 4 (its pyramid halves twice): 270 is run as 272, the
    # bucket vsr's runtime pads it to as well
    frames, _ = ctx.frames(ref.num_frame, -(-h // 4) * 4, -(-w // 4) * 4)
    x = np.ascontiguousarray(np.stack([frames] * batch))

    @torch.inference_mode()
    def run():
        y = model(torch.from_numpy(x).to(ctx.device).to(dtype))
        return y.to(torch.float16).cpu()

    s = ctx.timed(run)
    dcn = "torchvision" if ctx.gpu and _torchvision_deform_conv2d() is not None else "vsr reference (grid_sample)"
    return {"ms_per_frame": 1e3 * s / batch, "fps": batch / s, "dcn": dcn}


def steps_case(ctx, h: int, w: int, dcn_gemm: str = "torch") -> dict:
    """ms per step (p50), fp16, no graphs, batch 1, streaming: the steady state's calls (one new frame each)."""
    backend = open_backend("random", ctx.speed_config, cuda_options(ctx, "fp16", cuda_graphs=False,
                                                                    dcn_gemm=dcn_gemm))
    frames, _ = ctx.frames(backend.num_frame + 3, h, w)
    backend.prepare(h, w, 1)
    call = Sliding(backend, frames, 1)
    call()  # the first call computes T frames' features: not the steady state
    backend._steps = type(backend._steps)(())
    for _ in range(ctx.repeats + 1):
        call()
    return {k: 1e3 * v.p50_s for k, v in backend.step_stats().items()}


# What each kernel is, by its name: the first pattern that matches (on the CPU emulation the names are torch's
# operators). The DCN forms first; layout changes before convolutions (cuDNN's own NCHW <-> NHWC kernels are
# named cudnn::...); a convolution's implicit GEMM is a convolution.
KERNEL_KINDS = (("dcn fused (Triton)", r"dcn_fused"),
                ("dcn (vsr's kernels)", r"dcn_|deform"),
                ("pixel shuffle (vsr)", r"pixel_shuffle"),
                ("layout and copies", r"nchwtonhwc|nhwctonchw|transpose|copy|memcpy|memset|\bcat\b|concat|permute"
                                      r"|contiguous|_pad"),
                ("convolution", r"conv|fprop|dgrad|wgrad|implicit|winograd|cudnn"),
                ("matrix product", r"gemm|cutlass|cublas|addmm|matmul|\bmm\b"),
                ("elementwise", r"elementwise|vectorized|unrolled|leaky|sigmoid|relu|add|mul|div|sub|exp"),
                ("reduce", r"reduce|sum|mean|softmax"))


def kernel_kind(name: str) -> str:
    import re

    low = name.lower()
    return next((kind for kind, pattern in KERNEL_KINDS if re.search(pattern, low)), "other")


def kernel_table(events, frames: int, gpu: bool, top: int = 25) -> dict:
    """Where the device's time went, from a torch profiler's events over ``frames`` frames: the kernels (on the
    CPU emulation: torch's operators, by self time) by name, ms and calls per frame, the ``top`` longest, and
    the time by kind (:data:`KERNEL_KINDS`)."""
    from torch.autograd import DeviceType

    by_name: dict[str, list] = {}
    for evt in events:
        if gpu and evt.device_type != DeviceType.CUDA:
            continue
        us = evt.time_range.elapsed_us() if gpu else evt.self_cpu_time_total
        if us <= 0:
            continue
        row = by_name.setdefault(evt.name, [0.0, 0])
        row[0] += us
        row[1] += 1
    total = sum(us for us, _ in by_name.values())
    kinds: dict[str, float] = {}
    for name, (us, _) in by_name.items():
        kind = kernel_kind(name)
        kinds[kind] = kinds.get(kind, 0.0) + us
    rows = sorted(by_name.items(), key=lambda kv: -kv[1][0])[:top]
    return {"ms_per_frame": total / 1e3 / frames, "what": "kernels" if gpu else "CPU operators (self time)",
            "by_kind_ms_per_frame": {k: round(us / 1e3 / frames, 3) for k, us in
                                     sorted(kinds.items(), key=lambda kv: -kv[1])},
            "top": [{"name": name[:160], "kind": kernel_kind(name), "ms_per_frame": round(us / 1e3 / frames, 3),
                     "calls_per_frame": round(n / frames, 2), "share": round(us / total, 4) if total else None}
                    for name, (us, n) in rows]}


def kernels_case(ctx, h: int, w: int, dcn_gemm: str = "torch", frames: int = 3) -> dict:
    """The kernels of ``frames`` steady calls (batch 1, fp16, streaming, no graphs: the same kernels a graph
    replays) under torch's profiler: :func:`kernel_table`. What ``per_step_ms`` cannot say -- how much of a
    segment is convolutions, and how much layout changes, copies and elementwise passes between them."""
    from torch.profiler import ProfilerActivity, profile

    backend = open_backend("random", ctx.speed_config, cuda_options(ctx, "fp16", cuda_graphs=False,
                                                                    dcn_gemm=dcn_gemm))
    clip, _ = ctx.frames(backend.num_frame + 3, h, w)
    backend.prepare(h, w, 1)
    call = Sliding(backend, clip, 1)
    for _ in range(2):  # the first computes T frames' features; the second is the steady state's first
        call()
    ctx.sync()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if ctx.gpu else [])
    with profile(activities=activities) as prof:
        for _ in range(frames):
            call()
        ctx.sync()
    return {"lr": f"{h}x{w}", "dcn_gemm": dcn_gemm, "frames": frames,
            **kernel_table(prof.events(), frames, ctx.gpu)}


def memory_case(ctx, precision: str, h: int, w: int, batch: int) -> dict:
    """The plan of a run of this case on the GPU against what the device gave it (see the module's docstring)."""
    from vsr.pipeline.batches import kept_features
    from vsr.pipeline.memory import DeviceMemory

    backend = open_backend("random", ctx.speed_config, cuda_options(ctx, precision))
    probe = DeviceMemory(**backend.device_memory())
    kept = kept_features(backend.num_frame, batch, 1) * backend.feature_nbytes(h, w) / MB
    plan_mb = probe.item_mb(h * w, batch) + kept
    frames, _ = ctx.frames(backend.num_frame + 3, h, w)
    torch.cuda.synchronize(ctx.device)
    alloc0, reserved0 = torch.cuda.memory_allocated(ctx.device), torch.cuda.memory_reserved(ctx.device)
    torch.cuda.reset_peak_memory_stats(ctx.device)
    backend.prepare(h, w, batch)
    call = Sliding(backend, frames, batch)
    for _ in range(3):
        call()
    torch.cuda.synchronize(ctx.device)
    peak = torch.cuda.max_memory_allocated(ctx.device) - alloc0
    reserved = torch.cuda.max_memory_reserved(ctx.device) - reserved0
    return {"plan_mib": plan_mb, "probe": dataclasses.asdict(probe), "kept_features_mib": kept,
            "peak_allocated_mib": peak / MB, "peak_reserved_mib": reserved / MB,
            "within_plan": reserved <= plan_mb * MB, "reserved_over_peak": reserved / max(peak, 1),
            "graphs": backend.graphs.memory.to_dict(),
            "graph_grown_mib": {"/".join(map(str, k)): v / MB for k, v in backend.graphs.memory.grown.items()}}


def shapes_case(ctx, shapes: list[tuple[int, int, int]], singles: dict[str, float]) -> dict:
    """``shapes`` ``(h, w, batch)`` prepared on one fp16 backend in this order; the pool it ends with against
    ``GraphMemory.bound`` of the graphs kept, their working memory ``singles`` (MiB by graph key, each measured
    alone in a fresh backend by :func:`memory_case`)."""
    backend = open_backend("random", ctx.speed_config, cuda_options(ctx, "fp16"))
    for h, w, batch in shapes:
        backend.prepare(h, w, batch)
    memory = backend.graphs.memory
    working = {k: singles["/".join(map(str, k))] * MB for k in memory.statics if "/".join(map(str, k)) in singles}
    bound = memory.bound(working) if len(working) == len(memory.statics) else None
    return {"shapes": [list(s) for s in shapes], "kept": ["/".join(map(str, k)) for k in backend.graphs.runs],
            "pool_mib": memory.pool_nbytes / MB, "statics_mib": memory.statics_nbytes / MB,
            "bound_mib": None if bound is None else bound / MB,
            "within_bound": None if bound is None else memory.pool_nbytes <= bound * 1.05}
