"""Calibration: activation ranges and per-layer sensitivity of every ``Conv``, measured with ONNX Runtime.

A *probe* is the whole fp32 graph plus, per conv, ``ReduceMin``/``ReduceMax`` of its input and output and a
shadow conv in the deployed int8 arithmetic (input and output fake-quantized with the calibration scales fed as
inputs, weights per-channel int8) whose squared error against the fp32 output is summed: the layer's
signal-to-quantization-noise ratio, ``sqnr_db``.  Two runs per calibration window: ranges first, then errors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from vsr.quant.rewrite import quantize_weights
from vsr.quant.scales import u8_params


@dataclass(frozen=True)
class ConvStats:
    """One conv: input/output tensor names and their ranges, and its int8 SQNR in dB (higher is safer)."""

    node: str
    weight: str
    x: str
    y: str
    x_range: tuple[float, float]
    y_range: tuple[float, float]
    sqnr_db: float




def _convs(model: onnx.ModelProto) -> list:
    inits = {t.name for t in model.graph.initializer}
    return [n for n in model.graph.node if n.op_type == "Conv" and len(n.input) > 1 and n.input[1] in inits]


def _fake_quant(t: str, p: str, nodes: list) -> str:
    nodes += [helper.make_node("QuantizeLinear", [t, f"{p}/s", f"{p}/z"], [f"{p}/q"]),
              helper.make_node("DequantizeLinear", [f"{p}/q", f"{p}/s", f"{p}/z"], [f"{p}/fq"])]
    return f"{p}/fq"


def probe_model(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list]:
    """The probe of ``model`` (see the module docstring) and its convs."""
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    convs = _convs(model)
    nodes, outs, new_inits, ins = list(g.node), [], [], []
    for i, n in enumerate(convs):
        x, y = n.input[0], n.output[0]
        for t, tag in ((x, f"c{i}/x"), (y, f"c{i}/y")):
            for op in ("ReduceMin", "ReduceMax"):
                nodes.append(helper.make_node(op, [t], [f"{tag}/{op}"], keepdims=0))
                outs.append(helper.make_tensor_value_info(f"{tag}/{op}", TensorProto.FLOAT, []))
            ins += [helper.make_tensor_value_info(f"{tag}/s", TensorProto.FLOAT, []),
                    helper.make_tensor_value_info(f"{tag}/z", TensorProto.UINT8, [])]
        w = numpy_helper.to_array(inits[n.input[1]]).astype(np.float32)
        wq, ws = quantize_weights(w)
        new_inits.append(numpy_helper.from_array(wq.astype(np.float32) * ws.reshape(-1, 1, 1, 1), f"c{i}/wfq"))
        xfq = _fake_quant(x, f"c{i}/x", nodes)
        shadow_in = [xfq, f"c{i}/wfq"] + list(n.input[2:])
        nodes.append(helper.make_node("Conv", shadow_in, [f"c{i}/ys"], **{a.name: helper.get_attribute_value(a)
                                                                           for a in n.attribute}))
        yfq = _fake_quant(f"c{i}/ys", f"c{i}/y", nodes)
        nodes += [helper.make_node("Sub", [yfq, y], [f"c{i}/d"]),
                  helper.make_node("ReduceSumSquare", [f"c{i}/d"], [f"c{i}/err"], keepdims=0),
                  helper.make_node("ReduceSumSquare", [y], [f"c{i}/sig"], keepdims=0)]
        outs += [helper.make_tensor_value_info(f"c{i}/err", TensorProto.FLOAT, []),
                 helper.make_tensor_value_info(f"c{i}/sig", TensorProto.FLOAT, [])]
    graph = helper.make_graph(nodes, "probe", list(g.input) + ins, list(g.output) + outs,
                              list(g.initializer) + new_inits, value_info=list(g.value_info))
    m = helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=model.ir_version)
    m.functions.extend(model.functions)
    return m, convs


def calibrate(model: onnx.ModelProto, windows: np.ndarray, threads: int | None = None) -> list[ConvStats]:
    """Ranges and SQNR of every conv of ``model`` over ``windows`` ``(K, N, T, 3, H, W)`` float32 in [0, 1]."""
    from vsr.plan.segments import session_options

    import onnxruntime as ort

    probe, convs = probe_model(model)
    sess = ort.InferenceSession(probe.SerializeToString(), session_options(threads),
                                providers=["CPUExecutionProvider"])
    in_name = model.graph.input[0].name
    lo = {}
    hi = {}
    unit = {}
    for i in range(len(convs)):
        for tag in (f"c{i}/x", f"c{i}/y"):
            unit[f"{tag}/s"], unit[f"{tag}/z"] = np.array(1.0, np.float32), np.array(0, np.uint8)
    names = [o.name for o in sess.get_outputs()]
    for x in windows:
        r = dict(zip(names, sess.run(None, {in_name: x, **unit})))
        for i in range(len(convs)):
            for tag in (f"c{i}/x", f"c{i}/y"):
                lo[tag] = min(lo.get(tag, math.inf), float(r[f"{tag}/ReduceMin"]))
                hi[tag] = max(hi.get(tag, -math.inf), float(r[f"{tag}/ReduceMax"]))
    feeds = {}
    for i in range(len(convs)):
        for tag in (f"c{i}/x", f"c{i}/y"):
            s, z = u8_params(lo[tag], hi[tag])
            feeds[f"{tag}/s"], feeds[f"{tag}/z"] = np.array(s, np.float32), np.array(z, np.uint8)
    err = np.zeros(len(convs))
    sig = np.zeros(len(convs))
    for x in windows:
        r = dict(zip(names, sess.run(None, {in_name: x, **feeds})))
        err += [float(r[f"c{i}/err"]) for i in range(len(convs))]
        sig += [float(r[f"c{i}/sig"]) for i in range(len(convs))]
    return [ConvStats(node=n.name, weight=n.input[1], x=n.input[0], y=n.output[0], x_range=(lo[f"c{i}/x"], hi[f"c{i}/x"]),
                      y_range=(lo[f"c{i}/y"], hi[f"c{i}/y"]),
                      sqnr_db=10.0 * math.log10(max(sig[i], 1e-30) / max(err[i], 1e-30)))
            for i, n in enumerate(convs)]
