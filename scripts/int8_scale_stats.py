#!/usr/bin/env python3
"""int8 run-time scales: record every window's activation ranges on real content, then replay rules on them.

    python scripts/int8_scale_stats.py record OUT.jsonl INPUT [--weights W] [--config C] [--frames A:B]
    python scripts/int8_scale_stats.py replay OUT.jsonl [MORE.jsonl ...] [--margin 1.25,1.5] [--start 2,4]
                                               [--memory 1,8]

``record`` runs ``vsr upscale INPUT`` on the int8 split plan (output thrown away) and writes one JSON line per
segment run whose output was kept: the measured range of each of its u8 activations (and one line per context
change: tiles, scene cuts), after a first line with every activation's calibration range.

``replay`` feeds those ranges back through :class:`vsr.quant.scales.ScaleTable` as codes, for every rule of the
grid (the other fields from ``configs/quant/scales.toml``), and prints per trace the re-runs among the segment
runs and the bits of u8 resolution the predicted ranges give away on average (log2 of the range used over the
range measured).  A replay knows each window's final ranges at once, so where one tensor's saturation hid a
later one's for a pass, the real run re-ran more often than its replay says.  It also prints the statistics the rule's values come from: how much a tensor's range grows
past the widest of the ``memory`` windows before it (quantiles), and how far a stream's first measured ranges
lie from the calibration's.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

from vsr.quant.scales import ScaleRule, ScaleTable


def record(args) -> None:
    from vsr.backends import BackendRequest, SplitOptions
    from vsr.pipeline import RunnerSettings, upscale

    backend = BackendRequest(weights=args.weights, config=args.config, options=SplitOptions(precision="int8")).open()
    table = backend.segment_backend.table
    out = open(args.out, "w", encoding="utf-8")
    select, started = table.select, []

    def write(event: dict) -> None:
        if not started:  # first the calibration ranges (every segment is loaded by then)
            started.append(out.write(json.dumps({
                "calibration": {n: [*t.calib, t.relu] for n, t in table.tensors.items()},
                "input": args.input, "weights": args.weights, "config": args.config}) + "\n"))
        out.write(json.dumps(event) + "\n")

    def on_select(context, anew=False):
        select(context, anew)
        if anew:
            write({"context": list(context or ()), "anew": True})

    def on_run(names, ranges):
        write({"names": names, "ranges": [[round(lo, 6), round(hi, 6)] for lo, hi in ranges]})

    table.select, table.recorder = on_select, on_run
    frames = tuple(int(v) if v else None for v in args.frames.split(":")) if args.frames else (0, None)
    with tempfile.TemporaryDirectory(prefix="vsr-scale-stats-") as tmp:
        upscale(args.input, Path(tmp) / "out.mkv", backend=backend, runner=RunnerSettings(frames=frames))
    out.close()
    print(f"{args.out}: {table.passes} segment runs, {table.reruns} re-runs")


def load(path: str) -> tuple[dict, list[dict]]:
    lines = [json.loads(line) for line in Path(path).read_text().splitlines()]
    head = next(line for line in lines if "calibration" in line)
    return head, [line for line in lines if "calibration" not in line]


def replay(head: dict, events: list[dict], rule: ScaleRule) -> tuple[int, int, float]:
    """``(segment runs, re-runs, mean bits given away)`` of ``rule`` on a recorded trace."""
    table = ScaleTable("runtime", rule)
    for name, (lo, hi, relu) in head["calibration"].items():
        table.add(name, lo, hi, relu)
    bits = []
    for e in events:
        if "anew" in e:
            table.select(tuple(e["context"]), True)
            continue
        ts = [table.tensors[n] for n in e["names"]]
        passes = 1
        while True:
            used = [t.hi - (0.0 if t.relu else t.lo) for t in ts]  # the range this pass runs with
            if not table.after_run(e["names"], *_codes(ts, e["ranges"]), passes):
                break
            table.reruns += 1
            passes += 1
        for u, (lo, hi) in zip(used, e["ranges"]):
            bits.append(math.log2(max(u, 1e-12) / max(max(hi, 0.0) - min(lo, 0.0), u / 256)))
    return table.passes, table.reruns, float(np.mean(bits)) if bits else 0.0


def _codes(ts, ranges) -> tuple[list[int], list[int]]:
    """The largest and smallest u8 code each tensor's measured range takes with the scales in use."""
    qmax, qmin = [], []
    for t, (lo, hi) in zip(ts, ranges):
        s, z = float(t.scale), int(t.zero)
        qmax.append(int(np.clip(round(hi / s) + z, 0, 255)))
        qmin.append(int(np.clip(round(lo / s) + z, 0, 255)))
    return qmax, qmin


def growth(head: dict, events: list[dict], memory: int) -> dict[str, np.ndarray]:
    """Per side: each window's range over the widest of the ``memory`` windows before it (same tensor,
    context and scene); and each tensor's first range over its calibration range."""
    recent: dict[str, list] = {}
    out = {"hi": [], "lo": [], "first/calibration": []}
    for e in events:
        if "anew" in e:
            recent = {}
            continue
        for n, (lo, hi) in zip(e["names"], e["ranges"]):
            c_lo, c_hi, _ = head["calibration"][n]
            past = recent.setdefault(n, [])
            if not past:
                out["first/calibration"] += [hi / c_hi] if c_hi > 0 else []
                out["first/calibration"] += [lo / c_lo] if c_lo < 0 and lo < 0 else []
            else:
                p_lo, p_hi = min(r[0] for r in past), max(r[1] for r in past)
                out["hi"] += [hi / p_hi] if p_hi > 0 else []
                out["lo"] += [lo / p_lo] if p_lo < 0 and lo < 0 else []
            past.append((lo, hi))
            del past[:-memory]
    return {k: np.array(v) for k, v in out.items()}


def report(args) -> None:
    traces = {Path(p).stem: load(p) for p in args.traces}
    base = ScaleRule.load()
    q = (0.5, 0.99, 0.999, 1.0)
    print(f"base rule: {base}")
    for name, (head, events) in traces.items():
        g = growth(head, events, base.memory)
        print(f"{name} ({head['config'] or head['weights']}, {head['input']}): quantiles {q} of")
        for k, v in g.items():
            print(f"  {k:18s} " + (" ".join(f"{x:6.3f}" for x in np.quantile(v, q)) if len(v) else "-")
                  + f"   ({len(v)} values)")
    grid = itertools.product(*(sorted({float(v) for v in s.split(",")}) for s in (args.margin, args.start)),
                             sorted({int(v) for v in args.memory.split(",")}))
    print("\nrule (margin, start, memory): per trace re-runs / segment runs, mean bits given away")
    for margin, start, memory in grid:
        rule = replace(base, margin=margin, start=start, memory=memory)
        cells = []
        for name, (head, events) in traces.items():
            runs, reruns, bits = replay(head, events, rule)
            cells.append(f"{name} {reruns:3d}/{runs:4d} ({100 * reruns / max(runs, 1):4.1f} %) {bits:4.2f} b")
        print(f"{margin:5.2f} {start:5.2f} {memory:3d} | " + " | ".join(cells))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("out")
    r.add_argument("input")
    r.add_argument("--weights", default="default")
    r.add_argument("--config", default=None)
    r.add_argument("--frames", default=None, help="A:B")
    p = sub.add_parser("replay")
    p.add_argument("traces", nargs="+")
    p.add_argument("--margin", default="1.25")
    p.add_argument("--start", default="2")
    p.add_argument("--memory", default="8")
    args = ap.parse_args(argv)
    record(args) if args.cmd == "record" else report(args)


if __name__ == "__main__":
    sys.exit(main())
