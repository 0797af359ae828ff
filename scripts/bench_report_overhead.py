"""What recording a run's timeline costs: per busy span, per backend step call, and as a share of a real run.

    python scripts/bench_report_overhead.py [RUN.json]

Compares ``StageTimer.busy()`` (which keeps a bounded sample of busy spans) with the same timer without the
sample, and ``StepTimes.add`` with the plain ``times[name] += dt`` a plan executor does without it; the reservoir
is filled past its bound first, so the measured path is the steady state of a long run.  Given a report, the
per-span and per-call costs are multiplied by that run's counts and divided by its wall time.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from contextlib import contextmanager

from vsr.report import RunReport, StageTimer, StepTimes
from vsr.report.sample import DEFAULT_INTERVALS

N = 200_000


class PlainTimer:
    """StageTimer's busy() without the interval sample: the baseline."""

    def __init__(self):
        self.busy_s = 0.0
        self._lock = threading.Lock()

    @contextmanager
    def busy(self):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            t1 = time.perf_counter()
            with self._lock:
                self.busy_s += t1 - t0


def per_call(fn, n: int = N, repeat: int = 5) -> float:
    """Best of ``repeat`` timings of ``fn(n)``, in seconds per call."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(n)
        best = min(best, time.perf_counter() - t0)
    return best / n


def spans(timer):
    def run(n):
        busy = timer.busy
        for _ in range(n):
            with busy():
                pass
    return run


def step_adds(times):
    def run(n):
        add, pc = times.add, time.perf_counter
        for _ in range(n):
            t0 = pc()
            add("segment00", t0, pc())
    return run


def dict_adds(times):
    def run(n):
        pc = time.perf_counter
        for _ in range(n):
            t0 = pc()
            times["segment00"] += pc() - t0
    return run


def main() -> None:
    timer = StageTimer("infer")
    spans(timer)(2 * DEFAULT_INTERVALS)  # past the bound: the steady state
    steps = StepTimes(["segment00"])
    step_adds(steps)(2 * DEFAULT_INTERVALS)
    span_cost = per_call(spans(timer)) - per_call(spans(PlainTimer()))
    step_cost = per_call(step_adds(steps)) - per_call(dict_adds({"segment00": 0.0}))
    print(f"busy span recorded: +{span_cost * 1e9:.0f} ns per span (StageTimer.busy vs no sample)")
    print(f"step call recorded: +{step_cost * 1e9:.0f} ns per call (StepTimes.add vs dict +=)")

    # the one-off cost at the end of a run: every stage and 15 steps full to the bound, to JSON
    full = [StageTimer(f"s{i}") for i in range(6)]
    for t in full:
        spans(t)(DEFAULT_INTERVALS)
    steps = StepTimes([f"step{i}" for i in range(15)])
    for i in range(15):
        for _ in range(DEFAULT_INTERVALS):
            t0 = time.perf_counter()
            steps.add(f"step{i}", t0, time.perf_counter())
    t0 = time.perf_counter()
    report = RunReport([t.stats() for t in full], {}, 1.0, 1, steps.totals(), step_stats=steps.stats())
    text = json.dumps(report.to_dict())
    print(f"report of a full timeline (6 stages, 15 steps, {DEFAULT_INTERVALS} spans each): "
          f"{time.perf_counter() - t0:.3f} s to build, {len(text) / 2**20:.1f} MiB of JSON")

    if len(sys.argv) > 1:
        run = json.loads(open(sys.argv[1], encoding="utf-8").read())
        seen = sum(v["seen"] for v in (run.get("timeline") or {}).get("stages", {}).values())
        calls = sum(r["calls"] or 0 for r in run.get("backend_steps", []))
        if not calls:  # a report without per-call records: one call per step per inference call
            infer = next(s for s in run["stages"] if s["name"] == "infer")["items"]
            calls = infer * sum(1 for r in run.get("backend_steps", []) if r["kind"] != "build")
        cost = seen * span_cost + calls * step_cost
        print(f"{sys.argv[1]}: {seen} busy spans + {calls} step calls in {run['wall_s']:.3f} s -> "
              f"{cost * 1e6:.0f} us = {100 * cost / run['wall_s']:.4f}% of the run")


if __name__ == "__main__":
    main()
