"""How long CPU training waits for its batches, with the batches made in the training process (``--workers 0``)
and by worker processes (issue 31): ``vsr train`` runs of EDVR-tiny, batch 16, LR patch 32, on the shared
training images and videos, the worker counts alternated run by run.

    python scripts/bench_train_workers.py --out DIR [--iters 40] [--workers 0 1] [--rounds 1]
    python scripts/bench_train_workers.py --out DIR --batches [--count 8]

For each run, from its ``log.jsonl``: the training loop's time, the part of it the steps waited for batches
(``data_wait_s``), it/s -- over the whole run, and steady (each run's first logged stretch left out: it holds
the first batch, the decoding of the video segments and the workers' start) -- and the process's wall time, with
the load average before and after.  Prints a Markdown table and writes DIR/bench_train_workers.json.

``--batches``: seconds to make one batch from the training images (no model), as ``vsr train --workers 0`` makes
it (numpy's BLAS, OpenCV with their default threads) and as a worker does (one thread each), alternated, for
EDVR-tiny's (3 frames, batch 16, LR patch 32) and the GPU slice's (5 frames, batch 32, LR patch 48).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from scripts.gpu_train import steady_rate  # noqa: E402

DATA = REPO.parent / "shared" / "data" / "train"


def loop_time(log: Path) -> tuple[float, float, int]:
    """``(seconds, waited, iterations)`` of every logged stretch of a run."""
    last, secs, waited = 0, 0.0, 0.0
    for rec in map(json.loads, log.read_text().splitlines()):
        if rec.get("event") == "train":
            secs += (rec["iteration"] - last) / rec["it_per_s"]
            waited += rec["data_wait_s"]
            last = rec["iteration"]
    return secs, waited, last


def one_run(out: Path, workers: int, iters: int, data: list[str]) -> dict:
    cmd = [sys.executable, "-m", "vsr", "train", "--config", "edvr-tiny", "--data", *data, "--iters", str(iters),
           "--batch-size", "16", "--patch", "32", "--val", "none", "--ckpt-every", str(iters), "--workers",
           str(workers), "--no-progress", "--out", str(out)]
    load = os.getloadavg()[0]
    t0 = time.time()
    subprocess.run(cmd, check=True, cwd=REPO, stdout=subprocess.DEVNULL)
    wall = time.time() - t0
    secs, waited, its = loop_time(out / "log.jsonl")
    steady = steady_rate(out / "log.jsonl")
    return {"workers": workers, "iterations": its, "process_s": round(wall, 1), "loop_s": round(secs, 1),
            "data_wait_s": round(waited, 1), "data_wait_share": round(waited / secs, 3),
            "it_per_s": round(its / secs, 4), "steady_it_per_s": steady["it_per_s"],
            "steady_data_wait_share": steady["data_wait_share"], "load_before": round(load, 2),
            "load_after": round(os.getloadavg()[0], 2)}


BATCH_CODE = """
import sys, time, cv2, numpy as np
from vsr.train.data import FramePool, PairSampler, find_sources
if sys.argv[1] == "1":
    cv2.setNumThreads(1)
t, n, p, count = map(int, sys.argv[2:6])
s = PairSampler(FramePool(find_sources(sys.argv[6:])), num_frame=t, lr_patch=p, batch_size=n, seed=0,
                video_fraction=0.0)
s.batch_uint8(0)
times = []
for i in range(1, count + 1):
    t0 = time.perf_counter(); s.batch_uint8(i); times.append(time.perf_counter() - t0)
print(float(np.median(times)))
"""
ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def batch_seconds(count: int, images: str) -> list[dict]:
    """Median seconds per batch, default threads and one thread alternated, for the two batch shapes."""
    rows = []
    for t, n, p in ((3, 16, 32), (5, 32, 48)):
        row = {"frames": t, "batch": n, "patch": p}
        for one in (False, True):
            env = {**os.environ, **(ONE_THREAD if one else {})}
            out = subprocess.run([sys.executable, "-c", BATCH_CODE, str(int(one)), str(t), str(n), str(p),
                                  str(count), images], env=env, cwd=REPO, check=True, capture_output=True, text=True)
            row["one_thread_s" if one else "default_threads_s"] = round(float(out.stdout.split()[-1]), 3)
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="a folder for the runs (their logs stay there)")
    p.add_argument("--iters", type=int, default=40)
    p.add_argument("--workers", type=int, nargs="+", default=[0, 1])
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--data", nargs="+", default=[str(DATA / "images"), str(DATA / "videos")])
    p.add_argument("--batches", action="store_true", help="time batch making alone (see the module docstring)")
    p.add_argument("--count", type=int, default=8, help="--batches: timed batches per case")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.batches:
        load = os.getloadavg()[0]
        rows = batch_seconds(args.count, str(DATA / "images"))
        print("| frames, batch, LR patch | default threads s | one thread s | load before/after |\n|---|---:|---:|---|")
        for r in rows:
            print(f"| {r['frames']}, {r['batch']}, {r['patch']} | {r['default_threads_s']} | {r['one_thread_s']} | "
                  f"{load:.2f}/{os.getloadavg()[0]:.2f} |")
        (out / "bench_batches.json").write_text(json.dumps(rows, indent=1))
        return 0
    runs = [one_run(out / f"r{r}-w{w}", w, args.iters, args.data) for r in range(args.rounds) for w in args.workers]
    print("| workers | loop s | waited s | share | steady share | it/s | steady it/s | process s | load before/after |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in runs:
        print(f"| {r['workers']} | {r['loop_s']} | {r['data_wait_s']} | {r['data_wait_share']:.1%} | "
              f"{r['steady_data_wait_share']:.1%} | {r['it_per_s']} | {r['steady_it_per_s']} | {r['process_s']} | "
              f"{r['load_before']}/{r['load_after']} |")
    (out / "bench_train_workers.json").write_text(json.dumps({"cpus": os.cpu_count(), "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
