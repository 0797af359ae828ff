#!/usr/bin/env python3
"""Milliseconds per frame of EDVR on the CUDA runtime, per segment and per kernel, against the torch backend
(torchvision's DCN) -- for a GPU session (docs/benchmarks.md, "GPU (not yet measured)").

    python scripts/bench_cuda.py [--config edvr-m] [--sizes 270x480 540x960] [--precisions fp16 fp32]
                                 [--runs 10] [--out bench_cuda.json]

One frame = one window of T LR frames (batch 1), random weights (speed does not depend on them).  Per size and
precision: end to end with CUDA graphs (upload + replay + download, the median of ``--runs``), the same without
graphs with each segment and bridge kernel timed by CUDA events, the torch backend, and vsr's DCN kernel against
torchvision's ``deform_conv2d`` on the shapes of EDVR's PCD levels (CUDA events, median of ``--runs``): vsr's
sampling kernel with torch's GEMM (the runtime's default) and with vsr's own GEMM kernel.
Prints a markdown table and writes every number, with the device and versions, as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings

import numpy as np
import torch


def median_ms(fn, runs: int) -> float:
    fn()  # warm-up (cuDNN algorithm choice, NVRTC compile, graph capture)
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def event_ms(fn, runs: int) -> float:
    fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(runs):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def open_backend(config: str, options):
    from vsr.backends import open_backend as _open

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _open("random", config, options)


def bench_model(config: str, h: int, w: int, precision: str, runs: int) -> dict:
    from vsr.backends import CudaOptions, TorchOptions

    graphed = open_backend(config, CudaOptions(precision=precision, cuda_graphs=True))
    x = np.random.default_rng(0).random((1, graphed.num_frame, 3, h, w), dtype=np.float32)
    graphed.prepare(h, w, 1)
    row = {"graphs_ms": median_ms(lambda: graphed.infer(x), runs), "launcher": graphed.launcher.name}
    graphed = None  # its graph pool goes before the next backend opens
    plain = open_backend(config, CudaOptions(precision=precision, cuda_graphs=False))
    row["no_graphs_ms"] = median_ms(lambda: plain.infer(x), runs)
    row["steps_ms"] = {k: 1e3 * v.p50_s for k, v in plain.step_stats().items()}
    plain = None
    torch.cuda.empty_cache()
    if precision == "fp32":
        ref = open_backend(config, TorchOptions(device="cuda"))
        row["torch_backend_ms"] = median_ms(lambda: ref.infer(x), runs)
    torch.cuda.empty_cache()
    return row


def bench_dcn(h: int, w: int, precision: str, runs: int) -> dict:
    """vsr's DCN vs torchvision on EDVR-M's PCD levels: (5 frames, 64 channels, 8 offset groups) at L1-L3."""
    from torchvision.ops import deform_conv2d

    from vsr.backends.cuda.dcn import deform_conv_torch
    from vsr.backends.cuda.tensors import open_tensor_launcher
    from vsr.kernels.deform_conv import DeformConvGeometry

    device, dtype = torch.device("cuda"), torch.float16 if precision == "fp16" else torch.float32
    launcher = open_tensor_launcher("auto", device)
    out = {}
    for level, (lh, lw) in (("l1", (h, w)), ("l2", (h // 2, w // 2)), ("l3", (h // 4, w // 4))):
        x = torch.randn(5, 64, lh, lw, device=device, dtype=dtype)
        weight, bias = torch.randn(64, 64, 3, 3, device=device, dtype=dtype) * 0.05, torch.zeros(64, device=device,
                                                                                                   dtype=dtype)
        offset = torch.randn(5, 144, lh, lw, device=device, dtype=dtype)
        mask = torch.rand(5, 72, lh, lw, device=device, dtype=dtype)
        geom = DeformConvGeometry.from_attrs(x.shape, weight.shape, pads=[1] * 4, offset_group=8)
        vsr_ms = event_ms(lambda: deform_conv_torch(launcher, geom, x, weight, offset, mask, bias), runs)
        own_ms = event_ms(lambda: deform_conv_torch(launcher, geom, x, weight, offset, mask, bias, gemm="kernel"),
                          runs)
        tv_ms = event_ms(lambda: deform_conv2d(x, offset, weight, bias, padding=(1, 1), mask=mask), runs)
        out[level] = {"vsr_ms": vsr_ms, "vsr_own_gemm_ms": own_ms, "torchvision_ms": tv_ms,
                      "speedup": tv_ms / vsr_ms}
    return out


def facts() -> dict:
    from dataclasses import asdict

    from vsr.backends.cuda.keys import device_facts

    return asdict(device_facts(torch.device("cuda")))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="edvr-m")
    ap.add_argument("--sizes", nargs="+", default=["270x480", "540x960"])
    ap.add_argument("--precisions", nargs="+", default=["fp16", "fp32"])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--out", default="bench_cuda.json")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_cuda.py: torch sees no CUDA GPU")
    torch.backends.cudnn.benchmark = True
    results = {"facts": facts(), "config": args.config, "runs": args.runs, "rows": []}
    print(f"device: {results['facts']['device_name']}, torch {torch.__version__}, CUDA {torch.version.cuda}")
    print("| LR size | precision | graphs ms/frame | no graphs | torch backend | DCN L1 vsr / torchvision |")
    print("|---|---|---|---|---|---|")
    for size in args.sizes:
        h, w = (int(v) for v in size.split("x"))
        for precision in args.precisions:
            row = {"size": size, "precision": precision, **bench_model(args.config, h, w, precision, args.runs),
                   "dcn": bench_dcn(h, w, precision, args.runs)}
            results["rows"].append(row)
            l1 = row["dcn"]["l1"]
            ref = row.get("torch_backend_ms", float("nan"))
            print(f"| {size} | {precision} | {row['graphs_ms']:.1f} | {row['no_graphs_ms']:.1f} | {ref:.1f} | "
                  f"{l1['vsr_ms']:.2f} / {l1['torchvision_ms']:.2f} |")
            print("   " + ", ".join(f"{k} {v:.2f}" for k, v in row["steps_ms"].items()))
    with open(args.out, "w") as f:
        json.dump(results, f, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
