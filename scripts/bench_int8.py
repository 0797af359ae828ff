#!/usr/bin/env python3
"""int8 split plan vs fp32 split plan, paired in one run: seconds per frame and their ratio.

    python scripts/bench_int8.py [--config edvr-m] [--height 180 --width 320] [--pairs 5] [--scales runtime]

One output frame = one window of T LR frames (batch 1), random weights (speed does not depend on them).
Both backends are built and warmed up first (export, plan, int8 calibration, one run on zeros, not timed), then
run the first window of the content (timed apart: int8 run-time scales adapt there); then ``--pairs`` rounds each time one frame on both, alternating which goes first; prints the medians, the median of
the per-pair ratios fp32/int8 (robust on a shared machine) and CPU-seconds per frame.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import time

import numpy as np

from vsr.backends import SplitOptions, open_backend
from vsr.quant.config import synthetic_frames


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _timed(backend, x) -> tuple[float, float]:
    c0, t0 = _cpu(), time.perf_counter()
    backend.infer(x)
    return time.perf_counter() - t0, _cpu() - c0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="edvr-m")
    ap.add_argument("--height", type=int, default=180)
    ap.add_argument("--width", type=int, default=320)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--scales", default="runtime", help="runtime | static | exact")
    args = ap.parse_args()
    fp32 = open_backend("random", args.config, SplitOptions(threads=args.threads))
    int8 = open_backend("random", args.config, SplitOptions(threads=args.threads, precision="int8",
                                                            int8_scales=args.scales))
    t = fp32.num_frame
    frames = synthetic_frames(t + args.pairs + 1, args.height, args.width, seed=1)
    t0 = time.perf_counter()
    for b in (fp32, int8):
        b.prepare(args.height, args.width, 1)
    print(f"built and warmed up in {time.perf_counter() - t0:.1f} s")
    # one window of the real content, timed apart: it is where run-time int8 scales adapt from the calibration
    # ranges (saturated segments run again); the pairs then measure the steady state
    first = {name: _timed(b, frames[None, 0:t])[0] for name, b in (("fp32", fp32), ("int8", int8))}
    print(f"first window (not in the pairs): fp32 {first['fp32']:.2f} s, int8 {first['int8']:.2f} s")
    frames = frames[1:]
    walls = {"fp32": [], "int8": []}
    cpus = {"fp32": [], "int8": []}
    ratios = []
    for i in range(args.pairs):
        x = frames[None, i:i + t]
        order = [("fp32", fp32), ("int8", int8)] if i % 2 == 0 else [("int8", int8), ("fp32", fp32)]
        got = {}
        for name, b in order:
            got[name] = _timed(b, x)
            walls[name].append(got[name][0])
            cpus[name].append(got[name][1])
        ratios.append(got["fp32"][0] / got["int8"][0])
        print(f"pair {i}: fp32 {got['fp32'][0]:.2f} s, int8 {got['int8'][0]:.2f} s, ratio {ratios[-1]:.2f}")
    table = int8.segment_backend.table
    print(json.dumps({
        "config": args.config, "size": f"{args.height}x{args.width}", "pairs": args.pairs, "scales": args.scales,
        "fp32_s_per_frame_median": round(statistics.median(walls["fp32"]), 3),
        "int8_s_per_frame_median": round(statistics.median(walls["int8"]), 3),
        "ratio_fp32_over_int8_median_of_pairs": round(statistics.median(ratios), 3),
        "fp32_cpu_s_median": round(statistics.median(cpus["fp32"]), 3),
        "int8_cpu_s_median": round(statistics.median(cpus["int8"]), 3),
        "int8_segment_runs": table.passes, "int8_reruns": table.reruns,
        "int8_steps_s": {k: round(v, 3) for k, v in int8.timings().items() if v},
        "fp32_steps_s": {k: round(v, 3) for k, v in fp32.timings().items() if v}}, indent=1))


if __name__ == "__main__":
    main()
