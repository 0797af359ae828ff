#!/usr/bin/env python3
"""Where an int8 split plan's segment time goes, per op role: ONNX Runtime's own per-node profile.

    python scripts/profile_int8_ops.py [--config edvr-m] [--size 180x320] [--windows 3] [--isa avx2]

The int8 plan of the config (random weights, built through the plan cache as ``vsr upscale`` builds it) runs
``--windows`` windows of synthetic drifting frames with run-time scales (the first from the calibration's
scales, as a run starts), every segment in a profiled ONNX Runtime session (profile files in a temporary folder).  Per window it prints the seconds of each role: the int8 convolutions (QLinearConv, QLinearLeakyRelu),
the run-time scale path inside the graph (the u8 ReduceMax / ReduceMin that measure each activation's range, and
the bias re-quantization Mul/Div/Round/Cast that follows the input scale), the Quantize/Dequantize at fp32
boundaries, the fp32 ops, and the share of the re-runs (a saturated segment runs again: its nodes count twice).
What ``vsr report`` cannot show: ONNX Runtime times no node inside a session run without its profiler.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import warnings
from collections import defaultdict
from pathlib import Path

ROLES = (("scale reductions (ReduceMax/Min of u8)", lambda n, op: op in ("ReduceMax", "ReduceMin")),
         ("bias re-quantization", lambda n, op: "/bias_" in n),
         ("int8 convs", lambda n, op: op == "QLinearConv"),
         ("int8 LeakyRelu", lambda n, op: op == "QLinearLeakyRelu"),
         ("Quantize/Dequantize", lambda n, op: op in ("QuantizeLinear", "DequantizeLinear")),
         ("fp32 convs", lambda n, op: op in ("Conv", "FusedConv")))


def role(name: str, op: str) -> str:
    return next((r for r, test in ROLES if test(name, op)), "other fp32 ops")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="edvr-m")
    ap.add_argument("--size", default="180x320")
    ap.add_argument("--windows", type=int, default=3)
    ap.add_argument("--isa", default=None, help="force the int8 ISA (VSR_INT8_ISA), e.g. avx512-vnni")
    args = ap.parse_args()
    if args.isa:
        os.environ["VSR_INT8_ISA"] = args.isa
    import onnxruntime as ort

    from vsr.backends import SplitOptions, open_backend
    from vsr.plan.executor import plan_executor
    from vsr.plan.segments import session_options
    from vsr.quant import Int8SegmentBackend
    from vsr.quant.config import synthetic_frames
    from vsr.quant.segments import Int8SegmentRunner

    h, w = (int(v) for v in args.size.split("x"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        backend = open_backend("random", args.config, SplitOptions(precision="int8"))
    plan = backend.plan_for(backend.source(h, w))  # exports and builds the int8 plan (or takes it from the cache)
    tmp = Path(tempfile.mkdtemp(prefix="vsr-int8-profile-"))
    sessions = []

    class Profiled(Int8SegmentBackend):
        def load(self, path):
            runner = super().load(path)
            so = session_options(self.threads, spin=False, mem_pattern=False)
            so.enable_profiling = True
            so.profile_file_prefix = str(tmp / Path(path).stem)
            sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
            sessions.append(sess)
            return Int8SegmentRunner(sess, runner.table)

    segs = Profiled()
    runner = plan_executor(plan, segs)
    frames = synthetic_frames(args.windows + backend.num_frame, h, w)
    for i in range(args.windows):  # the first window starts from the calibration's scales, as a run does
        runner.run({plan.inputs[0]: frames[i:i + backend.num_frame][None]})
    files = [s.end_profiling() for s in sessions]
    totals: dict[str, float] = defaultdict(float)
    for f in files:
        for e in json.loads(Path(f).read_text()):
            if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
                totals[role(e["name"][:-len("_kernel_time")], e["args"].get("op_name", ""))] += e["dur"] / 1e6
    shutil.rmtree(tmp, ignore_errors=True)
    n = args.windows
    whole = sum(totals.values())
    print(f"{args.config} {h}x{w} int8 ({os.environ.get('VSR_INT8_ISA') or 'this CPU'}), {n} windows of "
          f"{backend.num_frame} frames (every frame's features per window), run-time scales")
    print(f"segment runs {segs.table.passes}, of which re-runs {segs.table.reruns}")
    for r, s in sorted(totals.items(), key=lambda kv: -kv[1]):
        print(f"  {r:42s} {s / n:7.3f} s/window  {100 * s / whole:5.1f} %")


if __name__ == "__main__":
    main()
