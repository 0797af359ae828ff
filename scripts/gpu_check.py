"""Verify and measure every GPU part of vsr in one command (<= 8 minutes on an H100, no network).

    python scripts/gpu_check.py --out DIR [--data DIR] [--device cuda|cpu] [--quick] [--budget-s 540]

Writes ``DIR/gpu_check.json`` after every check (atomically: a run killed at its limit still returns every check
that finished; ``complete`` says whether all ran) -- each check's status ok / failed / skipped, seconds, results,
the error and its traceback -- and ``DIR/gpu_check.log``, and prints a short table.  A failing check is recorded
and the next one runs, so one surprise does not cost the lease; a check whose estimate exceeds the time left is
skipped, saying so, and the checks before ``memory`` and ``e2e`` leave those their estimated time.

Checks (each a function below), in this order, the figures a window must bring back first:
  versions      device, driver, torch, CUDA, cuDNN, cupy, NVRTC, torchvision, onnxruntime, vsr
  edvr_m_speed  EDVR-M ms/frame at LR 270x480 and 540x960, fp16 (batch 1, 4) and fp32 (batch 1, 2), CUDA graphs,
                each frame's features once, channels-last, measured as a run gets frames (the sink's uint8 planes
                made on the device, downloaded, one host copy; one call at a time, and pipelined as a run's
                infer stage queues them: pipelined_ms_per_frame), and the device time alone (the graphs replayed
                back to back); each case in a fresh backend, and the same windows on the peer (EDVR as --backend
                torch builds it: torchvision's DCN, eager); the per-window path once; ms per step (features,
                segments, bridge kernels) without graphs (scripts/gpu_model.py), and the kernels of 3 steady
                frames under torch's profiler (kernels: ms per frame by kind -- convolutions, layout changes and
                copies, elementwise passes... -- and the 25 longest); these name dcn_gemm 'torch' (the figures of
                earlier windows); then, where Triton imports, the fp16 cases with the fused one-kernel DCN
                (fused_dcn: ms, device ms, over the torch form's, the seconds its tiles took to compile) and its
                ms per step and kernels
  memory        per case, fresh: the memory plan (the backend's measured probe, the kept features) against the
                peak the device gave (reserved), reserved <= 1.25x the allocated peak; the shapes prepared on one
                backend against the largest graph and every graph's statics
  e2e           vsr upscale --backend cuda of the 960x540 clip (200 frames) to 3840x2160: the default weights
                (x264 medium, then --preset veryfast) and EDVR-M; each run's fps (after its first 60 frames to the
                end, the encoder's flush included), stage table, bottleneck, encoder, and its fps over the infer
                stage's own rate (e2e_over_inference) and over the slower of that and the encoder's own rate
                (e2e_over_bottleneck); targets with the default weights: >= 8 fps, >= 0.9 of the bottleneck
  backends      --backend cuda against --backend torch on real frames with the shipped weights (default, real),
                fp32 (TF32 off) and fp16: no inf/NaN, max |diff| relative to the output <= 1e-4 in fp32, Y-PSNR
                >= 60 dB in fp16, each frame's features once against every window's (max |diff|), and each
                module's largest |output| in fp16 (a layer near 65504 would overflow); on a GPU the same with
                the fused DCN
  kernel_accuracy  vsr's DCN (sampling kernel + GEMM, both GEMMs, NCHW and channels-last; the fused kernel) against
                torchvision.ops.deform_conv2d at EDVR-M shapes (64 channels, 8 offset groups, 5 frames) up to LR
                540x960: relative L2 error, fp32 <= 1e-4, fp16 <= 1e-2 (no torchvision, as on the CPU: vsr's numba
                CPU DCN is the reference)
  upscale       vsr upscale --backend cuda on a real clip: fps, and the frames against --backend torch (<= 1/255)
  kernel_speed  the same shapes: ms of vsr's DCN (NCHW, channels-last, fused) and of torchvision's, fp16 and fp32

``--data DIR`` holds the real inputs (``scripts/gpu_carry.py`` packs it): ``frames/*.png`` (LR frames),
``clip.mp4`` and ``e2e.mp4`` (the 960x540 clip).  Without it, frames are synthesised (recorded as such).
``--device cpu --quick`` runs every check on the CPU emulation at tiny sizes with EDVR-tiny: CI runs it
(tests/scripts/test_gpu_check.py) so it cannot rot.  A whole lent window in one call: scripts/gpu_window.sh.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

log = logging.getLogger("gpu_check")
# the figures a window must bring back first (issue 36): a killed or slow run still returns them
CHECKS = ("versions", "edvr_m_speed", "memory", "e2e", "backends", "kernel_accuracy", "upscale", "kernel_speed")
RESERVED = ("memory", "e2e")  # time kept for these while the checks before them run (Context.left)


class Context:
    """What every check gets: the device, the sizes of this mode, the real inputs, a clock."""

    def __init__(self, args):
        self.device = torch.device(args.device)
        self.gpu = self.device.type == "cuda"
        self.quick = args.quick
        self.data = Path(args.data) if args.data else None
        self.out = Path(args.out)
        self.deadline = time.monotonic() + args.budget_s
        self.reserve = 0.0
        self.fused = _fused_missing() is None  # the one-kernel Triton DCN can run: its cases are added
        # (LR sizes, batches, repeats, EDVR config for speed, shipped weights) per mode
        if args.quick:
            self.sizes, self.batches, self.repeats = [(16, 16)], {"fp16": [1], "fp32": [1]}, 1
            self.speed_config, self.weights, self.dcn_sizes = "edvr-tiny", [("random", "edvr-tiny")], [(8, 12)]
        else:  # batch 4 in fp32 takes most of an 80 GB card (issue 30): batch 2
            self.sizes, self.batches, self.repeats = [(270, 480), (540, 960)], {"fp16": [1, 4], "fp32": [1, 2]}, 5
            self.speed_config, self.dcn_sizes = "edvr-m", [(270, 480), (540, 960)]
            self.weights = [("default", None), ("real", None)]

    def left(self) -> float:
        """Seconds this check may still start work in: the budget's rest less what the figures still to come
        need (``reserve``, set by :func:`run_checks`), so a slow check never crowds out ``e2e``."""
        return self.deadline - time.monotonic() - self.reserve

    def until_deadline(self) -> float:
        """Seconds a child process may run: to the budget's end (at least a minute), so none outlives the call."""
        return max(60.0, self.deadline - time.monotonic())

    def sync(self) -> None:
        if self.gpu:
            torch.cuda.synchronize(self.device)

    def frames(self, n: int, height: int, width: int) -> tuple[np.ndarray, str]:
        """``n`` LR frames ``(n, 3, h, w)`` in [0, 1]: the real ones resized, or synthesised (never zeros)."""
        import cv2

        files = sorted((self.data / "frames").glob("*.png")) if self.data else []
        if not files:
            rng = np.random.default_rng(0)
            base = cv2.GaussianBlur(rng.random((height, width, 3), dtype=np.float32), (0, 0), 2.0)
            return np.stack([np.roll(base, k, axis=1).transpose(2, 0, 1) for k in range(n)]), "synthetic"
        out = []
        for k in range(n):
            img = cv2.cvtColor(cv2.imread(str(files[k % len(files)])), cv2.COLOR_BGR2RGB)
            out.append(cv2.resize(img, (width, height), interpolation=cv2.INTER_AREA).transpose(2, 0, 1) / 255.0)
        return np.stack(out).astype(np.float32), f"{len(files)} frames of {self.data / 'frames'}"

    def timed(self, fn, repeats: int | None = None) -> float:
        """Median seconds of ``fn()`` over ``repeats`` runs after one warm-up (device work synchronised)."""
        fn()
        self.sync()
        times = []
        for _ in range(repeats or self.repeats):
            t0 = time.perf_counter()
            fn()
            self.sync()
            times.append(time.perf_counter() - t0)
        return float(np.median(times))


def _fused_compile_seconds() -> dict[str, float]:
    """Seconds this process spent compiling the fused DCN's tiles side by side, per kernel variant (none on the
    CPU: the interpreter compiles nothing)."""
    from vsr.kernels.cuda.fused_dcn import compile_seconds

    return {variant: round(s, 2) for variant, s in compile_seconds.items()}


def _fused_missing() -> str | None:
    from vsr.kernels.cuda.fused_dcn import available

    return available()


def _open(weights: str, config: str | None, options):
    from vsr.backends import open_backend

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return open_backend(weights, config, options)


def check_versions(ctx: Context) -> dict:
    import onnxruntime

    import vsr

    out = {"python": platform.python_version(), "torch": torch.__version__, "torch_cuda": torch.version.cuda,
           "onnxruntime": onnxruntime.__version__, "vsr": vsr.__version__, "device": str(ctx.device)}
    if ctx.gpu:
        props = torch.cuda.get_device_properties(ctx.device)
        out.update(name=props.name, capability=f"{props.major}.{props.minor}", sms=props.multi_processor_count,
                   memory_mib=props.total_memory >> 20, cudnn=torch.backends.cudnn.version())
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True)
        out["driver"] = smi.stdout.strip() or smi.stderr.strip()[:100]
    for name in ("torchvision", "cupy", "tensorrt", "pycuda", "triton", "av"):
        try:
            out[name] = __import__(name).__version__
        except Exception as e:  # absent or broken: recorded, not fatal
            out[name] = f"absent ({type(e).__name__})"
    try:
        import cupy

        out["nvrtc"] = ".".join(map(str, cupy.cuda.nvrtc.getVersion()))
        from vsr.kernels.cuda.launch import find_cuda_include

        out["cuda_fp16_h"] = str(find_cuda_include())
    except Exception as e:
        out["nvrtc"] = f"absent ({type(e).__name__})"
    return out


def _dcn_case(ctx: Context, h: int, w: int, dtype, seed: int):
    """EDVR-M's L1 DCN at LR ``h x w``: 5 frames, 64 channels, 8 offset groups, offsets of a few pixels."""
    g = torch.Generator().manual_seed(seed)
    c, frames = (16, 2) if ctx.quick else (64, 5)
    x = torch.randn(frames, c, h, w, generator=g)
    offset = torch.randn(frames, 2 * 8 * 9, h, w, generator=g) * 2.0
    mask = torch.rand(frames, 8 * 9, h, w, generator=g)
    weight = torch.randn(c, c, 3, 3, generator=g) * 0.05
    bias = torch.randn(c, generator=g) * 0.1
    return [t.to(ctx.device, dtype) for t in (x, offset, mask, weight, bias)]


def _vsr_dcn(ctx: Context, launcher, args, gemm: str, layout: str = "contiguous"):
    """vsr's DCN on ``args`` (NCHW); channels-last: on their (N, H, W, C) copies, the output seen as NCHW."""
    from vsr.backends.cuda.dcn import deform_conv_nhwc_torch, deform_conv_torch
    from vsr.kernels.deform_conv import DeformConvGeometry

    x, offset, mask, weight, bias = args
    geom = DeformConvGeometry.from_attrs(tuple(x.shape), tuple(weight.shape), pads=[1] * 4, offset_group=8)
    if gemm == "fused":  # the one-kernel Triton DCN, channels-last, its weights laid out once
        from vsr.kernels.cuda.fused_dcn import deform_conv_fused, fused_weight

        xn, on, mn = (t.permute(0, 2, 3, 1).contiguous() for t in (x, offset, mask))
        wf = fused_weight(weight, geom)
        return lambda: deform_conv_fused(geom, xn, wf, on, mn, bias).permute(0, 3, 1, 2)
    if layout == "contiguous":
        return lambda: deform_conv_torch(launcher, geom, x, weight, offset, mask, bias, gemm=gemm)
    xn, on, mn, wn = (t.permute(0, 2, 3, 1).contiguous() for t in (x, offset, mask, weight))
    return lambda: deform_conv_nhwc_torch(launcher, geom, xn, wn, on, mn, bias, gemm=gemm).permute(0, 3, 1, 2)


def _reference_dcn(args):
    """torchvision's deform_conv2d in fp32; without torchvision, vsr's numba CPU DCN (the split plan's)."""
    x, offset, mask, weight, bias = (t.float() for t in args)
    try:
        from torchvision.ops import deform_conv2d

        return lambda: deform_conv2d(x, offset, weight, bias, padding=(1, 1), mask=mask), "torchvision"
    except ImportError:
        from vsr.kernels.deform_conv import deform_conv

        arrays = [t.cpu().numpy() for t in (x, weight, offset, bias, mask)]
        return (lambda: torch.from_numpy(deform_conv(*arrays[:4], mask=arrays[4], pads=[1] * 4, offset_group=8)),
                "vsr numba CPU DCN")


def check_kernel_accuracy(ctx: Context) -> dict:
    from vsr.backends.cuda.tensors import open_tensor_launcher

    launcher = open_tensor_launcher("auto", ctx.device)
    rows, worst = [], {}
    for h, w in ctx.dcn_sizes:
        for dtype, limit in ((torch.float32, 1e-4), (torch.float16, 1e-2)):
            args = _dcn_case(ctx, h, w, dtype, seed=h + w)
            ref_fn, ref_name = _reference_dcn(args)
            with torch.inference_mode():
                want = ref_fn().to(ctx.device).double()
                for gemm, layout in (("torch", "contiguous"), ("kernel", "contiguous"), ("torch", "channels_last"),
                                     ("kernel", "channels_last"), *([("fused", "channels_last")] * ctx.fused)):
                    got = _vsr_dcn(ctx, launcher, args, gemm, layout)().double()
                    rel = float((got - want).norm() / want.norm())
                    ok = math.isfinite(rel) and rel <= limit
                    rows.append({"lr": f"{h}x{w}", "dtype": str(dtype)[6:], "gemm": gemm, "layout": layout,
                                 "rel_l2": rel, "limit": limit, "ok": ok, "reference": ref_name})
                    worst[str(dtype)[6:]] = max(worst.get(str(dtype)[6:], 0.0), rel)
            del args, want
    if not all(r["ok"] for r in rows):
        raise AssertionError(f"DCN beyond tolerance: {[r for r in rows if not r['ok']]}")
    return {"cases": rows, "worst_rel_l2": worst, "launcher": launcher.name}


def check_kernel_speed(ctx: Context) -> dict:
    from vsr.backends.cuda.tensors import open_tensor_launcher

    launcher = open_tensor_launcher("auto", ctx.device)
    rows = []
    for h, w in ctx.dcn_sizes:
        for dtype in (torch.float16, torch.float32):
            args = _dcn_case(ctx, h, w, dtype, seed=1)
            row = {"lr": f"{h}x{w}", "dtype": str(dtype)[6:]}
            with torch.inference_mode():
                for gemm in ("torch", "kernel"):
                    row[f"vsr_{gemm}_ms"] = 1e3 * ctx.timed(_vsr_dcn(ctx, launcher, args, gemm))
                row["vsr_nhwc_torch_ms"] = 1e3 * ctx.timed(_vsr_dcn(ctx, launcher, args, "torch", "channels_last"))
                if ctx.fused:  # the first call (untimed) autotunes the tile
                    row["vsr_fused_ms"] = 1e3 * ctx.timed(_vsr_dcn(ctx, launcher, args, "fused", "channels_last"))
                    row["fused_over_nhwc_torch"] = row["vsr_fused_ms"] / row["vsr_nhwc_torch_ms"]
                try:
                    from torchvision.ops import deform_conv2d

                    x, offset, mask, weight, bias = args
                    row["torchvision_ms"] = 1e3 * ctx.timed(
                        lambda: deform_conv2d(x, offset, weight, bias, padding=(1, 1), mask=mask))
                    row["vsr_over_torchvision"] = row["vsr_torch_ms"] / row["torchvision_ms"]
                    row["vsr_nhwc_over_torchvision"] = row["vsr_nhwc_torch_ms"] / row["torchvision_ms"]
                except ImportError:
                    row["torchvision_ms"] = None
                row.update(_bridge_kernel_ms(ctx, launcher, args))
            rows.append(row)
    return {"cases": rows, "repeats": ctx.repeats}


def _bridge_kernel_ms(ctx: Context, launcher, args) -> dict:
    """Device ms per call of the channels-last bridge kernels alone: the DCN sampling kernel on one column chunk
    (sized to the device's L2) reading conv_offset's record with the mask's logits (the sigmoid fused), and the
    NHWC PixelShuffle + LeakyReLU of upconv1's output (4C channels, sub-pixel-major) at these frames."""
    from vsr.kernels.cuda.ops import chunk_for, deform_im2col_nhwc, pixel_shuffle_lrelu_nhwc
    from vsr.kernels.deform_conv import DeformConvGeometry

    x, offset, mask, weight, _ = args
    geom = DeformConvGeometry.from_attrs(tuple(x.shape), tuple(weight.shape), pads=[1] * 4, offset_group=8)
    logits = torch.randn(mask.shape, generator=torch.Generator().manual_seed(2)).to(mask)
    record = torch.cat([offset, logits], dim=1).permute(0, 2, 3, 1).contiguous()  # as conv_offset gives it
    xn = x.permute(0, 2, 3, 1).contiguous()
    chunk = chunk_for(launcher, geom, xn, None)
    cols = launcher.empty((chunk * geom.taps * geom.c,), x.dtype)
    n, c, h, w = x.shape
    up = torch.randn((n, h, w, 4 * c), generator=torch.Generator().manual_seed(3)).to(x)
    return {"dcn_sampling_chunk_px": chunk,
            "dcn_sampling_ms": 1e3 * ctx.timed(lambda: deform_im2col_nhwc(launcher, geom, xn, record, None, cols, 0,
                                                                          chunk, mask_logits=True)),
            "shuffle_nhwc_ms": 1e3 * ctx.timed(lambda: pixel_shuffle_lrelu_nhwc(launcher, up, 2, negative_slope=0.1,
                                                                                subpixel_major=True))}


def _module_peaks(backend, x: np.ndarray) -> dict[str, float]:
    """Largest |output| of every leaf module of the backend's fp16 model on ``x``, the largest first."""
    peaks: dict[str, float] = {}
    hooks = []
    for name, module in backend.model.named_modules():
        if not list(module.children()):
            def hook(mod, args, out, name=name):
                if isinstance(out, torch.Tensor) and out.is_floating_point():
                    peaks[name] = max(peaks.get(name, 0.0), float(out.detach().abs().float().max()))
            hooks.append(module.register_forward_hook(hook))
    backend.graphs_on, saved = False, backend.graphs_on
    try:
        backend.infer(x)
    finally:
        backend.graphs_on = saved
        for h in hooks:
            h.remove()
    return dict(sorted(peaks.items(), key=lambda kv: -kv[1])[:8])


class CheckFailed(AssertionError):
    """A check's verdict with the results it measured all the same (``run_checks`` records both)."""

    def __init__(self, message: str, result: dict):
        super().__init__(message)
        self.result = result


def check_backends(ctx: Context) -> dict:
    """cuda (fp32 TF32 off: max |diff| / max |torch| <= 1e-4; fp16: Y-PSNR >= 60 dB) against torch on real frames;
    each frame's features once (the default) against every window computing its own, max |diff|."""
    from vsr.backends import CudaOptions, TorchOptions

    h, w = (16, 16) if ctx.quick else (144, 176)
    results = []
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        for weights, config in ctx.weights:
            ref = _open(weights, config, TorchOptions(device=str(ctx.device)))
            t, n = ref.num_frame, 1 if ctx.quick else 2
            frames, source = ctx.frames(t + n - 1, h, w)
            x = np.stack([frames[i:i + t] for i in range(n)])  # n windows of consecutive real frames
            ref = ref.infer(x)
            for precision in ("fp32", "fp16"):
                results.append(_backend_case(ctx, weights, config, precision, x, ref, source))
            # the one-kernel Triton DCN in the model (on the CPU emulation: tests/backends/test_cuda_backend.py)
            for precision in ("fp32", "fp16") if ctx.fused and ctx.gpu else ():
                results.append(_backend_case(ctx, weights, config, precision, x, ref, source, dcn_gemm="fused"))
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved
    bad = [r for r in results if not r["ok"]]
    if bad:
        raise CheckFailed(f"cuda against torch beyond tolerance: {bad}", {"cases": results})
    return {"cases": results}


def _backend_case(ctx: Context, weights, config, precision: str, x: np.ndarray, ref: np.ndarray, source,
                  dcn_gemm: str = "torch") -> dict:
    from vsr.backends import CudaOptions
    from vsr.quality.metrics import psnr, rgb_to_y

    n, _, _, h, w = x.shape
    got = {}
    for stream in (True, False):
        backend = _open(weights, config, CudaOptions(device=str(ctx.device), precision=precision, output="float32",
                                                     stream_features=stream, dcn_gemm=dcn_gemm))
        backend.prepare(h, w, n)
        got[stream] = backend.infer(x)
    to255 = [np.clip(a, 0, 1).transpose(0, 2, 3, 1) * 255.0 for a in (got[True], ref)]
    row = {"weights": config or weights, "precision": precision, "dcn_gemm": dcn_gemm,
           "finite": bool(np.isfinite(got[True]).all()),
           "max_abs": float(np.abs(got[True] - ref).max()), "frames": source,
           "memory_format": backend.layout.memory_format, "features": "streaming",
           "y_psnr_vs_torch": min(psnr(rgb_to_y(a), rgb_to_y(b)) for a, b in zip(*to255)),
           "stream_vs_window_max_abs": float(np.abs(got[True] - got[False]).max())}
    row["max_abs_relative"] = row["max_abs"] / float(np.abs(ref).max())
    row["ok"] = row["finite"] and (row["max_abs_relative"] <= 1e-4 if precision == "fp32"
                                   else row["y_psnr_vs_torch"] >= 60.0)
    if precision == "fp16":
        row["largest_outputs"] = _module_peaks(backend, x)
        row["near_fp16_limit"] = [k for k, v in row["largest_outputs"].items() if v > 32768]
    return row


def check_edvr_m_speed(ctx: Context) -> dict:
    """Each (precision, size, batch) in a fresh backend, and on the peer in the same run (scripts/gpu_model.py)."""
    from gpu_model import isolated, kernels_case, peer_case, speed_case, steps_case

    rows, peers = [], []
    for precision in ("fp16", "fp32"):
        for h, w in ctx.sizes:
            for batch in ctx.batches[precision]:
                case = {"lr": f"{h}x{w}", "precision": precision, "batch": batch}
                if ctx.left() < 45 and not ctx.quick:
                    rows.append({**case, "skipped": "time"})
                    continue
                rows.append({**case, **isolated(ctx.gpu, speed_case, ctx, precision, h, w, batch)})
                peers.append({**case, **isolated(ctx.gpu, peer_case, ctx, precision, h, w, batch)})
                if "ms_per_frame" in rows[-1] and "ms_per_frame" in peers[-1]:
                    rows[-1]["peer_over_vsr"] = peers[-1]["ms_per_frame"] / rows[-1]["ms_per_frame"]
    h, w = ctx.sizes[-1]
    fused = []  # the one-kernel Triton DCN in the same model, fp16, after every figure above
    for fh, fw in ctx.sizes if ctx.fused else []:
        for batch in ctx.batches["fp16"]:
            case = {"lr": f"{fh}x{fw}", "precision": "fp16", "batch": batch, "dcn_gemm": "fused"}
            if ctx.left() < 45 and not ctx.quick:
                fused.append({**case, "skipped": "time"})
                continue
            fused.append({**case, **isolated(ctx.gpu, speed_case, ctx, "fp16", fh, fw, batch, dcn_gemm="fused")})
            same = [r for r in rows if r["lr"] == case["lr"] and r["precision"] == "fp16" and r["batch"] == batch]
            if same and "ms_per_frame" in same[0] and "ms_per_frame" in fused[-1]:
                fused[-1]["over_torch_gemm"] = fused[-1]["ms_per_frame"] / same[0]["ms_per_frame"]
                if fused[-1].get("device_ms_per_frame") and same[0].get("device_ms_per_frame"):
                    fused[-1]["device_over_torch_gemm"] = (fused[-1]["device_ms_per_frame"]
                                                           / same[0]["device_ms_per_frame"])
    done = [r for r in rows if "ms_per_frame" in r]
    result = {"config": ctx.speed_config, "features": done[0]["features"] if done else None,
              "memory_format": done[0]["memory_format"] if done else None, "cases": rows,
              "peer": {"what": "vsr's EDVR as --backend torch builds it: torchvision's DCN, eager, NCHW",
                       "cases": peers},
              "per_window": {"lr": f"{h}x{w}", "precision": "fp16", "batch": 1,
                             **isolated(ctx.gpu, speed_case, ctx, "fp16", h, w, 1, stream=False)},
              "per_step_ms": {"lr": f"{h}x{w}", **isolated(ctx.gpu, steps_case, ctx, h, w)},
              "kernels": (isolated(ctx.gpu, kernels_case, ctx, h, w) if ctx.quick or ctx.left() >= 30
                          else {"skipped": "time"}),
              "fused_dcn": {"what": "dcn_gemm='fused': sampling and product in one Triton kernel", "cases": fused,
                            "compile_s": _fused_compile_seconds(),
                            "per_step_ms": ({"lr": f"{h}x{w}", **isolated(ctx.gpu, steps_case, ctx, h, w,
                                                                          dcn_gemm="fused")}
                                            if ctx.gpu and ctx.left() >= 30 else None),
                            "kernels": (isolated(ctx.gpu, kernels_case, ctx, h, w, dcn_gemm="fused")
                                        if ctx.gpu and ctx.left() >= 30 else None)}
              if ctx.fused else {"skipped": _fused_missing()},
              "targets": {"fp16 540x960 ms/frame": 60.0, "fp32 540x960 ms/frame": 100.0, "peer_over_vsr": 2.0}}
    errors = [r for r in [*rows, *peers, *fused, result["per_window"], result["per_step_ms"], result["kernels"]]
              if "error" in r]
    if errors:
        raise CheckFailed(f"{len(errors)} case(s) failed: {errors}", result)
    return result


def check_memory(ctx: Context) -> dict:
    if not ctx.gpu:
        return {"skipped": "no GPU: the CUDA runtime's model works in host memory on the CPU emulation"}
    from gpu_model import isolated, memory_case, shapes_case

    rows, singles = [], {}
    for precision in ("fp16", "fp32"):
        for h, w in ctx.sizes:
            for batch in sorted({ctx.batches[precision][0], ctx.batches[precision][-1]}):
                case = {"lr": f"{h}x{w}", "precision": precision, "batch": batch}
                if ctx.left() < 30:
                    rows.append({**case, "skipped": "time"})
                    continue
                rows.append({**case, **isolated(ctx.gpu, memory_case, ctx, precision, h, w, batch)})
                if precision == "fp16":
                    singles.update(rows[-1].get("graph_grown_mib", {}))
    shapes = [(h, w, b) for h, w in ctx.sizes for b in ctx.batches["fp16"]]  # smallest first: the hard order
    together = isolated(ctx.gpu, shapes_case, ctx, shapes, singles)
    result = {"cases": rows, "shapes_on_one_backend": together}
    bad = [r for r in rows if "error" in r or r.get("within_plan") is False or r.get("reserved_over_peak", 0) > 1.25]
    if "error" in together or together.get("within_bound") is False:
        bad.append(together)
    if bad:
        raise CheckFailed(f"{len(bad)} memory case(s) beyond their plan or bound: {bad}", result)
    return result


def _png_frames(folder: Path) -> list[np.ndarray]:
    import cv2

    return [cv2.imread(str(p), cv2.IMREAD_UNCHANGED).astype(int) for p in sorted(folder.glob("*.png"))]


def _quick_clip(ctx: Context, folder: Path) -> Path:
    """A folder of 3 real (or synthesised) 24x20 PNG frames: vsr upscale reads PNG folders."""
    import cv2

    frames, _ = ctx.frames(3, 20, 24)
    folder.mkdir(parents=True, exist_ok=True)
    for i, f in enumerate(frames):
        cv2.imwrite(str(folder / f"{i:08d}.png"), cv2.cvtColor((f.transpose(1, 2, 0) * 255).round().astype(np.uint8),
                                                                cv2.COLOR_RGB2BGR))
    return folder


def check_upscale(ctx: Context) -> dict:
    work = Path(tempfile.mkdtemp(prefix="upscale-", dir=ctx.out))
    try:
        return _upscale(ctx, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _upscale(ctx: Context, work: Path) -> dict:
    from vsr.backends import BackendRequest, CudaOptions, TorchOptions
    from vsr.pipeline import RunnerSettings, upscale

    clip = ctx.data / "clip.mp4" if ctx.data and (ctx.data / "clip.mp4").is_file() else _quick_clip(ctx, work / "in")
    weights, config = ("random", "edvr-tiny") if ctx.quick else ("default", None)
    # fp32 on both sides, TF32 off: "equal within 1/255" compares the runtimes, not fp16 with fp32 (the CLI run
    # below is the default fp16)
    out = {"clip": str(clip), "precision": "fp32"}
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        for name, options in (("cuda", CudaOptions(device=str(ctx.device), precision="fp32", output="uint8")),
                              ("torch", TorchOptions(device=str(ctx.device)))):
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                report = upscale(clip, work / name, backend=BackendRequest(weights, config, options),
                                 runner=RunnerSettings(batch=2, scene_cuts="off"))
            out[f"{name}_frames"] = report.to_dict()["frames"]
            out[f"{name}_wall_s"] = time.perf_counter() - t0
            out[f"{name}_fps"] = out[f"{name}_frames"] / out[f"{name}_wall_s"]
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved
    a, b = _png_frames(work / "cuda"), _png_frames(work / "torch")
    out["max_level_difference"] = int(max(np.abs(x - y).max() for x, y in zip(a, b)))
    if ctx.gpu:  # the CLI itself, to a video file: the fps a user sees
        t0 = time.perf_counter()
        cli = subprocess.run([sys.executable, "-m", "vsr", "upscale", str(clip), str(work / "cli.mp4"),
                              "--backend", "cuda", "--batch", "4", "--quiet"], capture_output=True, text=True,
                             timeout=ctx.until_deadline())
        out.update(cli_rc=cli.returncode, cli_wall_s=time.perf_counter() - t0, cli_stderr=cli.stderr[-500:])
    if len(a) != len(b) or not a or out["max_level_difference"] > 1:
        raise AssertionError(f"cuda and torch outputs differ: {out}")
    return out


E2E_TARGETS = {"fps": 8.0, "e2e_over_bottleneck": 0.9}


def check_e2e(ctx: Context) -> dict:
    """The CLI as a user runs it on a GPU: 540p -> 4K, the whole 200-frame clip, the default weights (x264 medium,
    then ``--preset veryfast``) and EDVR-M; each run's report boiled down (:func:`_e2e_summary`).  Top level: the
    default weights' run (fps after its first 60 frames to the end, the encoder's flush included; over the infer
    stage's own rate; over the slower of that and the encoder's own rate).  ``--quick`` on the CPU: EDVR-tiny on
    a tiny clip, through the library with the CUDA runtime's emulation (the CLI's --backend cuda needs a GPU)."""
    work = Path(tempfile.mkdtemp(prefix="e2e-", dir=ctx.out))
    try:
        clip = ctx.data / "e2e.mp4" if ctx.data and (ctx.data / "e2e.mp4").is_file() else _tiny_video(ctx, work)
        models = ([("random", "edvr-tiny", [])] if ctx.quick else
                  [(None, None, []), (None, None, ["--preset", "veryfast"]), ("random", "edvr-m", [])])
        runs = []
        for weights, config, extra in models:
            if runs and ctx.gpu and ctx.left() < 45:
                runs.append({"weights": weights, "config": config, "options": extra, "skipped": "time"})
                continue
            try:
                runs.append({**_e2e_summary(_e2e_run(ctx, clip, work, weights, config, extra)), "options": extra})
            except Exception as e:  # recorded; the next run goes on
                runs.append({"weights": weights, "config": config, "options": extra,
                             "error": f"{type(e).__name__}: {str(e)[:800]}"})
        first = runs[0]
        result = {"clip": str(clip), "runs": runs, "targets": E2E_TARGETS,
                  **{k: first.get(k) for k in ("fps", "fps_whole_run", "e2e_over_inference", "e2e_over_bottleneck",
                                               "bottleneck")}}
        if ctx.gpu and "error" not in first:
            result["meets_targets"] = bool(first["fps"] >= E2E_TARGETS["fps"] and
                                           (first["e2e_over_bottleneck"] or 0) >= E2E_TARGETS["e2e_over_bottleneck"])
        errors = [r for r in runs if "error" in r]
        if errors:
            raise CheckFailed(f"{len(errors)} run(s) failed: {errors}", result)
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _tiny_video(ctx: Context, work: Path) -> Path:
    """3 real (or synthesised) 24x20 frames as an H.264 clip."""
    import av

    frames, _ = ctx.frames(3, 20, 24)
    work.mkdir(parents=True, exist_ok=True)
    path = work / "in.mp4"
    with av.open(str(path), "w") as oc:
        vs = oc.add_stream("libx264", rate=25)
        vs.width, vs.height, vs.pix_fmt = 24, 20, "yuv420p"
        for f in frames:
            rgb = np.ascontiguousarray((f.transpose(1, 2, 0) * 255).round().astype(np.uint8))
            oc.mux(vs.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="yuv420p")))
        oc.mux(vs.encode(None))
    return path


def _e2e_run(ctx: Context, clip: Path, work: Path, weights: str | None, config: str | None,
             extra: list[str]) -> dict:
    """One run's report (``--report``'s JSON)."""
    out, report = work / "out.mp4", work / "run.json"
    if ctx.gpu:
        model = (["--weights", weights] if weights else []) + (["--config", config] if config else [])
        cli = subprocess.run([sys.executable, "-m", "vsr", "upscale", str(clip), str(out), "--backend", "cuda",
                              "--report", str(report), "--quiet", "--overwrite", *model, *extra],
                             capture_output=True, text=True, timeout=ctx.until_deadline())
        if cli.returncode:
            raise AssertionError(f"vsr upscale exited {cli.returncode}: {cli.stderr[-800:]}")
        return json.loads(report.read_text())
    from vsr.backends import BackendRequest, CudaOptions
    from vsr.pipeline import RunnerSettings, upscale

    request = BackendRequest(weights or "default", config, CudaOptions(device=str(ctx.device), precision="fp32"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return upscale(clip, out, backend=request, runner=RunnerSettings(frames=(0, 3)), overwrite=True).to_dict()


def _e2e_summary(report: dict) -> dict:
    """fps (after the first 60 frames where the run is shorter than 240: the encoder's buffer is then no small
    part of the whole), the infer stage's and the encoder's own frame rates (frames over their busy seconds, the
    flush in the encoder's) over the same span as that fps where the report has it (``steady.stages``: x264
    takes its first frames without blocking and works on them while its stage waits, so over the whole run it
    looks faster than it is -- those rates are kept as ``*_whole_run``), the fps over each and over the slower,
    the bottleneck, the encoder, what the backend downloaded, and the stage table (ms per frame busy and
    waiting)."""
    settings, frames = report["settings"], max(report["frames"], 1)
    stages = {s["name"]: s for s in report["stages"]}
    steady = report.get("steady") or {}
    tiles = settings.get("tiles_per_frame") or 1
    fps = steady["fps"] if frames < 240 and steady.get("fps") else report["fps"]
    span = steady.get("stages") if fps == steady.get("fps") else None

    def own_rate(name: str, numbers: dict, per: int = 1) -> float | None:
        st = numbers.get(name)
        return st["items"] / per / st["busy_s"] if st and st["busy_s"] else None

    whole_infer, whole_encode = own_rate("infer", stages, tiles), own_rate("encode", stages)
    infer_fps, encode_fps = ((own_rate("infer", span, tiles), own_rate("encode", span)) if span
                             else (whole_infer, whole_encode))
    slowest = min((r for r in (infer_fps, encode_fps) if r), default=None)
    return {"weights": settings.get("weights"), "config": settings.get("config"), "frames": report["frames"],
            "fps": fps, "fps_whole_run": report["fps"], "steady": steady or None, "wall_s": report["wall_s"],
            "rates_over": "the steady span" if span else "the whole run",
            "infer_fps": infer_fps, "encode_fps": encode_fps,
            "infer_fps_whole_run": whole_infer, "encode_fps_whole_run": whole_encode,
            "e2e_over_inference": fps / infer_fps if infer_fps else None,
            "e2e_over_bottleneck": fps / slowest if slowest else None,
            "bottleneck": report["bottleneck"], "encoder": settings.get("codec"), "preset": settings.get("preset"),
            "pix_fmt": settings.get("pix_fmt"), "download": settings.get("backend_facts", {}).get("download"),
            "dcn": settings.get("backend_facts", {}).get("dcn"),  # the form each DCN ran ("auto" chose it)
            "stages": [{"stage": s["name"], "busy_s": round(s["busy_s"], 3),
                        "busy_ms_per_frame": round(1e3 * s["busy_s"] / frames, 1),
                        "wait_in_ms_per_frame": round(1e3 * s["wait_in_s"] / frames, 1),
                        "wait_out_ms_per_frame": round(1e3 * s["wait_out_s"] / frames, 1)} for s in report["stages"]],
            "encode_queue": settings.get("encode_queue")}


def write_summary(ctx: Context, args, results: list[dict], t0: float, done: bool) -> dict:
    """``gpu_check.json`` as it stands (atomically replaced): written after every check, so a run killed at its
    limit still returns every check that finished; ``complete`` says whether every asked check ran."""
    summary = {"device": args.device, "quick": args.quick, "wall_s": round(time.perf_counter() - t0, 1),
               "complete": done, "ok": sum(r["status"] == "ok" for r in results),
               "failed": [r["name"] for r in results if r["status"] == "failed"], "checks": results}
    tmp = ctx.out / ".gpu_check.json.part"
    tmp.write_text(json.dumps(summary, indent=1, default=str) + "\n")
    tmp.replace(ctx.out / "gpu_check.json")
    return summary


def run_checks(ctx: Context, names: list[str], logf, after=None) -> list[dict]:
    """Each check of ``names`` in turn; ``after(results)`` (if given) hears the list after each one."""
    estimates = {"versions": 5, "kernel_accuracy": 40, "kernel_speed": 40, "backends": 60, "edvr_m_speed": 150,
                 "memory": 60, "upscale": 90, "e2e": 120}
    results = []
    for i, name in enumerate(names):
        rec = {"name": name, "status": "ok"}
        t0 = time.perf_counter()
        ctx.reserve = sum(estimates[n] for n in names[i + 1:] if n in RESERVED)
        if not ctx.quick and ctx.left() < estimates[name]:
            rec.update(status="skipped", error=f"{ctx.left():.0f} s left, needs about {estimates[name]} s")
        else:
            try:
                rec["result"] = globals()[f"check_{name}"](ctx)
            except Exception as e:  # recorded; the next check runs
                rec.update(status="failed", error=f"{type(e).__name__}: {str(e)[:2000]}",
                           traceback=traceback.format_exc()[-3000:])
                if isinstance(e, CheckFailed):
                    rec["result"] = e.result
                logf.write(traceback.format_exc() + "\n")
            if ctx.gpu:
                torch.cuda.empty_cache()
        rec["seconds"] = round(time.perf_counter() - t0, 2)
        logf.write(json.dumps(rec, default=str) + "\n")
        logf.flush()
        results.append(rec)
        if after is not None:
            after(results)
        print(f"{name:16s} {rec['status']:8s} {rec['seconds']:7.1f} s  {rec.get('error', '')[:100]}", flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="folder for gpu_check.json and gpu_check.log (created)")
    p.add_argument("--data", default=None, help="real inputs: frames/*.png and clip.mp4 (scripts/gpu_carry.py)")
    p.add_argument("--device", default="cuda", help="cuda (default), cuda:1, or cpu for the emulation")
    p.add_argument("--quick", action="store_true", help="tiny sizes, EDVR-tiny, one repeat (CI)")
    p.add_argument("--budget-s", type=float, default=540.0, help="stop starting checks after this (default 540)")
    p.add_argument("--checks", default=",".join(CHECKS), help=f"comma-separated subset of {','.join(CHECKS)}")
    args = p.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_check: error: --device cuda but torch sees no GPU (use --device cpu --quick)", file=sys.stderr)
        return 2
    names = [n for n in args.checks.split(",") if n]
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        print(f"gpu_check: error: unknown checks {unknown} (known: {', '.join(CHECKS)})", file=sys.stderr)
        return 2
    ctx = Context(args)
    ctx.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    write_summary(ctx, args, [], t0, done=False)
    with open(ctx.out / "gpu_check.log", "w") as logf:
        results = run_checks(ctx, names, logf, after=lambda rs: write_summary(ctx, args, rs, t0, done=False))
    summary = write_summary(ctx, args, results, t0, done=True)
    print(f"gpu_check: {summary['ok']}/{len(results)} ok in {summary['wall_s']} s -> {ctx.out / 'gpu_check.json'}")
    return 1 if summary["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
