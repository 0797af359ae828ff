"""An fp32 ONNX segment -> the same segment with chosen ``Conv`` nodes in int8, scales fed at run time.

For each int8 conv ``y = Conv(x, W, b)``, as the plans write it (``fixed_zero``, the default)::

    x_q   = QuantizeLinear(x, x__qs, x__qz)                    (skipped when x is already a u8 tensor)
    y0_q  = QLinearConv(x_q, x__qs, x__qz, W_q, w_s, 0, y0__qs, y0__qz)   u8 x s8 -> u8, no bias: MLAS ConvSym
    y_q   = QLinearAdd(y0_q, y0__qs, y0__qz, b_u8, b_s, b_z, y__qs, y__qz)  the bias, a constant u8 (1, C, 1, 1)
    y     = DequantizeLinear(y_q, y__qs, y__qz)                only where an fp32 consumer needs y

where every ``__qz`` is a constant of the graph and every ``__qs`` an input; with ``fixed_zero=False`` the zero
points are inputs too and the bias is the conv's own, ``b_q = int32(round(b / (x__qs * w_s)))`` computed in the
graph (one rounding of ``y``, ONNX Runtime's generic int8 conv path).

Weights are symmetric int8 per output channel (``w_s = max|W_c| / qmax``: 7 bits, or 8 where the CPU has VNNI, see
:mod:`vsr.quant.isa`); activations are u8, asymmetric, per tensor.  A ``Relu`` that is a conv's only consumer
is folded into the conv (its output range starts at 0 with zero point 0, so the u8 clamp is the ReLU); a
``LeakyRelu`` becomes ``com.microsoft.QLinearLeakyRelu`` on u8.

**u8 from conv to conv.**  Between the int8 convs the tensors stay u8 wherever the ops allow it, so that no fp32
round trip (Dequantize, an fp32 op, Quantize) sits between two int8 convs where none is needed
(docs/benchmarks.md, issue 39: those round trips and their fp32 copies were the largest part of what vsr's int8
segments spent beyond ONNX Runtime's own int8):

* ops that move values without changing them (:data:`VIEW_OPS`: ``Reshape``, ``Slice``, ``Expand``, ``Split``,
  ``MaxPool``, a bilinear or nearest ``Resize``, ...) run on the u8 tensor, their outputs in its scale;
* a ``Concat`` whose inputs are u8 (or fp32 quantized on the way in) runs on u8, its inputs and output in one
  scale: a conv or ``QLinearLeakyRelu`` whose output only feeds it writes its codes in that scale directly;
* with ``int8_adds``, an ``Add`` of two quantized tensors whose sum is quantized (a residual block's) becomes
  ``com.microsoft.QLinearAdd``;
* a Dequantize is put in front of the first op that needs fp32 (or a graph output), only then.

Tensors that share a scale form a *group*; each group's scale (``G__qs`` float32 scalar) is a graph input,
named after the group, which :mod:`vsr.quant.scales` feeds before each run (its zero point ``G__qz`` a constant,
or an input beside it); each group also gets two scalar outputs, ``G__qmax`` / ``G__qmin`` (the largest and smallest
code any of its tensors holds, over the tensors an op wrote codes into), from which the run-time scales detect
saturation and measure the range for the next window.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from vsr.quant.scales import u8_params
from vsr.quant.segment_graph import (MS_DOMAIN, SCALE, WEIGHT_QMAX, ZERO, QuantizedSegment, ScaleGroups, finish,
                                     quantize_weights)

# A tensor read elsewhere joins a Concat's scale only if its range is at least this part of the joint one (else
# the Concat re-quantizes it): a scale up to ~1.4x coarser than its own.
JOIN_FILL = 0.7

# Ops whose output holds values of their (first) input, moved or selected: on u8 codes they give the codes of
# the fp32 result in the same scale.  Resize: only its interpolating modes (a weighted mean of codes rounds to
# within one code of the mean's code).
VIEW_OPS = {"Reshape", "Slice", "Expand", "Split", "Squeeze", "Unsqueeze", "Gather", "Transpose", "Flatten",
            "Identity", "MaxPool", "Resize"}


class _Rewriter:
    def __init__(self, model: onnx.ModelProto, int8_convs: set[str], qmax: int, ranges, int8_adds: bool,
                 fixed_zero: bool):
        self.src = model
        self.qmax = qmax
        self.g = model.graph
        self.inits = {t.name: t for t in self.g.initializer}
        self.ranges = ranges
        self.int8_adds = int8_adds and ranges is not None
        self.fixed_zero = fixed_zero and ranges is not None
        self.nodes: list = []
        self.new_inits: list = []
        self.u8: dict[str, str] = {}  # tensor -> its u8 tensor (codes in the scale of the tensor's group)
        self.fp: set[str] = {i.name for i in self.g.input} | set(self.inits)  # tensors held in fp32
        self.exact: set[str] = set(self.fp)  # ... computed in fp32 (not a Dequantize of codes)
        self.view_of: dict[str, object] = {}  # a view op's u8 output -> the op
        self.groups = ScaleGroups()
        self.produced: list[str] = []  # tensors an op wrote codes into (the range pass reads them)
        self.out = QuantizedSegment(model=model)
        self.extra: dict[str, tuple[float, float]] = {}  # ranges of tensors the rewrite makes
        self.consumers: dict[str, list] = {}
        for n in self.g.node:
            for t in n.input:
                self.consumers.setdefault(t, []).append(n)
        self.outputs = {o.name for o in self.g.output}
        self.skip: set[int] = set()
        self.int8 = {n.name for n in self.g.node if n.op_type == "Conv" and n.name in int8_convs
                     and len(n.input) > 1 and n.input[1] in self.inits}
        self._wants: dict[str, bool] = {}

    # -- what is wanted in u8 ---------------------------------------------------------------------------------
    def wants_u8(self, t: str) -> bool:
        """Some consumer of ``t`` takes u8: an int8 conv's input, or an op that can run on u8 whose output is
        wanted in u8."""
        if t not in self._wants:
            self._wants[t] = False  # (graphs are acyclic; this only guards the recursion)
            self._wants[t] = any(self._takes_u8(c, t) for c in self.consumers.get(t, []))
        return self._wants[t]

    def _takes_u8(self, n, t: str) -> bool:
        if n.op_type == "Conv":
            return n.name in self.int8 and n.input[0] == t
        if n.op_type in VIEW_OPS:
            return n.input[0] == t and self._view_ok(n) and any(self.wants_u8(o) for o in n.output if o)
        if n.op_type == "Concat":
            return self.wants_u8(n.output[0])
        if n.op_type == "Add":
            return self._add_ok(n) and self.wants_u8(n.output[0])
        return False

    def _view_ok(self, n) -> bool:
        if n.op_type == "Resize":
            mode = next((helper.get_attribute_value(a) for a in n.attribute if a.name == "mode"), b"nearest")
            return mode in (b"nearest", b"linear")
        if n.op_type == "MaxPool":
            return len([o for o in n.output if o]) == 1
        return True

    def _add_ok(self, n) -> bool:
        return (self.int8_adds and len(n.input) == 2 and n.output[0] in self.ranges
                and all(i in self.ranges or i in self.u8 for i in n.input) and n.output[0] not in self.outputs)

    # -- u8 and fp32 versions of a tensor -------------------------------------------------------------------
    def _register(self, t: str, pinned: bool = False) -> str:
        self.groups.add(t, pinned)
        self.u8[t] = t + "__u8"
        return self.u8[t]

    def quantize(self, t: str, like: str | None = None) -> str:
        """The u8 version of ``t``; an fp32 ``t`` is quantized into its own group, or into ``like``'s."""
        if t not in self.u8:
            self.need_fp(t)
            q = self._register(t)
            if like is not None:
                self.groups.merge(like, t)
            self.nodes.append(helper.make_node("QuantizeLinear", [t, t + SCALE, t + ZERO], [q], name=f"q/{t}"))
            self.produced.append(t)
        return self.u8[t]

    def need_fp(self, t: str) -> str:
        """``t`` in fp32, put in the first time an op needs it: the fp32 view of an fp32 tensor where it is one,
        else a Dequantize of its codes."""
        if t and t not in self.fp and not self._exact(t):
            self.nodes.append(helper.make_node("DequantizeLinear", [self.u8[t], t + SCALE, t + ZERO], [t],
                                               name=f"dq/{t}"))
            self.fp.add(t)
        return t

    def _sole(self, t: str, op: str):
        cons = self.consumers.get(t, [])
        if len(cons) == 1 and cons[0].op_type == op and t not in self.outputs:
            return cons[0]
        return None

    # -- ops ------------------------------------------------------------------------------------------------
    def conv(self, n) -> None:
        x, wname = n.input[0], n.input[1]
        w = numpy_helper.to_array(self.inits[wname]).astype(np.float32)
        b = numpy_helper.to_array(self.inits[n.input[2]]).astype(np.float32) if len(n.input) > 2 and n.input[2] \
            else np.zeros(w.shape[0], np.float32)
        wq, ws = quantize_weights(w, self.qmax)
        p = n.name
        self.new_inits += [numpy_helper.from_array(wq, f"{p}/w_q"), numpy_helper.from_array(ws, f"{p}/w_s"),
                           numpy_helper.from_array(np.zeros(w.shape[0], np.int8), f"{p}/w_z")]
        if not self.fixed_zero:
            self.new_inits.append(numpy_helper.from_array(b, f"{p}/b"))
        xq = self.quantize(x)
        y = n.output[0]
        relu = self._sole(y, "Relu")
        if relu is not None:
            self.skip.add(id(relu))
            y = relu.output[0]
        if self.fixed_zero:
            yq = self._conv_then_bias(n, xq, wq, b, y, relu is not None)
        else:
            self.nodes += [
                helper.make_node("Mul", [x + SCALE, f"{p}/w_s"], [f"{p}/b_s"], name=f"{p}/bias_scale"),
                helper.make_node("Div", [f"{p}/b", f"{p}/b_s"], [f"{p}/b_f"], name=f"{p}/bias_div"),
                helper.make_node("Round", [f"{p}/b_f"], [f"{p}/b_r"], name=f"{p}/bias_round"),
                helper.make_node("Cast", [f"{p}/b_r"], [f"{p}/b_q"], to=TensorProto.INT32, name=f"{p}/bias_cast")]
            yq = self._register(y, pinned=relu is not None)
            self.produced.append(y)
            self.nodes.append(helper.make_node(
                "QLinearConv", [xq, x + SCALE, x + ZERO, f"{p}/w_q", f"{p}/w_s", f"{p}/w_z", y + SCALE, y + ZERO,
                                f"{p}/b_q"], [yq], name=p, **self._attrs(n)))
        self.out.convs.append(p)
        leaky = self._sole(y, "LeakyRelu")
        if leaky is not None:
            self.skip.add(id(leaky))
            z = leaky.output[0]
            alpha = next((helper.get_attribute_value(a) for a in leaky.attribute if a.name == "alpha"), 0.01)
            zq = self._register(z)
            self.produced.append(z)
            self.nodes.append(helper.make_node(
                "QLinearLeakyRelu", [yq, y + SCALE, y + ZERO, z + SCALE, z + ZERO], [zq], domain=MS_DOMAIN,
                alpha=float(alpha), name=f"{leaky.name}/q"))

    @staticmethod
    def _attrs(n) -> dict:
        return {a.name: helper.get_attribute_value(a) for a in n.attribute}

    def _conv_then_bias(self, n, xq: str, wq: np.ndarray, b: np.ndarray, y: str, relu: bool) -> str:
        """The conv without its bias, then ``QLinearAdd`` of the bias (a constant u8 ``(1, C, 1, 1)``): with a
        constant zero point of its input and no bias, ONNX Runtime runs a ``QLinearConv`` with its fast
        symmetric-weight kernels (MLAS ``ConvSym``), which fold a bias into constants at load time; a bias in
        int32 units of the input's scale cannot be constant where that scale is fed at run time."""
        p, x = n.name, n.input[0]
        raw = n.output[0]
        y0 = f"{raw}/conv" if b.any() else y  # the conv's sum before its bias
        if y0 != y:  # its range: the calibrated one of the conv's output, less the bias (widest either way)
            lo, hi = self.ranges[raw]
            self.extra[y0] = (lo - max(float(b.max()), 0.0), hi - min(float(b.min()), 0.0))
        y0q = self._register(y0, pinned=relu and y0 == y)
        self.produced.append(y0)
        self.nodes.append(helper.make_node(
            "QLinearConv", [xq, x + SCALE, x + ZERO, f"{p}/w_q", f"{p}/w_s", f"{p}/w_z", y0 + SCALE, y0 + ZERO],
            [y0q], name=p, **self._attrs(n)))
        if y0 == y:
            return y0q
        bs, bz = u8_params(float(b.min()), float(b.max()))
        shape = (1, b.size) + (1,) * (len(wq.shape) - 2)
        self.new_inits += [
            numpy_helper.from_array(np.clip(np.rint(b / bs) + bz, 0, 255).astype(np.uint8).reshape(shape),
                                    f"{p}/b_u8"),
            numpy_helper.from_array(np.array(bs, np.float32), f"{p}/b_us"),
            numpy_helper.from_array(np.array(bz, np.uint8), f"{p}/b_uz")]
        yq = self._register(y, pinned=relu)
        self.produced.append(y)
        self.nodes.append(helper.make_node(
            "QLinearAdd", [y0q, y0 + SCALE, y0 + ZERO, f"{p}/b_u8", f"{p}/b_us", f"{p}/b_uz", y + SCALE, y + ZERO],
            [yq], domain=MS_DOMAIN, name=f"{p}/bias"))
        return yq

    def view(self, n) -> bool:
        """``n`` on the u8 codes of its input, when they are there (or its output is wanted in u8)."""
        x = n.input[0]
        outs = [o for o in n.output if o]
        if not self._view_ok(n) or not (x in self.u8 and (x not in self.fp or any(map(self.wants_u8, outs)))
                                        or any(map(self.wants_u8, outs)) and self._known(x, outs)):
            return False
        xq = self.quantize(x) if x not in self.u8 else self.u8[x]
        for o in outs:
            self.u8[o] = o + "__u8"
            self.groups.add(o)
            self.groups.merge(x, o)
        rest = [self.need_fp(i) for i in n.input[1:]]
        self.nodes.append(helper.make_node(n.op_type, [xq] + rest, [self.u8.get(o, o) if o else "" for o in
                                                                   n.output], name=f"{n.name}/u8",
                                           domain=n.domain or None,
                                           **{a.name: helper.get_attribute_value(a) for a in n.attribute}))
        for o in outs:
            self.view_of[o] = n
        return True

    def _exact(self, t: str) -> bool:
        """Put in ``t`` in fp32 computed from fp32 (no codes on the way) where it is a view of such a tensor."""
        if t in self.exact:
            return True
        n = self.view_of.get(t)
        if n is None or not self._exact(n.input[0]):
            return False
        self.fp32(n)
        return True

    def _known(self, x: str, outs: list[str]) -> bool:
        """An fp32 ``x`` may be quantized for a view: its group will have a calibrated range (its own, or that of
        a tensor it reaches through views and Concats, whose scale it joins)."""
        return self.ranges is None or any(self._reaches_range(t) for t in [x, *outs])

    def _reaches_range(self, t: str) -> bool:
        if t in self.ranges:
            return True
        return any(c.op_type in VIEW_OPS and c.input[0] == t and any(self._reaches_range(o) for o in c.output if o)
                   or c.op_type == "Concat" and self._reaches_range(c.output[0])
                   for c in self.consumers.get(t, []))

    def concat(self, n) -> bool:
        """A u8 ``Concat``: its inputs join the output's scale where that costs them nothing (see :meth:`_joins`);
        an input that keeps its own scale makes it a ``QLinearConcat``, which re-quantizes that input's codes
        (a 256-entry table) and copies the others."""
        y = n.output[0]
        codes_only = all(x in self.u8 and x not in self.fp for x in n.input) and all(
            self.groups.can_merge(x, n.input[0]) for x in n.input)  # a u8 Concat and one Dequantize after it
        if not (self.wants_u8(y) or codes_only):
            return False
        self.groups.add(y)
        parts, own = [], False
        for x in n.input:
            if x in self.u8 and not self._joins(x, y, n):
                own = True
            elif x in self.u8:
                self.groups.merge(y, x)
            else:
                self.quantize(x, like=y)
            parts.append(x)
        self.u8[y] = y + "__u8"
        attrs = self._attrs(n)
        if not own:
            self.nodes.append(helper.make_node("Concat", [self.u8[x] for x in parts], [self.u8[y]],
                                               name=f"{n.name}/u8", **attrs))
        else:
            self.produced.append(y)
            self.nodes.append(helper.make_node(
                "QLinearConcat", [y + SCALE, y + ZERO] + [t for x in parts for t in (self.u8[x], x + SCALE, x + ZERO)],
                [self.u8[y]], name=f"{n.name}/q", domain=MS_DOMAIN, **attrs))
        return True

    def _joins(self, x: str, y: str, n) -> bool:
        """The codes of ``x`` may be written in the scale of ``y`` (the output of Concat ``n``): its group may
        merge (:meth:`_Groups.can_merge`), and either nothing but ``n`` reads that group's tensors, or its range
        is most of ``y``'s (a narrower tensor read elsewhere would lose precision there)."""
        if not self.groups.can_merge(x, y):
            return False
        g = self.groups.find(x)
        members = [t for t in self.groups.parent if self.groups.find(t) == g]
        readers = {id(c) for t in members for c in self.consumers.get(t, [])
                   if not (c.op_type in VIEW_OPS and any(o in members for o in c.output))}
        if readers <= {id(n)} and not any(t in self.outputs for t in members):
            return True
        rx, ry = self._range(members), self._range([y])
        if rx is None or ry is None:
            return True
        return rx[1] - rx[0] >= JOIN_FILL * (max(ry[1], rx[1]) - min(ry[0], rx[0]))

    def _range(self, tensors: list[str]) -> tuple[float, float] | None:
        known = [r for t in tensors for r in [self.ranges.get(t) if self.ranges else None, self.extra.get(t)] if r]
        return (min(r[0] for r in known), max(r[1] for r in known)) if known else None

    def add(self, n) -> bool:
        y = n.output[0]
        if not (self._add_ok(n) and self.wants_u8(y)):
            return False
        a, b = (self.quantize(x) for x in n.input)
        yq = self._register(y)
        self.produced.append(y)
        ia, ib = n.input
        self.nodes.append(helper.make_node(
            "QLinearAdd", [a, ia + SCALE, ia + ZERO, b, ib + SCALE, ib + ZERO, y + SCALE, y + ZERO], [yq],
            domain=MS_DOMAIN, name=f"{n.name}/q"))
        return True

    def fp32(self, n) -> None:
        if n.op_type in ("Shape", "Size") and n.input[0] not in self.fp:  # the codes have the same shape
            n = onnx.NodeProto.FromString(n.SerializeToString())
            n.input[0] = self.u8[n.input[0]]
        for t in n.input:
            self.need_fp(t)
        self.nodes.append(n)
        self.fp.update(o for o in n.output if o)
        self.exact.update(o for o in n.output if o)


def quantize_segment(model: onnx.ModelProto, int8_convs: set[str], qmax: int = WEIGHT_QMAX,
                     ranges: dict | None = None, int8_adds: bool = True, fixed_zero: bool = True
                     ) -> QuantizedSegment:
    """``model`` with the ``Conv`` nodes named in ``int8_convs`` rewritten as described in the module docstring;
    weights in ``[-qmax, qmax]`` (:func:`vsr.quant.isa.weight_qmax`).  ``ranges``: the calibrated tensors (their
    ranges); without it, only convs' inputs and outputs and the views between them are quantized, no Add, and
    the zero points are fed at run time.  ``int8_adds``: residual adds in u8 (``QLinearAdd``); ``fixed_zero``:
    every zero point a constant of the graph (from the calibrated range) and each conv's bias added after it
    (:meth:`_Rewriter._conv_then_bias`): ONNX Runtime's fast int8 conv kernels, at the price of a second
    rounding of each conv's output (docs/benchmarks.md, issue 39)."""
    r = _Rewriter(model, int8_convs, qmax, ranges, int8_adds, fixed_zero)
    for n in model.graph.node:
        if id(n) in r.skip:
            continue
        if n.name in r.int8:
            r.conv(n)
        elif not (n.op_type in VIEW_OPS and r.view(n) or n.op_type == "Concat" and r.concat(n)
                  or n.op_type == "Add" and r.add(n)):
            r.fp32(n)
    for o in r.g.output:
        r.need_fp(o.name)
    return finish(r)
