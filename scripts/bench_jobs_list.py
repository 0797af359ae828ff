"""How long ``vsr jobs list`` takes while a worker computes (issue 32): the whole command, and the store read.

    python scripts/bench_jobs_list.py [--lists 5] [--before /work/main] [--frames 120]

Queues one job (a generated 96x64 clip, edvr-tiny with random weights on torch, all cores: a worker that keeps
the CPU busy, as a real one does), starts ``vsr jobs run``, waits until the job runs, then times ``vsr jobs
list`` processes of this checkout and, with ``--before TREE``, of another checkout (e.g. the code before the
fix), alternated so both see the same machine; and the store read alone (:meth:`JobStore.jobs` in a process
that has imported vsr already).  Prints the medians and the slowest read.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

READ = ("import sys, time; from vsr.jobs.store import JobStore; s = JobStore(sys.argv[1], write=False); "
        "t = time.perf_counter(); s.jobs(); print(time.perf_counter() - t)")


def timed(cmd: list[str], tree: Path) -> tuple[float, str]:
    """Seconds and output of ``cmd`` run with ``tree``'s vsr (``python -m`` puts the current folder first)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True, cwd=tree)
    return time.perf_counter() - t0, p.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lists", type=int, default=5, help="list processes per tree")
    ap.add_argument("--before", type=Path, default=None, help="another checkout to time beside this one")
    ap.add_argument("--frames", type=int, default=120, help="frames of the job the worker computes")
    args = ap.parse_args()
    from tests.conftest import Clip, write_clip

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        clip = write_clip(tmp / "clip.mkv", Clip(width=96, height=64, frames=args.frames))
        store = tmp / "q.db"
        vsr = [sys.executable, "-m", "vsr"]
        subprocess.run([*vsr, "jobs", "add", clip, "--out-dir", tmp / "out", "--store", store, "--weights",
                        "random", "--config", "edvr-tiny", "--backend", "torch", "--codec", "ffv1"], check=True,
                       capture_output=True, env={**os.environ, "PYTHONPATH": str(REPO)})
        worker = subprocess.Popen([*vsr, "jobs", "run", "--until-empty", "--quiet", "--store", store],
                                  env={**os.environ, "PYTHONPATH": str(REPO)}, stderr=subprocess.DEVNULL)
        try:
            while "running" not in timed([*vsr, "jobs", "list", "--store", str(store)], REPO)[1]:
                time.sleep(0.5)
            trees = {"this checkout": REPO, **({f"{args.before}": args.before} if args.before else {})}
            times: dict[str, list[float]] = {name: [] for name in trees}
            reads = []
            for _ in range(args.lists):
                for name, tree in trees.items():
                    times[name].append(timed([*vsr, "jobs", "list", "--store", str(store)], tree)[0])
                reads.append(float(timed([sys.executable, "-c", READ, str(store)], REPO)[1]))
            still = worker.poll() is None
        finally:
            worker.terminate()
            worker.wait()
    for name, t in times.items():
        print(f"vsr jobs list ({name}): median {statistics.median(t):.2f} s, max {max(t):.2f} s over {len(t)}")
    print(f"store read alone (JobStore.jobs): median {statistics.median(reads) * 1000:.1f} ms, "
          f"max {max(reads) * 1000:.1f} ms")
    print("the worker ran throughout" if still else "the worker finished before the last list: use more --frames")


if __name__ == "__main__":
    main()
