#!/usr/bin/env python3
"""The int8 ceiling of this CPU: ONNX Runtime fp32 ``Conv`` vs vsr's int8 ``QLinearConv`` on EDVR-M's conv shapes.

    python scripts/bench_qconv.py [--reps 9] [--threads N]

Each case is a chain of ``--depth`` 3x3 convs with ReLU between them (the shape of EDVR's residual trunks), as
an fp32 ONNX graph and as the same graph rewritten by :func:`vsr.quant.rewrite.quantize_segment` (u8 activations
between the convs, one QuantizeLinear at the input, one DequantizeLinear at the output, scales fed as inputs).
Both run in one process, interleaved rep by rep; the figure is the median of the per-rep fp32/int8 ratios.  No
int8 plan can be faster than its convs: this bounds what ``--precision int8`` can gain on the machine.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from vsr.plan.segments import session_options
from vsr.quant.rewrite import SCALE, ZERO, quantize_segment
from vsr.quant.scales import u8_params

# (name, channels in, channels out, LR height, LR width) of EDVR-M at LR 180x320
CASES = [("trunk 64->64 @180x320", 64, 64, 180, 320), ("upconv 64->256 @180x320", 64, 256, 180, 320),
         ("upconv 64->256 @360x640", 64, 256, 360, 640), ("hr 64->64 @720x1280", 64, 64, 720, 1280)]


def conv_chain(cin: int, cout: int, depth: int, seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    nodes, inits, x = [], [], "x"
    for i in range(depth):
        ci, co = (cin if i == 0 else cout), cout
        w = rng.normal(0, (2.0 / (9 * ci)) ** 0.5, (co, ci, 3, 3)).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(np.zeros(co, np.float32), f"b{i}")]
        nodes.append(helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], name=f"conv{i}", pads=[1] * 4))
        x = f"c{i}"
        if i + 1 < depth:
            nodes.append(helper.make_node("Relu", [x], [f"r{i}"], name=f"relu{i}"))
            x = f"r{i}"
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _ranges(model: onnx.ModelProto, x: np.ndarray, threads: int | None) -> dict[str, tuple[float, float]]:
    import onnxruntime as ort

    m = onnx.ModelProto()
    m.CopyFrom(model)
    names = [o for n in m.graph.node for o in n.output]
    m.graph.output.extend(helper.make_tensor_value_info(t, TensorProto.FLOAT, None) for t in names
                          if t not in {o.name for o in m.graph.output})
    sess = ort.InferenceSession(m.SerializeToString(), session_options(threads), providers=["CPUExecutionProvider"])
    outs = sess.run(names, {"x": x})
    ranges = {t: (float(v.min()), float(v.max())) for t, v in zip(names, outs)}
    ranges["x"] = (float(x.min()), float(x.max()))
    return ranges


def _sessions(model, x, threads):
    import onnxruntime as ort

    q = quantize_segment(model, {n.name for n in model.graph.node if n.op_type == "Conv"})
    ranges = _ranges(model, x, threads)
    feeds = {"x": x}
    for t in q.tensors:
        s, z = u8_params(*ranges[t], relu=t in q.relu)
        feeds[t + SCALE], feeds[t + ZERO] = np.array(s, np.float32), np.array(z, np.uint8)
    so = session_options(threads)
    fp32 = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    int8 = ort.InferenceSession(q.model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return (fp32, {"x": x}), (int8, feeds)


def bench_case(cin, cout, h, w, depth, reps, threads) -> dict:
    x = np.random.default_rng(1).normal(0, 1, (1, cin, h, w)).astype(np.float32)
    (fs, ff), (qs, qf) = _sessions(conv_chain(cin, cout, depth), x, threads)
    out = fs.get_outputs()[0].name
    ref, got = fs.run([out], ff)[0], qs.run([out], qf)[0]  # warm-up, and the int8 error
    err = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
    tf, tq = [], []
    for i in range(reps):
        for name, s, f, acc in (("f", fs, ff, tf), ("q", qs, qf, tq))[:: 1 if i % 2 == 0 else -1]:
            t0 = time.perf_counter()
            s.run([out], f)
            acc.append(time.perf_counter() - t0)
    gflop = 2 * 9 * h * w * (cin * cout + (depth - 1) * cout * cout) / 1e9
    return {"fp32_ms": round(1e3 * statistics.median(tf), 1), "int8_ms": round(1e3 * statistics.median(tq), 1),
            "ratio_median_of_reps": round(statistics.median(a / b for a, b in zip(tf, tq)), 3),
            "fp32_gflops": round(gflop / statistics.median(tf), 1),
            "int8_gops": round(gflop / statistics.median(tq), 1), "int8_rel_rms": round(err, 4)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    import onnxruntime as ort

    print(f"machine: {platform.processor() or platform.machine()}; onnxruntime {ort.__version__}; "
          f"chains of {args.depth} convs, {args.reps} interleaved reps")
    results = {}
    for name, cin, cout, h, w in CASES:
        results[name] = r = bench_case(cin, cout, h, w, args.depth, args.reps, args.threads)
        print(f"{name:26s} fp32 {r['fp32_ms']:8.1f} ms ({r['fp32_gflops']:5.1f} GFLOP/s)  int8 {r['int8_ms']:8.1f} ms "
              f"({r['int8_gops']:5.1f} GOP/s)  fp32/int8 {r['ratio_median_of_reps']:.2f}  int8 rel. RMS "
              f"{r['int8_rel_rms']:.3f}", flush=True)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
