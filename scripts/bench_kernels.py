#!/usr/bin/env python
"""Micro-benchmark: vsr's bridge kernels vs ONNX Runtime's own ops, on EDVR-M's shapes at LR 180x320.

DCN: N*T = 5 frames, 64 channels, 8 offset groups, 3x3, at L1 180x320, L2 90x160, L3 45x80.
PixelShuffle: DepthToSpace(CRD) + LeakyReLU after EDVR-M's upconv1 (256ch @ 180x320) and upconv2 (256ch @ 360x640).

Runs alternate (vsr, ORT, vsr, ORT, ...) so that load from other processes hits both alike; reports the median
wall time, the median process CPU time, and the max abs difference of the outputs.

    python scripts/bench_kernels.py [--runs 5] [--threads 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from vsr.kernels import DeformConvGeometry, DeformConvKernel, depth_to_space_crd
from vsr.kernels.threads import configure_kernel_threads


def ort_session(nodes, inputs, inits, threads):
    graph = helper.make_graph(nodes, "bench", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                                                for n, s in inputs],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=10)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    # ORT's idle threads would otherwise busy-wait after each run, into the next (vsr) measurement; a
    # single-node model gains nothing from spinning between ops
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def timed(fn):
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def compare(name, ours, theirs, runs, extra):
    ours(), theirs()  # warm-up (numba compile / cache load, ORT first-run allocations)
    t = {"vsr": [], "ort": []}
    a = b = None
    for _ in range(runs):
        a, w, c = timed(ours)
        t["vsr"].append((w, c))
        b, w, c = timed(theirs)
        t["ort"].append((w, c))
    row = {"case": name, **extra, "max_abs_diff": float(np.abs(a - b).max())}
    for k, v in t.items():
        row[f"{k}_wall_s"] = statistics.median(x[0] for x in v)
        row[f"{k}_cpu_s"] = statistics.median(x[1] for x in v)
    row["speedup_wall"] = row["ort_wall_s"] / row["vsr_wall_s"]
    print(f"{name:34s} vsr {row['vsr_wall_s']:7.3f} s (cpu {row['vsr_cpu_s']:6.2f})   "
          f"ORT {row['ort_wall_s']:7.3f} s (cpu {row['ort_cpu_s']:6.2f})   x{row['speedup_wall']:.2f}   "
          f"max|diff| {row['max_abs_diff']:.1e}", flush=True)
    return row


def bench_dcn(h, w, runs, threads, n=5, c=64, groups=8):
    rng = np.random.default_rng(0)
    geom = DeformConvGeometry.from_attrs((n, c, h, w), (c, c, 3, 3), pads=[1, 1, 1, 1], offset_group=groups)
    x = rng.standard_normal((n, c, h, w), dtype=np.float32)
    off = (rng.standard_normal(geom.offset_shape) * 3).astype(np.float32)  # samples leave the image too
    mask = rng.random(geom.mask_shape, dtype=np.float32)
    wt = rng.uniform(-1 / 24, 1 / 24, (c, c, 3, 3)).astype(np.float32)
    b = rng.uniform(-0.1, 0.1, c).astype(np.float32)
    kernel = DeformConvKernel(geom, wt, b)
    ws = np.empty(kernel.workspace_nbytes(), np.uint8)
    out = np.empty(geom.out_shape, np.float32)
    node = helper.make_node("DeformConv", ["X", "W", "O", "B", "M"], ["Y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                            offset_group=groups)
    inits = [helper.make_tensor("W", TensorProto.FLOAT, wt.shape, wt.ravel()),
             helper.make_tensor("B", TensorProto.FLOAT, b.shape, b)]
    sess = ort_session([node], [("X", x.shape), ("O", off.shape), ("M", mask.shape)], inits, threads)
    feeds = {"X": x, "O": off, "M": mask}
    return compare(f"DeformConv {n}x{c}x{h}x{w} g{groups}", lambda: kernel.run(x, off, mask, out, ws),
                   lambda: sess.run(None, feeds)[0], runs, {"gflop": geom.gflop})


def bench_d2s(c, h, w, runs, threads):
    x = np.random.default_rng(1).standard_normal((1, c, h, w), dtype=np.float32)
    out = np.empty((1, c // 4, 2 * h, 2 * w), np.float32)
    nodes = [helper.make_node("DepthToSpace", ["X"], ["T"], blocksize=2, mode="CRD"),
             helper.make_node("LeakyRelu", ["T"], ["Y"], alpha=0.1)]
    sess = ort_session(nodes, [("X", x.shape)], [], threads)
    return compare(f"DepthToSpace+LeakyRelu 1x{c}x{h}x{w}",
                   lambda: depth_to_space_crd(x, 2, out=out, negative_slope=0.1),
                   lambda: sess.run(None, {"X": x})[0], runs, {})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    configure_kernel_threads(args.threads)
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, threads={args.threads}, "
          f"onnxruntime {ort.__version__}, load average {os.getloadavg()[0]:.1f}", flush=True)
    rows = [bench_dcn(h, w, args.runs, args.threads) for h, w in ((45, 80), (90, 160), (180, 320))]
    rows += [bench_d2s(256, 180, 320, args.runs, args.threads), bench_d2s(256, 360, 640, args.runs, args.threads)]
    dcn = [r for r in rows if r["case"].startswith("DeformConv")]
    total = {k: sum(r[k] for r in dcn) for k in ("vsr_wall_s", "ort_wall_s")}
    # EDVR runs the L1 DCN twice (L1 alignment and the cascade), L2 and L3 once
    per_window = {k: dcn[0][k] + dcn[1][k] + 2 * dcn[2][k] for k in ("vsr_wall_s", "ort_wall_s")}
    print(f"4 DCNs of one EDVR-M window (L3 + L2 + 2 x L1): vsr {per_window['vsr_wall_s']:.3f} s, "
          f"ORT {per_window['ort_wall_s']:.3f} s (x{per_window['ort_wall_s'] / per_window['vsr_wall_s']:.2f})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "per_window": per_window, "sum_of_shapes": total,
                       "load_average": os.getloadavg()}, f, indent=1)


if __name__ == "__main__":
    main()
