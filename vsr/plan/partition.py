"""Cut an ONNX graph at its bridge ops into standalone segments and an ordered list of steps.

::

    segment 0 -> bridge 0 -> segment 1 -> bridge 1 -> ... -> bridge K-1 -> segment K      (empty segments dropped)

* Bridge nodes (default ``DeformConv`` and ``DepthToSpace``) are taken in graph (topological) order.
* Every other node goes to the *latest* segment that still precedes all of its consumers ("as late as
  possible").  So a DCN's offset/mask convolution lands in the segment right before the DCN, and a tensor that
  is only needed at the end (e.g. the graph input for EDVR's bilinear base) is carried as an input instead of
  a large intermediate.
* An activation (LeakyRelu / Relu) that is the only consumer of a bridge's output is fused into the bridge step
  (``fuse_activations``), so the kernel writes the activated tensor in its single pass.
* ``Constant`` nodes become initializers first, so that each segment owns copies of what it needs.

Each segment is a valid standalone ONNX model whose inputs/outputs are typed, named after the original
tensors, and shaped with the original (possibly symbolic, e.g. ``3*N``) dimensions.
"""

from __future__ import annotations

import ast
import copy
import operator
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper

from vsr.errors import BackendError
from vsr.kernels.node import FUSABLE_ACTIVATIONS

DEFAULT_BRIDGE_OPS = ("DeformConv", "DepthToSpace")


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
        return d

    @classmethod
    def from_json(cls, d: dict) -> "Step":
        return cls(name=d["name"], kind=d["kind"], inputs=list(d["inputs"]), outputs=list(d["outputs"]),
                   op_type=d.get("op_type"), attrs=dict(d.get("attrs") or {}),
                   constants={int(k): v for k, v in (d.get("constants") or {}).items()},
                   epilogue=tuple(d["epilogue"]) if d.get("epilogue") else None, file=d.get("file"),
                   nodes=list(d.get("nodes") or []))


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


_DIM_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
            ast.Div: operator.floordiv}


def eval_dim(dim, env: dict[str, int]) -> int:
    """Value of a dimension: an int, a symbol (``"N"``) or an arithmetic expression of symbols (``"3*N"``)."""
    if isinstance(dim, (int, np.integer)):
        return int(dim)

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in env:
                raise BackendError(f"dimension {dim!r}: symbol {node.id!r} is not bound (known: {sorted(env)})")
            return env[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _DIM_OPS:
            return _DIM_OPS[type(node.op)](ev(node.left), ev(node.right))
        raise BackendError(f"dimension {dim!r} is not a simple arithmetic expression")

    try:
        return int(ev(ast.parse(str(dim), mode="eval")))
    except SyntaxError:
        raise BackendError(f"dimension {dim!r} is not a simple arithmetic expression") from None


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


def partition(model: onnx.ModelProto, bridge_ops=DEFAULT_BRIDGE_OPS, fuse_activations: bool = True) -> Partition:
    """Cut ``model`` at every node whose op type is in ``bridge_ops``; see the module docstring."""
    bridge_ops = tuple(sorted(set(bridge_ops)))
    model = copy.deepcopy(model)
    _constants_to_initializers(model)
    try:
        model = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # shape inference is best effort; missing shapes are reported below
        pass
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    infos: dict[str, TensorInfo] = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        info = _tensor_info(vi)
        if info is not None:
            infos[vi.name] = info
    graph_inputs = [vi.name for vi in g.input if vi.name not in inits]
    graph_outputs = [vi.name for vi in g.output]
    nodes = list(g.node)
    for n in nodes:
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in n.attribute):
            raise BackendError(f"node {n.name or n.op_type}: control flow (subgraphs) cannot be partitioned")

    consumers: dict[str, list[int]] = {}
    for i, n in enumerate(nodes):
        for t in n.input:
            if t:
                consumers.setdefault(t, []).append(i)
    is_bridge = [n.op_type in bridge_ops and n.domain in ("", "ai.onnx") for n in nodes]

    # Fuse single-consumer activations into the bridge before them.
    owner: dict[int, int] = {}  # node index -> bridge node index it was fused into
    epilogues: dict[int, tuple[str, float]] = {}
    if fuse_activations:
        for i, n in enumerate(nodes):
            if not is_bridge[i] or len(n.output) != 1:
                continue
            out = n.output[0]
            cons = consumers.get(out, [])
            if out in graph_outputs or len(cons) != 1:
                continue
            c = nodes[cons[0]]
            if c.op_type in FUSABLE_ACTIVATIONS and c.domain in ("", "ai.onnx") and not is_bridge[cons[0]]:
                alpha = 0.0 if c.op_type == "Relu" else float(_attrs(c).get("alpha", 0.01))
                owner[cons[0]] = i
                epilogues[i] = (c.op_type, alpha)

    bridges = [i for i in range(len(nodes)) if is_bridge[i]]
    bridge_index = {b: k for k, b in enumerate(bridges)}
    last = len(bridges)  # index of the final segment

    def step_of_consumer(ci: int, seg: dict[int, int]) -> int | None:
        if ci in owner:
            return bridge_index[owner[ci]]
        if is_bridge[ci]:
            return bridge_index[ci]
        return seg.get(ci)  # None: a dropped (dead) node

    seg: dict[int, int] = {}
    for i in reversed(range(len(nodes))):
        if is_bridge[i] or i in owner:
            continue
        n = nodes[i]
        s = None
        for t in n.output:
            if t in graph_outputs:
                s = last
            for ci in consumers.get(t, []):
                v = step_of_consumer(ci, seg)
                if v is not None:
                    s = v if s is None else min(s, v)
        if s is not None:  # nodes whose outputs nobody reads are dropped
            seg[i] = s

    producer_step: dict[str, str] = {}
    steps: list[Step] = []
    segments: dict[str, onnx.ModelProto] = {}
    constants: dict[str, np.ndarray] = {}
    produced_in_segment: dict[int, set[str]] = {}

    def needed_after(t: str, k: int) -> bool:
        """Is tensor ``t`` (produced in segment ``k``) read outside segment ``k``?"""
        if t in graph_outputs:
            return True
        for ci in consumers.get(t, []):
            if ci in owner or is_bridge[ci] or seg.get(ci, k) != k:
                return True
        return False

    def info(t: str) -> TensorInfo:
        if t not in infos:
            raise BackendError(f"tensor {t!r} crosses a step boundary but its shape/type is unknown "
                               "(run shape inference on the model first)")
        return infos[t]

    for k in range(last + 1):
        members = [i for i in range(len(nodes)) if seg.get(i) == k]
        if members:
            seg_nodes = [nodes[i] for i in members]
            produced = {t for n in seg_nodes for t in n.output if t}
            produced_in_segment[k] = produced
            ins: list[str] = []
            for n in seg_nodes:
                for t in n.input:
                    if t and t not in produced and t not in inits and t not in ins:
                        ins.append(t)
            outs = [t for n in seg_nodes for t in n.output if t and needed_after(t, k)]
            name = f"segment{k:02d}"
            used_inits = [inits[t] for n in seg_nodes for t in n.input if t in inits]
            seen = set()
            used_inits = [x for x in used_inits if not (x.name in seen or seen.add(x.name))]
            vis = [_value_info(infos[t]) for t in produced if t in infos and t not in outs]
            graph = helper.make_graph(seg_nodes, name, [_value_info(info(t)) for t in ins],
                                      [_value_info(info(t)) for t in outs], used_inits, value_info=vis)
            seg_model = helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=model.ir_version,
                                          producer_name="vsr.plan")
            seg_model.functions.extend(model.functions)
            try:
                onnx.checker.check_model(seg_model)
            except onnx.checker.ValidationError as e:
                raise BackendError(f"{name} is not a valid ONNX model: {str(e).splitlines()[0]}") from None
            segments[name] = seg_model
            steps.append(Step(name=name, kind="segment", inputs=ins, outputs=outs, file=f"{name}.onnx",
                              nodes=[n.name for n in seg_nodes]))
            for t in outs:
                producer_step[t] = name
        if k < last:
            b = bridges[k]
            n = nodes[b]
            ins, consts = [], {}
            for j, t in enumerate(n.input):
                if t in inits:
                    consts[j] = t
                    constants[t] = numpy_helper.to_array(inits[t])
                    ins.append("")
                else:
                    ins.append(t)
            outs = list(n.output)
            fused = [i for i, o in owner.items() if o == b]
            if fused:
                outs = list(nodes[fused[0]].output)
            for t in ins:
                if t:
                    info(t)
            for t in outs:
                info(t)
            name = f"bridge{k:02d}_{n.op_type}"
            steps.append(Step(name=name, kind="bridge", inputs=ins, outputs=outs, op_type=n.op_type,
                              attrs=_attrs(n), constants=consts, epilogue=epilogues.get(b),
                              nodes=[n.name] + [nodes[i].name for i in fused]))
    tensors = {t: info(t) for s in steps for t in s.runtime_inputs() + s.outputs}
    for t in graph_inputs + graph_outputs:
        tensors[t] = info(t)
    return Partition(steps=steps, tensors=tensors, inputs=graph_inputs, outputs=graph_outputs, segments=segments,
                     constants=constants, bridge_ops=bridge_ops)
