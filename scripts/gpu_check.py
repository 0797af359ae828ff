"""Verify and measure every GPU part of vsr in one command (<= 9 minutes on an H100, no network).

    python scripts/gpu_check.py --out DIR [--data DIR] [--device cuda|cpu] [--quick] [--budget-s 540]

Writes ``DIR/gpu_check.json`` (every check: status ok / failed / skipped, seconds, results, the error) and
``DIR/gpu_check.log``, and prints a short table last.  A failing check is recorded and the next one runs, so one
surprise does not cost the lease; a check whose estimate exceeds the time left is skipped, saying so.

Checks (each a function below, in this order):
  versions      device, driver, torch, CUDA, cuDNN, cupy, NVRTC, torchvision, onnxruntime, vsr
  kernel_accuracy  vsr's DCN (sampling kernel + GEMM, both GEMMs) against torchvision.ops.deform_conv2d at EDVR-M
                shapes (64 channels, 8 offset groups, 5 frames) up to LR 540x960: relative L2 error, fp32 <= 1e-4,
                fp16 <= 1e-2 (no torchvision, as on the CPU: vsr's numba CPU DCN is the reference)
  kernel_speed  the same shapes: ms of vsr's DCN and of torchvision's, fp16 and fp32
  backends      --backend cuda against --backend torch on real frames with the shipped weights (default, real),
                fp32 and fp16: no inf/NaN, Y-PSNR of cuda against torch, and each module's largest |output| in
                fp16 (a layer near 65504 would overflow)
  edvr_m_speed  EDVR-M ms/frame at LR 270x480 and 540x960, fp16 and fp32, batch 1-4, CUDA graphs; one run
                without graphs for ms per segment and per bridge kernel
  memory        GPU memory per LR pixel (the memory plan's probe) against the peak of a real run
  upscale       vsr upscale --backend cuda on a real clip: fps, and the frames against --backend torch (<= 1/255)
  e2e           vsr upscale --backend cuda of the 960x540 clip to 3840x2160 (60 frames), default weights and EDVR-M:
                each run's fps, stage table, bottleneck, encoder and e2e_over_inference (its fps over the infer
                stage's own frame rate; issue 29's targets: >= 8 fps and >= 0.9 with the default weights)

``--data DIR`` holds the real inputs (``scripts/gpu_carry.py`` packs it): ``frames/*.png`` (LR frames),
``clip.mp4`` and ``e2e.mp4`` (the 960x540 clip).  Without it, frames are synthesised (recorded as such).
``--device cpu --quick`` runs every check on the CPU emulation at tiny sizes with EDVR-tiny: CI runs it
(tests/scripts/test_gpu_check.py) so it cannot rot.
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
CHECKS = ("versions", "kernel_accuracy", "kernel_speed", "backends", "edvr_m_speed", "memory", "upscale", "e2e")


class Context:
    """What every check gets: the device, the sizes of this mode, the real inputs, a clock."""

    def __init__(self, args):
        self.device = torch.device(args.device)
        self.gpu = self.device.type == "cuda"
        self.quick = args.quick
        self.data = Path(args.data) if args.data else None
        self.out = Path(args.out)
        self.deadline = time.monotonic() + args.budget_s
        # (LR sizes, batches, repeats, EDVR config for speed, shipped weights) per mode
        if args.quick:
            self.sizes, self.batches, self.repeats = [(16, 16)], [1], 1
            self.speed_config, self.weights, self.dcn_sizes = "edvr-tiny", [("random", "edvr-tiny")], [(8, 12)]
        else:
            self.sizes, self.batches, self.repeats = [(270, 480), (540, 960)], [1, 2, 3, 4], 5
            self.speed_config, self.dcn_sizes = "edvr-m", [(270, 480), (540, 960)]
            self.weights = [("default", None), ("real", None)]

    def left(self) -> float:
        return self.deadline - time.monotonic()

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


def _vsr_dcn(ctx: Context, launcher, args, gemm: str):
    from vsr.backends.cuda.dcn import deform_conv_torch
    from vsr.kernels.deform_conv import DeformConvGeometry

    x, offset, mask, weight, bias = args
    geom = DeformConvGeometry.from_attrs(tuple(x.shape), tuple(weight.shape), pads=[1] * 4, offset_group=8)
    return lambda: deform_conv_torch(launcher, geom, x, weight, offset, mask, bias, gemm=gemm)


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
                for gemm in ("torch", "kernel"):
                    got = _vsr_dcn(ctx, launcher, args, gemm)().double()
                    rel = float((got - want).norm() / want.norm())
                    ok = math.isfinite(rel) and rel <= limit
                    rows.append({"lr": f"{h}x{w}", "dtype": str(dtype)[6:], "gemm": gemm, "rel_l2": rel,
                                 "limit": limit, "ok": ok, "reference": ref_name})
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
                try:
                    from torchvision.ops import deform_conv2d

                    x, offset, mask, weight, bias = args
                    row["torchvision_ms"] = 1e3 * ctx.timed(
                        lambda: deform_conv2d(x, offset, weight, bias, padding=(1, 1), mask=mask))
                    row["vsr_over_torchvision"] = row["vsr_torch_ms"] / row["torchvision_ms"]
                except ImportError:
                    row["torchvision_ms"] = None
            rows.append(row)
    return {"cases": rows, "repeats": ctx.repeats}


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


def check_backends(ctx: Context) -> dict:
    from vsr.backends import CudaOptions, TorchOptions
    from vsr.quality.metrics import psnr, rgb_to_y

    h, w = (16, 16) if ctx.quick else (144, 176)
    results = []
    for weights, config in ctx.weights:
        ref = _open(weights, config, TorchOptions(device=str(ctx.device)))
        t, n = ref.num_frame, 1 if ctx.quick else 2
        frames, source = ctx.frames(t + n - 1, h, w)
        x = np.stack([frames[i:i + t] for i in range(n)])  # n windows of consecutive real frames
        ref = ref.infer(x)
        for precision in ("fp32", "fp16"):
            backend = _open(weights, config, CudaOptions(device=str(ctx.device), precision=precision,
                                                         output="float32"))
            backend.prepare(h, w, n)
            got = backend.infer(x)
            to255 = [np.clip(a, 0, 1).transpose(0, 2, 3, 1) * 255.0 for a in (got, ref)]
            row = {"weights": config or weights, "precision": precision, "finite": bool(np.isfinite(got).all()),
                   "max_abs": float(np.abs(got - ref).max()), "frames": source,
                   "y_psnr_vs_torch": min(psnr(rgb_to_y(a), rgb_to_y(b)) for a, b in zip(*to255))}
            if precision == "fp16":
                row["largest_outputs"] = _module_peaks(backend, x)
                row["near_fp16_limit"] = [k for k, v in row["largest_outputs"].items() if v > 32768]
            results.append(row)
    bad = [r for r in results if not r["finite"]]
    if bad:
        raise AssertionError(f"inf/NaN in the cuda backend's output: {bad}")
    return {"cases": results}


def check_edvr_m_speed(ctx: Context) -> dict:
    from vsr.backends import CudaOptions

    rows = []
    for precision in ("fp16", "fp32"):
        backend = _open("random", ctx.speed_config, CudaOptions(device=str(ctx.device), precision=precision))
        for h, w in ctx.sizes:
            for batch in ctx.batches:
                if ctx.left() < 60 and not ctx.quick:
                    rows.append({"lr": f"{h}x{w}", "precision": precision, "batch": batch, "skipped": "time"})
                    continue
                frames, _ = ctx.frames(backend.num_frame, h, w)
                x = np.stack([frames] * batch)
                backend.prepare(h, w, batch)
                s = ctx.timed(lambda: backend.infer(x))
                rows.append({"lr": f"{h}x{w}", "precision": precision, "batch": batch, "graphs": backend.graphs_on,
                             "ms_per_frame": 1e3 * s / batch, "fps": batch / s})
        del backend
        if ctx.gpu:
            torch.cuda.empty_cache()
    steps = _steps(ctx)
    return {"config": ctx.speed_config, "cases": rows, "per_step_ms": steps}


def _steps(ctx: Context) -> dict:
    """ms per segment and per bridge kernel (p50), fp16, no graphs, the first size, batch 1."""
    from vsr.backends import CudaOptions

    h, w = ctx.sizes[0]
    backend = _open("random", ctx.speed_config, CudaOptions(device=str(ctx.device), precision="fp16",
                                                            cuda_graphs=False))
    frames, _ = ctx.frames(backend.num_frame, h, w)
    backend.prepare(h, w, 1)
    for _ in range(ctx.repeats + 1):
        backend.infer(frames[None])
    return {k: 1e3 * v.p50_s for k, v in backend.step_stats().items()}


def check_memory(ctx: Context) -> dict:
    if not ctx.gpu:
        return {"skipped": "no GPU: the CUDA runtime's model works in host memory on the CPU emulation"}
    from vsr.backends import CudaOptions

    backend = _open("random", ctx.speed_config, CudaOptions(device=str(ctx.device), precision="fp16"))
    probe = backend.device_memory()
    rows = []
    for h, w in ctx.sizes:
        for batch in (1, max(ctx.batches)):
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats(ctx.device)
            base = torch.cuda.memory_allocated(ctx.device)
            frames, _ = ctx.frames(backend.num_frame, h, w)
            backend.prepare(h, w, batch)
            backend.infer(np.stack([frames] * batch))
            peak = torch.cuda.max_memory_allocated(ctx.device) - base
            planned = (probe["fixed_mb"] * 2**20 + probe["bytes_per_pixel"] * h * w * batch)
            rows.append({"lr": f"{h}x{w}", "batch": batch, "peak_mib": peak / 2**20, "planned_mib": planned / 2**20,
                         "bytes_per_lr_pixel": peak / (h * w * batch), "within_plan": peak <= planned,
                         "graphs": len(backend.graphs.runs), "reserved_mib": torch.cuda.memory_reserved() / 2**20})
    return {"probe": probe, "cases": rows}


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
                              "--backend", "cuda", "--batch", "4", "--quiet"], capture_output=True, text=True)
        out.update(cli_rc=cli.returncode, cli_wall_s=time.perf_counter() - t0, cli_stderr=cli.stderr[-500:])
    if len(a) != len(b) or not a or out["max_level_difference"] > 1:
        raise AssertionError(f"cuda and torch outputs differ: {out}")
    return out


def check_e2e(ctx: Context) -> dict:
    """The CLI as a user runs it on a GPU: 540p -> 4K, 60 frames, the default weights and EDVR-M (random weights:
    the same speed); each run's report boiled down (:func:`_e2e_summary`).  ``--quick`` on the CPU: EDVR-tiny on
    a tiny clip, through the library with the CUDA runtime's emulation (the CLI's --backend cuda needs a GPU)."""
    work = Path(tempfile.mkdtemp(prefix="e2e-", dir=ctx.out))
    try:
        clip = ctx.data / "e2e.mp4" if ctx.data and (ctx.data / "e2e.mp4").is_file() else _tiny_video(ctx, work)
        models = [("random", "edvr-tiny")] if ctx.quick else [(None, None), ("random", "edvr-m")]
        runs = [_e2e_summary(_e2e_run(ctx, clip, work, weights, config)) for weights, config in models]
        first = runs[0]
        return {"clip": str(clip), "runs": runs, "targets": {"fps": 8.0, "e2e_over_inference": 0.9},
                "meets_targets": bool(first["fps"] >= 8.0 and (first["e2e_over_inference"] or 0) >= 0.9)
                if ctx.gpu else None}
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


def _e2e_run(ctx: Context, clip: Path, work: Path, weights: str | None, config: str | None) -> dict:
    """One run's report (``--report``'s JSON)."""
    out, report = work / "out.mp4", work / "run.json"
    if ctx.gpu:
        model = (["--weights", weights] if weights else []) + (["--config", config] if config else [])
        cli = subprocess.run([sys.executable, "-m", "vsr", "upscale", str(clip), str(out), "--backend", "cuda",
                              "--frames", "0:60", "--report", str(report), "--quiet", "--overwrite", *model],
                             capture_output=True, text=True)
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
    """fps, the infer stage's own frame rate (frames over its busy seconds) and their ratio, the bottleneck, the
    encoder, what the backend downloaded, and the stage table (ms per frame busy and waiting)."""
    settings, frames = report["settings"], max(report["frames"], 1)
    stages = {s["name"]: s for s in report["stages"]}
    infer = stages["infer"]
    infer_fps = infer["items"] / (settings.get("tiles_per_frame") or 1) / infer["busy_s"] if infer["busy_s"] else None
    return {"weights": settings.get("weights"), "config": settings.get("config"), "frames": report["frames"],
            "fps": report["fps"], "infer_fps": infer_fps,
            "e2e_over_inference": report["fps"] / infer_fps if infer_fps else None,
            "bottleneck": report["bottleneck"], "encoder": settings.get("codec"), "pix_fmt": settings.get("pix_fmt"),
            "download": settings.get("backend_facts", {}).get("download"),
            "stages": [{"stage": s["name"], "busy_s": round(s["busy_s"], 3),
                        "busy_ms_per_frame": round(1e3 * s["busy_s"] / frames, 1),
                        "wait_in_ms_per_frame": round(1e3 * s["wait_in_s"] / frames, 1)} for s in report["stages"]]}


def run_checks(ctx: Context, names: list[str], logf) -> list[dict]:
    estimates = {"versions": 5, "kernel_accuracy": 40, "kernel_speed": 40, "backends": 60, "edvr_m_speed": 150,
                 "memory": 60, "upscale": 90, "e2e": 180}
    results = []
    for name in names:
        rec = {"name": name, "status": "ok"}
        t0 = time.perf_counter()
        if not ctx.quick and ctx.left() < estimates[name]:
            rec.update(status="skipped", error=f"{ctx.left():.0f} s left, needs about {estimates[name]} s")
        else:
            try:
                rec["result"] = globals()[f"check_{name}"](ctx)
            except Exception as e:  # recorded; the next check runs
                rec.update(status="failed", error=f"{type(e).__name__}: {str(e)[:2000]}")
                logf.write(traceback.format_exc() + "\n")
            if ctx.gpu:
                torch.cuda.empty_cache()
        rec["seconds"] = round(time.perf_counter() - t0, 2)
        logf.write(json.dumps(rec, default=str) + "\n")
        logf.flush()
        results.append(rec)
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
    with open(ctx.out / "gpu_check.log", "w") as logf:
        results = run_checks(ctx, names, logf)
    summary = {"device": args.device, "quick": args.quick, "wall_s": round(time.perf_counter() - t0, 1),
               "ok": sum(r["status"] == "ok" for r in results), "failed": [r["name"] for r in results
                                                                          if r["status"] == "failed"],
               "checks": results}
    tmp = ctx.out / ".gpu_check.json.part"
    tmp.write_text(json.dumps(summary, indent=1, default=str) + "\n")
    tmp.replace(ctx.out / "gpu_check.json")
    print(f"gpu_check: {summary['ok']}/{len(results)} ok in {summary['wall_s']} s -> {ctx.out / 'gpu_check.json'}")
    return 1 if summary["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
