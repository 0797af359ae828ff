#!/usr/bin/env python
"""ONNX Runtime's memory pattern on vs off in the split plan's segment sessions: speed, paired, in one run.

    python scripts/bench_mem_pattern.py [--weights default] [--sizes 180x320 240x256] [--runs 5] [--json out.json]
    python scripts/bench_mem_pattern.py --memory [--sizes 64x64 128x128 240x256] [--batches 1 2] [--weights random --config C]

Two split backends of the same model (``vsr.backends.open_backend``), one with ``OrtSegmentBackend(
mem_pattern=True)``, one with vsr's default (off).  Per LR size, batch 1: ``prepare`` and one warm-up ``infer``
each, then ``--runs`` pairs of timed ``infer`` calls on the same random input, the order alternating per pair so
that load from other processes hits both alike.  Prints per size the median wall and process-CPU seconds of
each, and the medians of the per-pair ratios on / off (above 1: off is faster).  Prints the process's peak RSS at the end
(both backends share one arena, so it says little about either; see scripts/bench_memory.py for that).

``--memory`` measures instead the model's working memory as ``vsr.pipeline.memory`` counts it: the peak RSS
(``wait4``'s ``ru_maxrss``) of a child process that loads the model and runs ``prepare`` + 2 ``infer`` calls
per LR size and batch, minus that of a child that only loads the model; then the least-squares line through
(LR pixels x batch, MiB) and, per point, the bytes per pixel above a given fixed part.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

from vsr.backends import open_backend


def timed(backend, x: np.ndarray) -> tuple[float, float]:
    """Wall and process CPU seconds of one ``infer`` (the CPU figure is less sensitive to other jobs)."""
    t0, c0 = time.perf_counter(), time.process_time()
    backend.infer(x)
    return time.perf_counter() - t0, time.process_time() - c0


def bench_size(backends: dict, h: int, w: int, runs: int) -> dict:
    any_backend = next(iter(backends.values()))
    x = np.random.default_rng(0).random((1, any_backend.num_frame, 3, h, w), dtype=np.float32)
    for b in backends.values():
        b.prepare(h, w, 1)
        timed(b, x)  # warm-up: the first run records the pattern (when on) and grows the arena
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in backends}
    for i in range(runs):
        order = list(backends) if i % 2 == 0 else list(reversed(backends))
        for k in order:
            times[k].append(timed(backends[k], x))
    row: dict = {"size": f"{h}x{w}"}
    for j, kind in enumerate(("wall", "cpu")):
        on, off = ([t[j] for t in times[k]] for k in ("on", "off"))
        ratios = [a / b for a, b in zip(on, off)]
        row[kind] = {"on": [round(t, 3) for t in on], "off": [round(t, 3) for t in off],
                     "median_on_s": round(statistics.median(on), 3),
                     "median_off_s": round(statistics.median(off), 3),
                     "pair_ratios_on_over_off": [round(r, 3) for r in ratios],
                     "median_pair_ratio_on_over_off": round(statistics.median(ratios), 3)}
    return row


def child(weights: str, h: int, w: int, batch: int, infers: int, config: str | None = None) -> None:
    backend = open_backend(weights, config)
    if infers:
        backend.prepare(h, w, batch)
        x = np.random.default_rng(0).random((batch, backend.num_frame, 3, h, w), dtype=np.float32)
        for _ in range(infers):
            backend.infer(x)


def peak_mib(weights: str, h: int, w: int, batch: int, infers: int, config: str | None = None) -> float:
    code = f"from bench_mem_pattern import child; child({weights!r}, {h}, {w}, {batch}, {infers}, {config!r})"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.abspath(__file__)),
                                                        os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-c", code], env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"child {h}x{w} batch {batch} failed")
    return usage.ru_maxrss / 1024


def memory(weights: str, sizes: list[str], batches: list[int], json_path: str | None,
           config: str | None = None) -> None:
    base = [peak_mib(weights, 64, 64, 1, 0, config) for _ in range(2)]
    print(json.dumps({"loaded_process_mib": [round(b, 1) for b in base]}), flush=True)
    rows = []
    for size in sizes:
        h, w = (int(v) for v in size.split("x"))
        for batch in batches:
            peak = peak_mib(weights, h, w, batch, 2, config)
            rows.append({"size": size, "batch": batch, "pixels": h * w * batch, "peak_mib": round(peak, 1),
                         "model_mib": round(peak - max(base), 1)})
            print(json.dumps(rows[-1]), flush=True)
    px = np.array([r["pixels"] for r in rows], float)
    mb = np.array([r["model_mib"] for r in rows], float)
    slope, fixed = np.polyfit(px, mb, 1)
    print(f"\nfit: {slope * 2**20:.0f} bytes per LR pixel + {fixed:.1f} MiB fixed")
    print("| LR size | batch | peak RSS (MiB) | model (MiB) | bytes/pixel above 130 MiB fixed |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['size']} | {r['batch']} | {r['peak_mib']} | {r['model_mib']} | "
              f"{(r['model_mib'] - 130) * 2**20 / r['pixels']:.0f} |")
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"loaded_process_mib": base, "rows": rows, "fit_bytes_per_pixel": slope * 2**20,
                       "fit_fixed_mib": fixed}, f, indent=1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--weights", default="default")
    ap.add_argument("--sizes", nargs="+", default=["180x320", "240x256"])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--memory", action="store_true", help="measure the model's memory per LR pixel instead")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--config", default=None, help="model config (needed with --weights random)")
    args = ap.parse_args()
    if args.memory:
        return memory(args.weights, args.sizes, args.batches, args.json, args.config)
    backends = {"on": open_backend(args.weights), "off": open_backend(args.weights)}
    on = backends["on"]
    on.segment_backend = dataclasses.replace(on.segment_backend, mem_pattern=True)
    assert backends["off"].segment_backend.mem_pattern is False
    rows = []
    for size in args.sizes:
        h, w = (int(v) for v in size.split("x"))
        rows.append(bench_size(backends, h, w, args.runs))
        print(json.dumps(rows[-1]), flush=True)
    print("\n| LR size | seconds | pattern on, median | pattern off, median | median pair ratio on/off |")
    print("|---|---|---:|---:|---:|")
    for r in rows:
        for kind in ("wall", "cpu"):
            k = r[kind]
            print(f"| {r['size']} | {kind} | {k['median_on_s']} | {k['median_off_s']} | "
                  f"{k['median_pair_ratio_on_over_off']} |")
    print(f"\npeak RSS (both backends) {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
