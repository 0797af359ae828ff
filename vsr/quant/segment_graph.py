"""The parts of an int8 segment's graph that :mod:`vsr.quant.rewrite` assembles: the names of its scale inputs
and code outputs, the weights' quantization, the groups of tensors that share a scale, and the finished model
(range pass, scale inputs, zero points).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from vsr.quant.scales import u8_params

MS_DOMAIN = "com.microsoft"
SCALE, ZERO, QMAX, QMIN = "__qs", "__qz", "__qmax", "__qmin"


@dataclass
class QuantizedSegment:
    """The rewritten model; ``tensors``: its scale groups (each named after one of its tensors), ``members``:
    the tensors of each group, ``relu``: the groups whose zero point is pinned to 0 (a folded ReLU writes them)."""

    model: onnx.ModelProto
    tensors: list[str] = field(default_factory=list)
    relu: set[str] = field(default_factory=set)
    convs: list[str] = field(default_factory=list)
    members: dict[str, list[str]] = field(default_factory=dict)
    extra: dict[str, tuple[float, float]] = field(default_factory=dict)  # ranges of tensors the rewrite made
    zeros: dict[str, int] = field(default_factory=dict)  # the groups' zero points, where the graph fixes them

    def ranges(self, ranges: dict[str, tuple[float, float]]) -> dict[str, dict]:
        """``{group: {"range": [lo, hi], "relu": bool[, "zero": int]}}``: each group's calibration range, the
        union of its members' ranges in ``ranges`` (those of conv inputs and outputs and their activations) and
        :attr:`extra`; ``zero``: its zero point where the graph holds it as a constant."""
        ranges = {**ranges, **self.extra}
        out = {}
        for g in self.tensors:
            known = [ranges[t] for t in self.members[g] if t in ranges]
            if not known:
                raise ValueError(f"int8 rewrite: no calibration range for the group of {g}")
            out[g] = {"range": [min(r[0] for r in known), max(r[1] for r in known)], "relu": g in self.relu}
            if g in self.zeros:
                out[g]["zero"] = self.zeros[g]
        return out


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


class ScaleGroups:
    """Union-find over tensor names: the tensors that share one scale; a group is pinned when a folded ReLU
    writes one of its tensors (its zero point must stay 0), and may merge only with another pinned group."""

    def __init__(self):
        self.parent: dict[str, str] = {}
        self.pinned: set[str] = set()

    def add(self, t: str, pinned: bool = False) -> str:
        self.parent.setdefault(t, t)
        if pinned:
            self.pinned.add(self.find(t))
        return t

    def find(self, t: str) -> str:
        while self.parent[t] != t:
            self.parent[t] = self.parent[self.parent[t]]
            t = self.parent[t]
        return t

    def can_merge(self, a: str, b: str) -> bool:
        return (self.find(a) in self.pinned) == (self.find(b) in self.pinned)

    def merge(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra
            if rb in self.pinned:
                self.pinned.add(ra)


def finish(r) -> QuantizedSegment:
    """The rewritten segment of the rewriter ``r`` (:class:`vsr.quant.rewrite._Rewriter`): its nodes with each
    tensor's scale and zero point renamed to its group's, the range pass (each group's largest and smallest code,
    over the tensors an op wrote codes into), the scales as inputs and the zero points as inputs or, with
    ``fixed_zero``, constants from the group's calibrated range."""
    g = r.g
    if not r.produced:
        r.out.model = r.src
        return r.out
    find = r.groups.find
    members: dict[str, list[str]] = {}
    for t in r.groups.parent:
        members.setdefault(find(t), []).append(t)
    groups = list(dict.fromkeys(find(t) for t in r.groups.parent))
    r.out.tensors = groups
    r.out.members = members
    r.out.relu = {k for k in groups if k in r.groups.pinned}
    rename = {t + s: find(t) + s for t in r.groups.parent for s in (SCALE, ZERO)}
    nodes = []
    for n in r.nodes:
        if any(i in rename for i in n.input):
            n = onnx.NodeProto.FromString(n.SerializeToString())
            n.input[:] = [rename.get(i, i) for i in n.input]
        nodes.append(n)
    shape1 = numpy_helper.from_array(np.array([1], np.int64), "vsr.quant/shape1")
    by_group: dict[str, list[str]] = {}
    for t in r.produced:
        by_group.setdefault(find(t), []).append(t)
    stats = []
    for k in groups:
        for end, op in ((QMAX, "ReduceMax"), (QMIN, "ReduceMin")):
            ts = by_group.get(k, [])
            if len(ts) == 1:
                nodes.append(helper.make_node(op, [r.u8[ts[0]]], [k + end], keepdims=0, name=f"{end[2:]}/{k}"))
            else:  # several tensors written in this scale: the extreme code of them all
                parts = []
                for t in ts:
                    nodes.append(helper.make_node(op, [r.u8[t]], [f"{t}{end}/4d"], keepdims=1,
                                                  name=f"{end[2:]}/{t}"))
                    nodes.append(helper.make_node("Reshape", [f"{t}{end}/4d", shape1.name], [f"{t}{end}/1"],
                                                  name=f"{end[2:]}/{t}/1"))
                    parts.append(f"{t}{end}/1")
                nodes.append(helper.make_node("Concat", parts, [f"{k}{end}/all"], axis=0, name=f"{end[2:]}/{k}/all"))
                nodes.append(helper.make_node(op, [f"{k}{end}/all"], [k + end], keepdims=0,
                                              name=f"{end[2:]}/{k}/group"))
        stats += [helper.make_tensor_value_info(k + QMAX, TensorProto.UINT8, []),
                  helper.make_tensor_value_info(k + QMIN, TensorProto.UINT8, [])]
    scalar_f = [helper.make_tensor_value_info(k + SCALE, TensorProto.FLOAT, []) for k in groups]
    scalar_z = [helper.make_tensor_value_info(k + ZERO, TensorProto.UINT8, []) for k in groups]
    zero_inits = []
    if r.fixed_zero:  # from each group's calibrated range; 1 at least unless a ReLU pins it (see scales.py)
        r.out.extra = r.extra
        for k, t in r.out.ranges(r.ranges).items():
            z = max(u8_params(*t["range"], t["relu"])[1], 0 if t["relu"] else 1)
            r.out.zeros[k] = z
            zero_inits.append(numpy_helper.from_array(np.array(z, np.uint8), k + ZERO))
        scalar_z = []
    used = {t for n in nodes for t in n.input}
    inits = [t for t in g.initializer if t.name in used] + r.new_inits + ([shape1] if shape1.name in used else [])
    inits += zero_inits
    graph = helper.make_graph(nodes, g.name, list(g.input) + scalar_f + scalar_z, list(g.output) + stats, inits)
    opsets = [o for o in r.src.opset_import if o.domain != MS_DOMAIN] + [helper.make_opsetid(MS_DOMAIN, 1)]
    m = helper.make_model(graph, opset_imports=opsets, ir_version=r.src.ir_version, producer_name="vsr.quant")
    m.functions.extend(r.src.functions)
    r.out.model = m
    return r.out
