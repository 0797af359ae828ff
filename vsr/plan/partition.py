"""Cut an ONNX graph at its bridge ops into standalone segments and an ordered list of steps.

::

    segment 0 -> bridge 0 -> segment 1 -> bridge 1 -> ... -> bridge K-1 -> segment K      (empty segments dropped)

* Bridge nodes (default ``DeformConv`` and ``DepthToSpace``) are taken in graph (topological) order.  Besides
  ONNX op types, ``bridge_ops`` may name ``NarrowConv``: a 3x3, stride-1, padding-1 ``Conv`` with a constant
  weight of at most ``vsr.kernels.narrow_conv.MAX_OUT_CHANNELS`` outputs (EDVR's ``conv_last`` at output
  resolution), which ONNX Runtime's blocked layout computes slowly (:data:`CPU_BRIDGE_OPS`).
* Every other node goes to the *latest* segment that still precedes all of its consumers ("as late as
  possible").  So a DCN's offset/mask convolution lands in the segment right before the DCN, and a tensor that
  is only needed at the end (e.g. the graph input for EDVR's bilinear base) is carried as an input instead of
  a large intermediate.
* An activation (LeakyRelu / Relu) that is the only consumer of a bridge's output is fused into the bridge step
  (``fuse_activations``), so the kernel writes the activated tensor in its single pass.
* ``Constant`` nodes become initializers first, so that each segment owns copies of what it needs.
* ``front=True``: the nodes that compute each frame's features alone (:mod:`vsr.plan.front`) become one segment
  of their own, ``segment_features``, first and marked ``per_frame``: its input is the frames ``(F, C, H, W)``
  the graph makes of its windows, its outputs every frame's features.  A runner may run it once per frame and
  feed the rest of the plan the features of each window's frames (:meth:`vsr.plan.plan.SubgraphPlan.window_plan`).

Each segment is a valid standalone ONNX model whose inputs/outputs are typed, named after the original
tensors, and shaped with the original (possibly symbolic, e.g. ``3*N``) dimensions.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper

from vsr.errors import BackendError
from vsr.kernels.node import FUSABLE_ACTIVATIONS
from vsr.plan.dims import eval_dim  # noqa: F401  (re-exported: plan, tensorrt, tests)
from vsr.plan.front import find_front, per_frame_model

DEFAULT_BRIDGE_OPS = ("DeformConv", "DepthToSpace")
NARROW_CONV = "NarrowConv"
# the split plan on the CPU: also conv_last (64 -> 3 at output resolution) on vsr's kernel, 2.5x faster than ONNX
# Runtime's (docs/benchmarks.md, issue 25 item 6); the CUDA runtime keeps DEFAULT_BRIDGE_OPS
CPU_BRIDGE_OPS = DEFAULT_BRIDGE_OPS + (NARROW_CONV,)
FRONT = -1  # the segment index of the per-frame front (it runs before segment 0)


@dataclass(frozen=True)
class TensorInfo:
    """A tensor crossing a step boundary: shape (ints, or strings such as ``"3*N"``) and numpy dtype name."""

    name: str
    shape: tuple
    dtype: str

    def concrete_shape(self, env: dict[str, int]) -> tuple[int, ...]:
        return tuple(eval_dim(d, env) for d in self.shape)

    def nbytes(self, env: dict[str, int]) -> int:
        return int(np.prod(self.concrete_shape(env), dtype=np.int64)) * np.dtype(self.dtype).itemsize


@dataclass
class Step:
    """One step of a plan: a segment (an ONNX model) or a bridge op (a vsr kernel).

    ``inputs``: runtime tensors read -- for a bridge in the ONNX node's input order, ``""`` where the input is a
    constant (``constants`` maps input index -> initializer name) or absent.  ``outputs``: tensors written.
    """

    name: str
    kind: str  # "segment" | "bridge"
    inputs: list[str]
    outputs: list[str]
    op_type: str | None = None
    attrs: dict = field(default_factory=dict)
    constants: dict[int, str] = field(default_factory=dict)
    epilogue: tuple[str, float] | None = None
    file: str | None = None  # segment model file, relative to the plan directory
    nodes: list[str] = field(default_factory=list)  # original node names (for the manifest)
    per_frame: bool = False  # the per-frame front: runs on frames (F, ...), not on windows

    def runtime_inputs(self) -> list[str]:
        return [t for t in self.inputs if t]

    def to_json(self) -> dict:
        d = {"name": self.name, "kind": self.kind, "inputs": self.inputs, "outputs": self.outputs,
             "nodes": self.nodes}
        if self.kind == "bridge":
            d.update(op_type=self.op_type, attrs=self.attrs, constants={str(k): v for k, v in self.constants.items()},
                     epilogue=list(self.epilogue) if self.epilogue else None)
        else:
            d.update(file=self.file)
        if self.per_frame:
            d["per_frame"] = True
        return d

    @classmethod
    def from_json(cls, d: dict) -> "Step":
        return cls(name=d["name"], kind=d["kind"], inputs=list(d["inputs"]), outputs=list(d["outputs"]),
                   op_type=d.get("op_type"), attrs=dict(d.get("attrs") or {}),
                   constants={int(k): v for k, v in (d.get("constants") or {}).items()},
                   epilogue=tuple(d["epilogue"]) if d.get("epilogue") else None, file=d.get("file"),
                   nodes=list(d.get("nodes") or []), per_frame=bool(d.get("per_frame", False)))


@dataclass
class Partition:
    """The result of :func:`partition`: steps, the tensors they exchange, segment models and bridge constants."""

    steps: list[Step]
    tensors: dict[str, TensorInfo]
    inputs: list[str]
    outputs: list[str]
    segments: dict[str, onnx.ModelProto]
    constants: dict[str, np.ndarray]
    bridge_ops: tuple[str, ...]
    frame_input: str | None = None  # the per-frame front's input (the frames made of the windows), if cut


def _tensor_info(vi: onnx.ValueInfoProto) -> TensorInfo | None:
    t = vi.type.tensor_type
    if not t.HasField("shape") or t.elem_type == 0:
        return None
    dims = []
    for d in t.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param:
            dims.append(d.dim_param)
        else:
            return None
    return TensorInfo(vi.name, tuple(dims), np.dtype(helper.tensor_dtype_to_np_dtype(t.elem_type)).name)


def _value_info(info: TensorInfo) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(info.name, helper.np_dtype_to_tensor_dtype(np.dtype(info.dtype)),
                                         list(info.shape))


def _constants_to_initializers(model: onnx.ModelProto) -> None:
    g = model.graph
    keep = []
    for node in g.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and len(node.attribute) == 1 \
                and node.attribute[0].name == "value":
            t = copy.deepcopy(node.attribute[0].t)
            t.name = node.output[0]
            g.initializer.append(t)
        else:
            keep.append(node)
    del g.node[:]
    g.node.extend(keep)


def _attrs(node: onnx.NodeProto) -> dict:
    out = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        if isinstance(v, bytes):
            v = v.decode()
        elif isinstance(v, (list, tuple)):
            v = [x.decode() if isinstance(x, bytes) else x for x in v]
        elif not isinstance(v, (int, float, str)):
            raise BackendError(f"bridge node {node.name or node.op_type}: attribute {a.name} is not a plain value")
        out[a.name] = v
    return out


@dataclass
class _Graph:
    """The graph being cut: its nodes, who reads each tensor, which nodes are bridges and what is fused.

    ``owner``: activation node index -> the bridge node index it is fused into (with ``epilogues[bridge]``);
    ``segment``: node index -> the segment it runs in (nodes nobody reads are in none and are dropped).
    """

    model: onnx.ModelProto
    nodes: list
    inits: dict[str, onnx.TensorProto]
    infos: dict[str, TensorInfo]
    inputs: list[str]
    outputs: list[str]
    consumers: dict[str, list[int]]
    is_bridge: list[bool]
    bridge_types: list[str | None]  # the op type each bridge runs as (``NarrowConv`` for such a Conv)
    owner: dict[int, int] = field(default_factory=dict)
    epilogues: dict[int, tuple[str, float]] = field(default_factory=dict)
    segment: dict[int, int] = field(default_factory=dict)
    front: set[int] = field(default_factory=set)  # the per-frame front's nodes (segment FRONT)

    def info(self, t: str) -> TensorInfo:
        if t not in self.infos:
            raise BackendError(f"tensor {t!r} crosses a step boundary but its shape/type is unknown "
                               "(run shape inference on the model first)")
        return self.infos[t]

    def needed_after(self, t: str, k: int) -> bool:
        """Is tensor ``t`` (produced in segment ``k``) read outside segment ``k``?"""
        if t in self.outputs:
            return True
        return any(ci in self.owner or self.is_bridge[ci] or self.segment.get(ci, k) != k
                   for ci in self.consumers.get(t, []))


def _is_narrow_conv(n: onnx.NodeProto, inits: dict[str, onnx.TensorProto]) -> bool:
    """A ``Conv`` the ``NarrowConv`` kernel computes exactly: 3x3, stride 1, padding 1, dilation 1, one group,
    a constant weight of few output channels, a constant bias or none."""
    from vsr.kernels.narrow_conv import MAX_OUT_CHANNELS

    if n.op_type != "Conv" or n.domain not in ("", "ai.onnx") or len(n.input) < 2 or n.input[1] not in inits:
        return False
    if len(n.input) > 2 and n.input[2] and n.input[2] not in inits:
        return False
    dims = tuple(inits[n.input[1]].dims)
    a = _attrs(n)
    return (len(dims) == 4 and dims[0] <= MAX_OUT_CHANNELS and dims[2:] == (3, 3)
            and a.get("auto_pad", "NOTSET") == "NOTSET" and list(a.get("pads", [0] * 4)) == [1, 1, 1, 1]
            and list(a.get("strides", [1, 1])) == [1, 1] and list(a.get("dilations", [1, 1])) == [1, 1]
            and int(a.get("group", 1)) == 1 and a.get("kernel_shape", [3, 3]) == [3, 3])


def _bridge_op(n: onnx.NodeProto, inits: dict[str, onnx.TensorProto], bridge_ops: tuple[str, ...]) -> str | None:
    """The bridge op ``n`` is cut out as (its op type, or ``NarrowConv``), None where it stays in a segment."""
    if n.op_type in bridge_ops and n.domain in ("", "ai.onnx"):
        return n.op_type
    if NARROW_CONV in bridge_ops and _is_narrow_conv(n, inits):
        return NARROW_CONV
    return None


def _read_graph(model: onnx.ModelProto, bridge_ops: tuple[str, ...]) -> _Graph:
    """A copy of ``model`` with constants as initializers and shapes inferred, indexed for cutting."""
    model = copy.deepcopy(model)
    _constants_to_initializers(model)
    try:
        model = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # shape inference is best effort; missing shapes are reported where they are needed
        pass
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    infos = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        info = _tensor_info(vi)
        if info is not None:
            infos[vi.name] = info
    nodes = list(g.node)
    for n in nodes:
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in n.attribute):
            raise BackendError(f"node {n.name or n.op_type}: control flow (subgraphs) cannot be partitioned")
    types = [_bridge_op(n, inits, bridge_ops) for n in nodes]
    consumers: dict[str, list[int]] = {}
    for i, n in enumerate(nodes):
        for t in n.input:
            if t:
                consumers.setdefault(t, []).append(i)
    return _Graph(model=model, nodes=nodes, inits=inits, infos=infos,
                  inputs=[vi.name for vi in g.input if vi.name not in inits], outputs=[vi.name for vi in g.output],
                  consumers=consumers,
                  is_bridge=[t is not None for t in types], bridge_types=types)


def _fuse_activations(g: _Graph) -> None:
    """Fuse each activation that is the only consumer of a bridge's single output into that bridge."""
    for i, n in enumerate(g.nodes):
        if not g.is_bridge[i] or len(n.output) != 1:
            continue
        out = n.output[0]
        cons = g.consumers.get(out, [])
        if out in g.outputs or len(cons) != 1:
            continue
        c = g.nodes[cons[0]]
        if c.op_type in FUSABLE_ACTIVATIONS and c.domain in ("", "ai.onnx") and not g.is_bridge[cons[0]]:
            alpha = 0.0 if c.op_type == "Relu" else float(_attrs(c).get("alpha", 0.01))
            g.owner[cons[0]] = i
            g.epilogues[i] = (c.op_type, alpha)


def _assign_segments(g: _Graph, bridges: list[int]) -> None:
    """Put every other node into the latest segment that precedes all its consumers (walking backwards)."""
    bridge_index = {b: k for k, b in enumerate(bridges)}
    last = len(bridges)

    def step_of_consumer(ci: int) -> int | None:
        if ci in g.front:
            return None  # the front runs on frames of its own: what feeds it is not computed in the plan
        if ci in g.owner:
            return bridge_index[g.owner[ci]]
        if g.is_bridge[ci]:
            return bridge_index[ci]
        return g.segment.get(ci)  # None: a dropped (dead) node

    for i in reversed(range(len(g.nodes))):
        if g.is_bridge[i] or i in g.owner or i in g.front:
            continue
        s = None
        for t in g.nodes[i].output:
            if t in g.outputs:
                s = last
            for ci in g.consumers.get(t, []):
                v = step_of_consumer(ci)
                if v is not None:
                    s = v if s is None else min(s, v)
        if s is not None:
            g.segment[i] = s


def _segment_step(g: _Graph, k: int) -> tuple[Step, onnx.ModelProto] | None:
    """Segment ``k`` (``FRONT``: the per-frame front) as a standalone, checked ONNX model and its step (None: the
    segment is empty)."""
    seg_nodes = [g.nodes[i] for i in range(len(g.nodes)) if g.segment.get(i) == k]
    if not seg_nodes:
        return None
    produced = {t for n in seg_nodes for t in n.output if t}
    ins: list[str] = []
    for n in seg_nodes:
        for t in n.input:
            if t and t not in produced and t not in g.inits and t not in ins:
                ins.append(t)
    outs = [t for n in seg_nodes for t in n.output if t and g.needed_after(t, k)]
    name = "segment_features" if k == FRONT else f"segment{k:02d}"
    used_inits = list({t: g.inits[t] for n in seg_nodes for t in n.input if t in g.inits}.values())
    # in node order, so that the same graph always gives the same segment bytes
    vis = [_value_info(g.infos[t]) for n in seg_nodes for t in n.output if t in g.infos and t not in outs]
    graph = helper.make_graph(seg_nodes, name, [_value_info(g.info(t)) for t in ins],
                              [_value_info(g.info(t)) for t in outs], used_inits, value_info=vis)
    seg_model = helper.make_model(graph, opset_imports=list(g.model.opset_import), ir_version=g.model.ir_version,
                                  producer_name="vsr.plan")
    seg_model.functions.extend(g.model.functions)
    if k == FRONT:
        per_frame_model(seg_model)
    try:
        onnx.checker.check_model(seg_model)
    except onnx.checker.ValidationError as e:
        raise BackendError(f"{name} is not a valid ONNX model: {str(e).splitlines()[0]}") from None
    step = Step(name=name, kind="segment", inputs=ins, outputs=outs, file=f"{name}.onnx",
                nodes=[n.name for n in seg_nodes], per_frame=k == FRONT)
    return step, seg_model


def _bridge_step(g: _Graph, k: int, b: int, constants: dict[str, np.ndarray]) -> Step:
    """Bridge ``k`` (node ``b``) as a kernel step; its constant inputs are added to ``constants``."""
    n = g.nodes[b]
    ins, consts = [], {}
    for j, t in enumerate(n.input):
        if t in g.inits:
            consts[j] = t
            constants[t] = numpy_helper.to_array(g.inits[t])
            ins.append("")
        else:
            ins.append(t)
    fused = [i for i, o in g.owner.items() if o == b]
    outs = list(g.nodes[fused[0]].output) if fused else list(n.output)
    for t in [t for t in ins if t] + outs:
        g.info(t)
    op = g.bridge_types[b]
    return Step(name=f"bridge{k:02d}_{op}", kind="bridge", inputs=ins, outputs=outs, op_type=op,
                attrs=_attrs(n), constants=consts, epilogue=g.epilogues.get(b),
                nodes=[n.name] + [g.nodes[i].name for i in fused])


def partition(model: onnx.ModelProto, bridge_ops=DEFAULT_BRIDGE_OPS, fuse_activations: bool = True,
              front: bool = False) -> Partition:
    """Cut ``model`` at every node whose op type is in ``bridge_ops`` (and, with ``front``, off its per-frame
    front); see the module docstring."""
    bridge_ops = tuple(sorted(set(bridge_ops)))
    g = _read_graph(model, bridge_ops)
    if fuse_activations:
        _fuse_activations(g)
    frame = None
    if front:
        ranks = {t: len(info.shape) for t, info in g.infos.items()}
        frame, g.front = find_front(g.nodes, g.inits, g.inputs, ranks)
        g.segment.update({i: FRONT for i in g.front})
    bridges = [i for i in range(len(g.nodes)) if g.is_bridge[i]]
    _assign_segments(g, bridges)
    steps: list[Step] = []
    segments: dict[str, onnx.ModelProto] = {}
    constants: dict[str, np.ndarray] = {}
    for k in ([FRONT] if front else []) + list(range(len(bridges) + 1)):
        seg = _segment_step(g, k)
        if seg is not None:
            steps.append(seg[0])
            segments[seg[0].name] = seg[1]
        if 0 <= k < len(bridges):
            steps.append(_bridge_step(g, k, bridges[k], constants))
    tensors = {t: g.info(t) for s in steps for t in s.runtime_inputs() + s.outputs}
    for t in g.inputs + g.outputs:
        tensors[t] = g.info(t)
    return Partition(steps=steps, tensors=tensors, inputs=g.inputs, outputs=g.outputs, segments=segments,
                     constants=constants, bridge_ops=bridge_ops, frame_input=frame)
