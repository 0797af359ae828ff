"""An fp32 ONNX segment -> the same segment with chosen ``Conv`` nodes in int8, scales fed at run time.

For each int8 conv ``y = Conv(x, W, b)``::

    x_q   = QuantizeLinear(x, x__qs, x__qz)                    (skipped when x is already a u8 tensor)
    y_q   = QLinearConv(x_q, x__qs, x__qz, W_q, w_s, 0, y__qs, y__qz, b_q)     u8 x s8 -> u8 (VNNI)
    b_q   = int32(round(b / (x__qs * w_s)))                   computed in the graph: x__qs is an input
    y     = DequantizeLinear(y_q, y__qs, y__qz)                only where an fp32 consumer needs y

Weights are symmetric int8 per output channel (``w_s = max|W_c| / qmax``: 7 bits, or 8 where the CPU has VNNI, see
:mod:`vsr.quant.isa`); activations are u8, asymmetric, per
tensor, and every activation's scale (``T__qs`` float32 scalar) and zero point (``T__qz`` uint8 scalar) are
graph inputs: :mod:`vsr.quant.scales` feeds them before each run.  A ``Relu`` that is a conv's only consumer
is folded into the conv (its output range starts at 0 with zero point 0, so the u8 clamp is the ReLU); a
``LeakyRelu`` becomes ``com.microsoft.QLinearLeakyRelu`` on u8.  Each u8 tensor also gets two scalar outputs,
``T__qmax`` / ``T__qmin`` (its largest and smallest code), from which the run-time scales detect saturation
and measure the range for the next window.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MS_DOMAIN = "com.microsoft"
SCALE, ZERO, QMAX, QMIN = "__qs", "__qz", "__qmax", "__qmin"


@dataclass
class QuantizedSegment:
    """The rewritten model and the activation tensors it quantizes (``relu``: zero point pinned to 0)."""

    model: onnx.ModelProto
    tensors: list[str] = field(default_factory=list)
    relu: set[str] = field(default_factory=set)
    convs: list[str] = field(default_factory=list)


# Weights use 7 of the 8 bits by default: on an x86 CPU without VNNI (AVX2 only, as the machine this was
# measured on) ONNX Runtime's u8 x s8 kernels add pairs of products in int16 (vpmaddubsw), which saturates once
# 2 * 255 * |w| > 32767; |w| <= 63 can never overflow (ONNX Runtime's own ``reduce_range``).  Plans for a CPU
# with VNNI or AMX use all 8 (vsr.quant.isa).
WEIGHT_QMAX = 63


def weight_scales(w: np.ndarray, qmax: int = WEIGHT_QMAX) -> np.ndarray:
    """``(C_out, ...)`` fp32 weights -> ``(C_out,)`` symmetric scales (max |w| / qmax, never 0)."""
    m = np.abs(w.reshape(w.shape[0], -1)).max(axis=1)
    return np.maximum(m, 1e-12).astype(np.float32) / np.float32(qmax)


def quantize_weights(w: np.ndarray, qmax: int = WEIGHT_QMAX) -> tuple[np.ndarray, np.ndarray]:
    """Per-output-channel symmetric int8 in ``[-qmax, qmax]``: ``(W_q int8, scales (C_out,))``; round half to
    even, like ONNX."""
    s = weight_scales(w, qmax)
    q = np.clip(np.rint(w / s.reshape((-1,) + (1,) * (w.ndim - 1))), -qmax, qmax).astype(np.int8)
    return q, s


class _Rewriter:
    def __init__(self, model: onnx.ModelProto, int8_convs: set[str], qmax: int = WEIGHT_QMAX):
        self.src = model
        self.qmax = qmax
        self.g = model.graph
        self.inits = {t.name: t for t in self.g.initializer}
        self.int8 = int8_convs
        self.nodes: list = []
        self.new_inits: list = []
        self.q_of: dict[str, str] = {}  # fp32 tensor -> its u8 tensor
        self.out = QuantizedSegment(model=model)
        self.consumers: dict[str, list] = {}
        for n in self.g.node:
            for t in n.input:
                self.consumers.setdefault(t, []).append(n)
        self.outputs = {o.name for o in self.g.output}
        self.skip: set[int] = set()

    def _register(self, t: str, relu: bool = False) -> str:
        q = t + "__u8"
        self.q_of[t] = q
        self.out.tensors.append(t)
        if relu:
            self.out.relu.add(t)
        return q

    def ensure_q(self, t: str) -> str:
        if t not in self.q_of:
            q = self._register(t)
            self.nodes.append(helper.make_node("QuantizeLinear", [t, t + SCALE, t + ZERO], [q], name=f"q/{t}"))
        return self.q_of[t]

    def _sole(self, t: str, op: str):
        cons = self.consumers.get(t, [])
        if len(cons) == 1 and cons[0].op_type == op and t not in self.outputs:
            return cons[0]
        return None

    def conv(self, n) -> None:
        x, wname = n.input[0], n.input[1]
        w = numpy_helper.to_array(self.inits[wname]).astype(np.float32)
        b = numpy_helper.to_array(self.inits[n.input[2]]).astype(np.float32) if len(n.input) > 2 and n.input[2] \
            else np.zeros(w.shape[0], np.float32)
        wq, ws = quantize_weights(w, self.qmax)
        p = n.name
        self.new_inits += [numpy_helper.from_array(wq, f"{p}/w_q"), numpy_helper.from_array(ws, f"{p}/w_s"),
                           numpy_helper.from_array(np.zeros(w.shape[0], np.int8), f"{p}/w_z"),
                           numpy_helper.from_array(b, f"{p}/b")]
        xq = self.ensure_q(x)
        self.nodes += [
            helper.make_node("Mul", [x + SCALE, f"{p}/w_s"], [f"{p}/b_s"], name=f"{p}/bias_scale"),
            helper.make_node("Div", [f"{p}/b", f"{p}/b_s"], [f"{p}/b_f"], name=f"{p}/bias_div"),
            helper.make_node("Round", [f"{p}/b_f"], [f"{p}/b_r"], name=f"{p}/bias_round"),
            helper.make_node("Cast", [f"{p}/b_r"], [f"{p}/b_q"], to=TensorProto.INT32, name=f"{p}/bias_cast")]
        y = n.output[0]
        relu = self._sole(y, "Relu")
        if relu is not None:
            self.skip.add(id(relu))
            y = relu.output[0]
        yq = self._register(y, relu=relu is not None)
        self.nodes.append(helper.make_node(
            "QLinearConv", [xq, x + SCALE, x + ZERO, f"{p}/w_q", f"{p}/w_s", f"{p}/w_z", y + SCALE, y + ZERO,
                            f"{p}/b_q"], [yq], name=p, **{a.name: helper.get_attribute_value(a) for a in n.attribute}))
        self.out.convs.append(p)
        leaky = self._sole(y, "LeakyRelu")
        if leaky is not None:
            self.skip.add(id(leaky))
            z = leaky.output[0]
            alpha = next((helper.get_attribute_value(a) for a in leaky.attribute if a.name == "alpha"), 0.01)
            zq = self._register(z)
            self.nodes.append(helper.make_node(
                "QLinearLeakyRelu", [yq, y + SCALE, y + ZERO, z + SCALE, z + ZERO], [zq], domain=MS_DOMAIN,
                alpha=float(alpha), name=f"{leaky.name}/q"))


def _needs_fp32(t: str, consumers: dict, outputs: set[str], int8_nodes: set[str], skipped: set[int]) -> bool:
    if t in outputs:
        return True
    return any(id(c) not in skipped and not (c.name in int8_nodes and c.input[0] == t and c.op_type == "Conv")
               for c in consumers.get(t, []))


def quantize_segment(model: onnx.ModelProto, int8_convs: set[str], qmax: int = WEIGHT_QMAX) -> QuantizedSegment:
    """``model`` with the ``Conv`` nodes named in ``int8_convs`` rewritten as described in the module docstring;
    weights in ``[-qmax, qmax]`` (:func:`vsr.quant.isa.weight_qmax`)."""
    r = _Rewriter(model, int8_convs, qmax)
    int8_here = {n.name for n in model.graph.node if n.op_type == "Conv" and n.name in int8_convs
                 and len(n.input) > 1 and n.input[1] in r.inits}
    for n in model.graph.node:
        if id(n) in r.skip:
            continue
        if n.name in int8_here:
            before = len(r.out.tensors)
            r.conv(n)
            for t in r.out.tensors[before:]:
                if t != n.input[0] and _needs_fp32(t, r.consumers, r.outputs, int8_here, r.skip):
                    r.nodes.append(helper.make_node("DequantizeLinear", [r.q_of[t], t + SCALE, t + ZERO], [t],
                                                    name=f"dq/{t}"))
        else:
            r.nodes.append(n)
    return _finish(r)


def _finish(r: _Rewriter) -> QuantizedSegment:
    g = r.g
    if not r.out.tensors:
        r.out.model = r.src
        return r.out
    scalar_f = [helper.make_tensor_value_info(t + SCALE, TensorProto.FLOAT, []) for t in r.out.tensors]
    scalar_z = [helper.make_tensor_value_info(t + ZERO, TensorProto.UINT8, []) for t in r.out.tensors]
    stats = []
    for t in r.out.tensors:
        r.nodes.append(helper.make_node("ReduceMax", [r.q_of[t]], [t + QMAX], keepdims=0, name=f"max/{t}"))
        r.nodes.append(helper.make_node("ReduceMin", [r.q_of[t]], [t + QMIN], keepdims=0, name=f"min/{t}"))
        stats += [helper.make_tensor_value_info(t + QMAX, TensorProto.UINT8, []),
                  helper.make_tensor_value_info(t + QMIN, TensorProto.UINT8, [])]
    used = {t for n in r.nodes for t in n.input}
    inits = [t for t in g.initializer if t.name in used] + r.new_inits
    graph = helper.make_graph(r.nodes, g.name, list(g.input) + scalar_f + scalar_z, list(g.output) + stats,
                              inits)
    opsets = [o for o in r.src.opset_import if o.domain != MS_DOMAIN] + [helper.make_opsetid(MS_DOMAIN, 1)]
    m = helper.make_model(graph, opset_imports=opsets, ir_version=r.src.ir_version, producer_name="vsr.quant")
    m.functions.extend(r.src.functions)
    r.out.model = m
    return r.out
