#!/usr/bin/env python3
"""Where the HR tail's time goes: the split plan's steps at output resolution, and ONNX Runtime's per-node profile.

    python scripts/profile_hr_tail.py [--config edvr-tiny] [--size 480x640] [--windows 2] [--bridge-ops ...]

The fp32 split plan of the config (random weights, built through the plan cache as ``vsr upscale`` builds it)
runs ``--windows`` windows of random frames, every segment in a profiled ONNX Runtime session.  It prints each
step's seconds per window and its share of the plan, then the nodes of the segments at output resolution
(those after the last PixelShuffle bridge, or the last segment where the plan has none): conv_hr, conv_last,
the bilinear base, ONNX Runtime's layout reorders (NCHW <-> NCHWc), per node.  ``vsr report`` shows the steps
but no node inside a segment: ONNX Runtime times nodes only with its profiler on.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import tempfile
import time
import warnings
from collections import defaultdict
from pathlib import Path

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="edvr-tiny")
    ap.add_argument("--size", default="480x640")
    ap.add_argument("--windows", type=int, default=2)
    ap.add_argument("--bridge-ops", default=None, help="comma-separated bridge op types (default: the plan's)")
    args = ap.parse_args()
    import onnxruntime as ort

    from vsr.backends import SplitOptions, open_backend
    from vsr.plan.executor import plan_executor
    from vsr.plan.segments import OrtSegmentBackend, OrtSegmentRunner, session_options

    h, w = (int(v) for v in args.size.split("x"))
    bridge_ops = tuple(args.bridge_ops.split(",")) if args.bridge_ops else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        backend = open_backend("random", args.config, SplitOptions(bridge_ops=bridge_ops))
    plan = backend.plan_for(backend.source(*backend.bucket(h, w)))
    tmp = Path(tempfile.mkdtemp(prefix="vsr-hrtail-profile-"))
    sessions = {}

    class Profiled(OrtSegmentBackend):
        def load(self, path):
            so = session_options(self.threads, spin=self.spin, mem_pattern=self.mem_pattern)
            so.enable_profiling = True
            so.profile_file_prefix = str(tmp / Path(path).stem)
            sess = ort.InferenceSession(str(path), so, providers=list(self.providers))
            sessions[Path(path).stem] = sess
            return OrtSegmentRunner(sess)

    runner = plan_executor(plan, Profiled())
    ex = getattr(runner, "windows", runner)
    rng = np.random.default_rng(0)
    x = rng.random((1, backend.num_frame, 3, *backend.bucket(h, w)), dtype=np.float32)
    runner.run({plan.inputs[0]: x})  # warm-up (first-run allocations): its step times are dropped below
    warm = dict(ex.timings()) | dict(getattr(runner, "front", ex).timings())
    t0, r0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(args.windows):
        runner.run({plan.inputs[0]: x})
    wall = (time.perf_counter() - t0) / args.windows
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = ((r1.ru_utime - r0.ru_utime) / args.windows, (r1.ru_stime - r0.ru_stime) / args.windows)
    steps = {k: (v - warm.get(k, 0.0)) / args.windows for k, v in runner.timings().items()}
    names = [s.name for s in plan.steps]
    d2s = [i for i, s in enumerate(plan.steps) if s.kind == "bridge" and s.op_type == "DepthToSpace"]
    tail_from = d2s[-1] if d2s else len(plan.steps) - 1
    tail = names[tail_from:]
    total = sum(steps.values())
    print(f"{args.config} LR {h}x{w} (bucket {backend.bucket(h, w)}), fp32 split plan, {args.windows} windows "
          f"after one warm-up; {wall:.3f} s/window wall, "
          f"CPU user {cpu[0]:.2f} s, system {cpu[1]:.2f} s")
    for k, v in steps.items():
        mark = "  HR tail" if k in tail else ""
        print(f"  {k:24s} {v:8.3f} s  {100 * v / total:5.1f} %{mark}")
    tail_s = sum(steps[k] for k in tail)
    print(f"  {'HR tail steps':24s} {tail_s:8.3f} s  {100 * tail_s / total:5.1f} %")
    nodes: dict[str, float] = defaultdict(float)
    ops: dict[str, str] = {}
    for name, sess in sessions.items():
        prof = sess.end_profiling()
        if name not in tail:
            continue
        runs = defaultdict(list)
        for e in json.loads(Path(prof).read_text()):
            if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
                node = e["name"][:-len("_kernel_time")]
                runs[node].append(e["dur"] / 1e6)
                ops[f"{name}/{node}"] = e["args"].get("op_name", "")
        for node, durs in runs.items():  # the warm-up run is in the profile too: the timed runs are the last
            nodes[f"{name}/{node}"] = sum(durs[-args.windows:]) / args.windows
    shutil.rmtree(tmp, ignore_errors=True)
    print("nodes of the HR tail's segments (ONNX Runtime profile, s per window, share of the whole plan):")
    for k, v in sorted(nodes.items(), key=lambda kv: -kv[1]):
        print(f"  {k:60s} {ops[k]:18s} {v:8.3f} s  {100 * v / total:5.1f} %")


if __name__ == "__main__":
    main()
