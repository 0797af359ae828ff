"""``vsr bench --int8-account``: where an int8 frame's time goes, step by step, beside the fp32 one and beside
ONNX Runtime's own int8 of the same segments.

Three measurements on one model and frame size, each with its cases interleaved (paired ratios on a shared CPU):

* **in the plan**: the fp32 and the int8 split plans run the same windows (run-time scales, the first window from
  the calibration's, as a run starts; each frame's features steps divided by the window's frames, as a run that
  keeps them computes one frame's a window); per step: each segment, each bridge, each
  ``<segment>:rerun`` (a window whose scales saturated, run again);
* **each segment alone** on the inputs it had in that run: fp32, vsr's int8 (as the plan runs it: scales bound,
  each u8 tensor's code range measured by the graph) and **ONNX Runtime's QDQ** of the fp32 segment
  (``quantize_static``: per-channel int8 weights, u8 activations, static scales calibrated on those inputs): the
  int8 kernels' speed with none of vsr's run-time machinery;
* **inside vsr's int8 segments**, ONNX Runtime's per-node profile grouped by role (:data:`ROLES`): the int8
  convs (and the u8 ops between them), the range pass (u8 ``ReduceMax``/``ReduceMin``), the bias (added after
  each conv, or re-quantized to each input scale),
  the Quantize/Dequantize at fp32 boundaries (re-quantisation between segments and around the fp32 ops), the
  layout changes ONNX Runtime puts around its NHWC int8 convs (``Transpose``), the fp32 ops left.

What ``vsr report`` of two bench runs cannot show: ONNX Runtime times no node inside a session run without its
profiler, and no run of vsr holds an ORT-quantized segment.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Callable

import numpy as np

from vsr.leftovers import temp_folder

ROLES = (("range pass", lambda n, op: op in ("ReduceMax", "ReduceMin")),
         ("bias", lambda n, op: "/bias_" in n or n.endswith("/bias")),  # re-quantized per run, or added after
         ("int8 convs", lambda n, op: op in ("QLinearConv", "QLinearLeakyRelu", "QLinearAdd", "QLinearMul",
                                             "QLinearConcat")),
         ("Q/DQ", lambda n, op: op in ("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear")),
         ("layout", lambda n, op: op in ("Transpose", "ReorderInput", "ReorderOutput")),  # ORT's NHWC int8 convs
         ("fp32 convs", lambda n, op: op in ("Conv", "FusedConv")))
ROLE_NAMES = tuple(r for r, _ in ROLES) + ("fp32 other",)


def role(name: str, op: str) -> str:
    """The role of a profiled node (its name, its op type): one of :data:`ROLE_NAMES`."""
    return next((r for r, test in ROLES if test(name, op)), "fp32 other")


def int8_account(config: str | None, weights: str | None, size: tuple[int, int], threads: int | None = None,
                 windows: int = 2, reps: int = 2, say: Callable[[str], None] | None = None) -> dict:
    """The account (see the module docstring) of ``config`` at LR ``size``: ``windows`` windows of each plan,
    ``reps`` interleaved repetitions of each segment alone.  Returns ``{"steps": [row...], "totals": {...}}``."""
    from vsr.backends import SplitOptions, open_backend
    from vsr.quant.config import synthetic_frames

    say = say or (lambda message: None)
    h, w = size
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # --weights random says so once, from the bench
        fp32 = open_backend(weights or "random", config, SplitOptions(threads=threads))
        int8 = open_backend(weights or "random", config, SplitOptions(threads=threads, precision="int8"))
    say("building the fp32 and int8 plans (or taking them from the cache)")
    plans = {"fp32": fp32.plan_for(fp32.source(h, w)), "int8": int8.plan_for(int8.source(h, w))}
    frames = synthetic_frames(windows + fp32.num_frame, h, w)
    feeds = [{plans["fp32"].inputs[0]: frames[i:i + fp32.num_frame][None]} for i in range(windows)]
    say(f"running {windows} windows of each plan, interleaved")
    in_plan, captured = _in_plan(plans, feeds, threads)
    say("timing each segment alone: fp32, vsr int8, ONNX Runtime QDQ")
    alone = _alone(plans, captured, threads, reps, say)
    per_frame = {s.name for p in plans.values() for s in p.steps if s.per_frame}
    steps = []
    for name, kind in _step_kinds(plans):
        # a window computes its T frames' features; a run keeps each frame's (one new frame a window): per frame
        div = fp32.num_frame if name.split(":")[0] in per_frame else 1
        row = {"step": name, "kind": kind, "fp32_s": in_plan["fp32"].get(name), "int8_s": in_plan["int8"].get(name)}
        row |= alone.get(name, {})
        steps.append({k: v / div if k.endswith("_s") and v is not None else v for k, v in row.items()}
                     | {"per_frame": div > 1})
    return {"config": config, "size": [h, w], "windows": windows, "reps": reps, "steps": steps,
            "totals": _totals(steps, windows)}


def _step_kinds(plans: dict) -> list[tuple[str, str]]:
    """``(step, kind)`` in plan order: the int8 plan's steps, each segment followed by its re-runs, then any step
    only the fp32 plan has."""
    seen = []
    for s in plans["int8"].steps:
        seen.append((s.name, s.kind))
        if s.kind == "segment":
            seen.append((f"{s.name}:rerun", "rerun"))
    return seen + [(s.name, s.kind) for s in plans["fp32"].steps if (s.name, s.kind) not in seen]


class _Capturing:
    """A segment backend that keeps a copy of each segment's inputs at its last call."""

    def __init__(self, inner, store: dict):
        self.inner, self.store = inner, store
        self.precision, self.device, self.name = inner.precision, inner.device, inner.name
        self.kernels = getattr(inner, "kernels", None)

    def load(self, path: Path):
        runner, store, key = self.inner.load(path), self.store, Path(path).stem

        class Runner:
            def bind(self, inputs, outputs):
                call = runner.bind(inputs, outputs)

                def run():
                    store[key] = {k: v.copy() for k, v in inputs.items()}
                    return call()
                return run
        return Runner()


def _in_plan(plans: dict, feeds: list[dict], threads: int | None) -> tuple[dict, dict]:
    """Per-step seconds of each plan over ``feeds`` (windows alternating between the plans), and the fp32 plan's
    segment inputs of the last window (by segment file stem)."""
    from vsr.plan.executor import plan_executor
    from vsr.plan.segments import OrtSegmentBackend
    from vsr.quant import Int8SegmentBackend

    captured: dict = {}
    int8_segments = Int8SegmentBackend(threads=threads)
    runners = {"fp32": plan_executor(plans["fp32"], _Capturing(OrtSegmentBackend(threads=threads), captured)),
               "int8": plan_executor(plans["int8"], int8_segments, int8_segments.kernels)}
    for name, runner in runners.items():  # warm-up, outside the clock; the int8 scales untouched
        with int8_segments.held() if name == "int8" else contextlib.nullcontext():
            runner.run(feeds[0])
    before = {name: dict(r.timings()) for name, r in runners.items()}
    int8_segments.reset()  # the first window from the calibration's scales, as a run starts
    for feed in feeds:
        for runner in runners.values():
            runner.run(feed)
    n = len(feeds)
    times = {name: {k: (v - before[name].get(k, 0.0)) / n for k, v in r.timings().items()}
             for name, r in runners.items()}
    return times, captured


def _alone(plans: dict, captured: dict, threads: int | None, reps: int, say) -> dict:
    """Each segment alone on its captured inputs: ``{step: {fp32_alone_s, int8_alone_s, qdq_s, roles}}``."""
    from vsr.plan.segments import OrtSegmentBackend
    from vsr.quant import Int8SegmentBackend

    tmp = temp_folder("vsr-int8-account-")  # (a killed run's is removed by the next one)
    out = {}
    try:
        int8_steps = {s.name: s for s in plans["int8"].steps if s.kind == "segment"}
        for s in plans["fp32"].steps:
            stem = Path(s.file).stem if s.kind == "segment" else None
            if stem not in captured or s.name not in int8_steps:
                continue
            say(f"  {s.name}")
            inputs = captured[stem]
            fp32_path = plans["fp32"].directory / s.file
            int8_path = plans["int8"].directory / int8_steps[s.name].file
            sessions = {"fp32": OrtSegmentBackend(threads=threads).load(fp32_path).session,
                        "qdq": _qdq_session(fp32_path, inputs, tmp, threads)}
            int8_segments = Int8SegmentBackend(threads=threads)
            int8_runner = int8_segments.load(int8_path)
            calls = {name: (lambda sess=sess: sess.run(None, inputs)) for name, sess in sessions.items()}
            calls["int8"] = _bound_int8(int8_runner, inputs)
            with int8_segments.held():
                row = _interleaved(calls, reps)
                row["roles"] = _profiled_roles(int8_path, int8_runner, inputs, tmp, threads)
            out[s.name] = row
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _bound_int8(runner, inputs: dict) -> Callable[[], object]:
    """vsr's int8 segment as the plan runs it: inputs and outputs bound once, scales fed from the table."""
    feeds = dict(inputs) | runner.scale_feeds()
    names = [o.name for o in runner.session.get_outputs()]
    results = runner.session.run(names, feeds)
    outputs = {k: v for k, v in zip(names, results) if not k.endswith(("__qmax", "__qmin"))}
    return runner.bind(inputs, outputs)


def _interleaved(calls: dict, reps: int) -> dict:
    """Each call once outside the clock, then ``reps`` rounds of all of them: median seconds by name."""
    for call in calls.values():
        call()
    times = defaultdict(list)
    for _ in range(reps):
        for name, call in calls.items():
            t0 = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - t0)
    return {f"{name}_alone_s" if name != "qdq" else "qdq_s": float(np.median(v)) for name, v in times.items()}


def _qdq_session(fp32_path: Path, inputs: dict, tmp: Path, threads: int | None):
    """ONNX Runtime's own static QDQ int8 of the fp32 segment, calibrated on ``inputs``: its session."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    from vsr.plan.segments import OrtSegmentBackend

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.items = iter([inputs])

        def get_next(self):
            return next(self.items, None)

    out = tmp / f"{fp32_path.stem}.qdq.onnx"
    with _quiet_root_log():  # its advice to pre-process the model, once per segment
        quantize_static(str(fp32_path), str(out), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    return OrtSegmentBackend(threads=threads).load(out).session


@contextlib.contextmanager
def _quiet_root_log():
    import logging

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)


def _profiled_roles(int8_path: Path, runner, inputs: dict, tmp: Path, threads: int | None) -> dict:
    """Seconds by role (:data:`ROLE_NAMES`) of one run of vsr's int8 segment, from ONNX Runtime's profiler (the
    second of two runs: the first allocates)."""
    import onnxruntime as ort

    from vsr.plan.segments import session_options

    so = session_options(threads, spin=False, mem_pattern=False)
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp / f"{int8_path.stem}.profile")
    sess = ort.InferenceSession(str(int8_path), so, providers=["CPUExecutionProvider"])
    feeds = dict(inputs) | runner.scale_feeds()
    sess.run(None, feeds)
    sess.run(None, feeds)
    last = {}  # node -> its last event: the second run's
    for e in json.loads(Path(sess.end_profiling()).read_text()):
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            last[e["name"]] = e
    roles = {r: 0.0 for r in ROLE_NAMES}
    for name, e in last.items():
        roles[role(name[:-len("_kernel_time")], e["args"].get("op_name", ""))] += e["dur"] / 1e6
    return {k: round(v, 4) for k, v in roles.items()}


def _totals(steps: list[dict], windows: int) -> dict:
    def total(kind: str, key: str) -> float:
        return round(sum(r.get(key) or 0.0 for r in steps if r["kind"] == kind), 4)

    out = {f"{kind}_{key}": total(kind, key) for kind in ("segment", "bridge", "rerun")
           for key in ("fp32_s", "int8_s")}
    out |= {f"segment_{k}": total("segment", k) for k in ("fp32_alone_s", "int8_alone_s", "qdq_s")}
    return out


def render_account(data: dict) -> str:
    """The account as a text table: per step, the plan's fp32 and int8 seconds, each segment alone (fp32, vsr
    int8, ORT QDQ) and vsr's int8 segment by role (shares of its profiled time)."""
    from vsr.report.render import table

    def sec(v) -> str:
        return "-" if v is None else f"{v:.3f}"

    def ratio(a, b) -> str:
        return "-" if not a or not b else f"{a / b:.2f}x"

    rows = []
    for r in data["steps"]:
        if r["kind"] == "rerun" and not r.get("int8_s"):
            continue
        roles = r.get("roles") or {}
        whole = sum(roles.values())
        share = "  ".join(f"{k} {100 * v / whole:.0f}%" for k, v in roles.items() if whole and v / whole >= 0.01)
        rows.append([r["step"] + (" /frame" if r.get("per_frame") else ""), r["kind"], sec(r.get("fp32_s")),
                     sec(r.get("int8_s")), ratio(r.get("fp32_s"), r.get("int8_s")), sec(r.get("fp32_alone_s")),
                     sec(r.get("int8_alone_s")), sec(r.get("qdq_s")), ratio(r.get("fp32_alone_s"), r.get("qdq_s")),
                     ratio(r.get("int8_alone_s"), r.get("qdq_s")), share])
    t = data["totals"]
    h, w = data["size"]
    head = (f"int8 account: {data['config'] or 'default config'} at LR {h}x{w}; in the plan: seconds per window, "
            f"{data['windows']} windows of each plan interleaved; alone: median of {data['reps']} interleaved runs")
    foot = [f"segments in the plan: fp32 {t['segment_fp32_s']:.3f} s, int8 {t['segment_int8_s']:.3f} s "
            f"({ratio(t['segment_fp32_s'], t['segment_int8_s'])}); re-runs {t['rerun_int8_s']:.3f} s; bridges: fp32 "
            f"{t['bridge_fp32_s']:.3f} s, int8 {t['bridge_int8_s']:.3f} s "
            f"({ratio(t['bridge_fp32_s'], t['bridge_int8_s'])})",
            f"segments alone: fp32 {t['segment_fp32_alone_s']:.3f} s, vsr int8 {t['segment_int8_alone_s']:.3f} s "
            f"({ratio(t['segment_fp32_alone_s'], t['segment_int8_alone_s'])}), ORT QDQ {t['segment_qdq_s']:.3f} s "
            f"({ratio(t['segment_fp32_alone_s'], t['segment_qdq_s'])})",
            "speed: fp32 time / int8 time; vsr/QDQ: vsr's int8 time / ORT QDQ's (1.00x: vsr's machinery costs "
            "nothing); roles: shares of vsr's int8 segment in ONNX Runtime's profile"]
    body = table(["step", "kind", "fp32 s", "int8 s", "speed", "alone fp32", "alone int8", "ORT QDQ",
                  "QDQ speed", "vsr/QDQ", "vsr int8 by role"], rows, right=True)
    return "\n".join([head, "", body, ""] + foot)
