#!/usr/bin/env python
"""Split plan vs whole graph on ONNX Runtime: EDVR at one LR size, side by side in one run, per-step times.

    python scripts/bench_split.py [--config edvr-m] [--height 180 --width 320] [--runs 3] [--threads 2]
                                  [--onnx PATH] [--json out.json]

Both run the *same* ONNX export (random weights: speed does not depend on them; pass --onnx to reuse a file).
Runs alternate (whole, split, whole, split, ...) so that load from other processes hits both alike.  Reports,
per plan: the median wall seconds per output frame (batch 1: one window of T frames), the median process
CPU-seconds, the median of the per-pair ratios, the split plan's median seconds per step, the memory plan
(arena peak vs naive sum of all exchanged tensors and workspaces) and the max abs difference of the outputs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import onnxruntime as ort

from vsr.kernels.threads import configure_kernel_threads
from vsr.plan.executor import PlanExecutor
from vsr.plan.plan import PlanCache
from vsr.plan.segments import OrtSegmentBackend


def export(config: str, h: int, w: int, out: Path) -> Path:
    from vsr.export.onnx import export_onnx
    from vsr.model import load_model

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, cfg = load_model("random", config)
    return export_onnx(model, cfg, out, h, w)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="edvr-m")
    ap.add_argument("--height", type=int, default=180)
    ap.add_argument("--width", type=int, default=320)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--onnx", type=Path, help="an existing export (else one is made in a temp dir)")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    configure_kernel_threads(args.threads)
    tmp = Path(tempfile.mkdtemp(prefix="bench_split."))
    t0 = time.perf_counter()
    path = args.onnx or export(args.config, args.height, args.width, tmp / "model.onnx")
    t_export = time.perf_counter() - t0
    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    whole = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    t0 = time.perf_counter()
    plan = PlanCache(tmp / "plans").get(path)
    t_plan = time.perf_counter() - t0
    ex = PlanExecutor(plan, OrtSegmentBackend(threads=args.threads))
    shape = tuple(whole.get_inputs()[0].shape)
    num_frame = int(shape[1])
    x = np.random.default_rng(0).random((1, num_frame, 3, args.height, args.width), dtype=np.float32)
    bound = ex.bind({"lr": x.shape})
    out_whole = np.empty((1, 3, 4 * args.height, 4 * args.width), np.float32)
    io = whole.io_binding()
    io.bind_cpu_input("lr", x)
    io.bind_output("hr", "cpu", 0, np.float32, out_whole.shape, out_whole.ctypes.data)

    def run_whole():
        whole.run_with_iobinding(io)

    def run_split():
        np.copyto(bound.inputs["lr"], x)
        bound.run()

    print(f"{args.config} LR {args.height}x{args.width}, T={num_frame}, batch 1; {platform.machine()}, "
          f"{os.cpu_count()} cores (shared), threads={args.threads}, onnxruntime {ort.__version__}; "
          f"export {t_export:.0f} s, plan {t_plan:.1f} s, {len(plan.steps)} steps", flush=True)
    run_whole()
    run_split()  # warm-up: first-run allocations, numba cache load
    res = {"whole": [], "split": []}
    steps = []
    for i in range(args.runs):
        for name, fn in (("whole", run_whole), ("split", run_split)):
            before = ex.timings()
            c0, w0 = time.process_time(), time.perf_counter()
            fn()
            res[name].append((time.perf_counter() - w0, time.process_time() - c0))
            if name == "split":
                after = ex.timings()
                steps.append({k: after[k] - before[k] for k in after})
            print(f"  run {i + 1} {name:5s} {res[name][-1][0]:7.2f} s (cpu {res[name][-1][1]:6.2f})", flush=True)
    diff = float(np.abs(bound.outputs["hr"] - out_whole).max())
    med = {k: (statistics.median(v[0] for v in r), statistics.median(v[1] for v in r)) for k, r in res.items()}
    # load from other processes drifts over minutes: the ratio within each (whole, split) pair is steadier
    paired = {i: statistics.median(w[i] / s[i] for w, s in zip(res["whole"], res["split"])) for i in (0, 1)}
    step_med = {k: statistics.median(s[k] for s in steps) for k in steps[0]}
    mem = bound.memory.summary()
    print(f"\nwhole {med['whole'][0]:.2f} s/frame (cpu {med['whole'][1]:.2f})   "
          f"split {med['split'][0]:.2f} s/frame (cpu {med['split'][1]:.2f})   "
          f"speed-up x{med['whole'][0] / med['split'][0]:.2f}   max|split - whole| {diff:.1e}")
    print(f"paired speed-up (median of whole/split per pair): x{paired[0]:.2f} wall, x{paired[1]:.2f} CPU")
    print("split per step (median s):")
    for s in plan.steps:
        print(f"  {s.name:24s} {step_med[s.name]:7.3f}")
    print(f"memory plan: arena {mem['arena_bytes'] / 2**20:.1f} MiB vs naive {mem['naive_bytes'] / 2**20:.1f} MiB "
          f"({mem['buffers']} buffers incl. kernel workspaces)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"config": args.config, "height": args.height, "width": args.width, "threads": args.threads,
                       "runs": res, "median": med, "paired_speedup": paired, "steps": step_med, "memory": mem,
                       "max_abs_diff": diff,
                       "load_average": os.getloadavg()}, f, indent=1)


if __name__ == "__main__":
    main()
