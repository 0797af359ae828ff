#!/usr/bin/env python3
"""Seconds per frame of EDVR on ONNX Runtime (whole graph) and PyTorch eager, side by side.

    python scripts/bench_edvr.py [--config edvr-m] [--height 180 --width 320] [--runs 3] [--threads N]

One output frame = one window of T LR frames (batch 1).  Prints the first (cold) run and the median of
the warm runs for each backend, plus the ratio.  Random weights: speed does not depend on them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import time
import warnings

import numpy as np


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def timed_runs(fn, x, runs):
    """(cold wall s, warm wall median, warm walls, warm CPU-seconds median) of ``fn(x)``.

    CPU-seconds (all threads of this process) are reported too because the machine may be shared:
    CPU-s / threads is what the run would take with the cores to itself.
    """
    times, cpus = [], []
    for _ in range(runs + 1):
        c0, t0 = _cpu(), time.perf_counter()
        fn(x)
        times.append(time.perf_counter() - t0)
        cpus.append(_cpu() - c0)
    return times[0], statistics.median(times[1:]), times[1:], statistics.median(cpus[1:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="edvr-m")
    ap.add_argument("--height", type=int, default=180)
    ap.add_argument("--width", type=int, default=320)
    ap.add_argument("--runs", type=int, default=3, help="warm runs per backend (after one cold run)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--backends", default="ort,torch")
    ap.add_argument("--json", help="also write results here")
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    import torch

    from vsr.backends import backend_options, open_backend

    threads = a.threads or os.cpu_count()
    torch.set_num_threads(threads)
    rng = np.random.default_rng(0)
    res = {"config": a.config, "lr": [a.height, a.width], "threads": threads, "machine": platform.processor()
           or platform.machine(), "cpus": os.cpu_count(), "results": {}}
    for name in a.backends.split(","):
        b = open_backend("random", a.config, backend_options(name, "whole", threads))
        x = rng.random((1, b.num_frame, 3, a.height, a.width), dtype=np.float32)
        b.prepare(a.height, a.width, 1)  # export + session build not timed
        cold, med, warm, cpu = timed_runs(b.infer, x, a.runs)
        res["results"][name] = {"cold_s": round(cold, 3), "median_s": round(med, 3),
                                "warm_s": [round(t, 3) for t in warm], "cpu_s": round(cpu, 3),
                                "cpu_s_per_thread": round(cpu / threads, 3)}
        print(f"{name:6s} cold {cold:7.2f} s/frame   warm median {med:7.2f} s/frame   "
              f"CPU {cpu:7.2f} s ({cpu / threads:.2f} s per thread)   runs {[round(t, 2) for t in warm]}", flush=True)
    r = res["results"]
    if "ort" in r and "torch" in r:
        print(f"ratio torch/ort: wall {r['torch']['median_s'] / r['ort']['median_s']:.2f}x, "
              f"CPU {r['torch']['cpu_s'] / r['ort']['cpu_s']:.2f}x")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
