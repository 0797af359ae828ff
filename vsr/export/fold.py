"""Fold the values a graph computes from ``Shape`` into constants, per shape bucket.

The exporter reads the batch size from the input at run time (``Shape(lr)[0:1]``) to build the target shapes of
EDVR's ``Expand`` nodes (the reference frame's features repeated for every frame).  Split into segments, that
int64 tensor crosses segment boundaries: TensorRT then sees a *shape tensor input*, whose values an optimisation
profile must give and which it wants in host memory.  Here H and W are fixed (a bucket) and only the batch is
symbolic, so every such value is known up to the batch, and each consumer can take a constant instead:

* ``Expand(x, shape)``: a symbolic entry becomes 1, which broadcasting turns back into ``x``'s own dimension
  (checked: ``x`` must have that same symbolic dimension there);
* ``Reshape(x, shape)``: a symbolic entry becomes 0 (copy ``x``'s dimension, when ``x`` has the same symbol at the
  same index) or -1 (the one inferred dimension).

After folding no ``Shape`` node is left and the segments take only float tensors.  A graph whose shape values
reach anything else is refused with one line naming the node (better than a segment TensorRT cannot profile).
"""

from __future__ import annotations

import copy

import numpy as np
import onnx
from onnx import helper, numpy_helper

# ops through which a shape value is followed (each evaluated on lists of ints and symbol names)
_FOLLOWED = ("Shape", "Gather", "Concat", "Unsqueeze", "Squeeze", "Slice", "Cast", "Identity")


class FoldError(ValueError):
    """A shape value reaches a node that cannot take a constant instead."""


def _dims(info: onnx.ValueInfoProto) -> list | None:
    t = info.type.tensor_type
    if not t.HasField("shape"):
        return None
    return [d.dim_param if d.HasField("dim_param") else int(d.dim_value) if d.HasField("dim_value") else None
            for d in t.shape.dim]


def _shapes(model: onnx.ModelProto) -> dict[str, list]:
    """Every tensor's dimensions (ints, symbol names, None where unknown) after ONNX shape inference."""
    inferred = onnx.shape_inference.infer_shapes(copy.deepcopy(model), strict_mode=False)
    g = inferred.graph
    return {vi.name: d for vi in (*g.input, *g.value_info, *g.output) if (d := _dims(vi)) is not None}


class _Values:
    """Shape-derived int tensors as lists of ints and symbol names; ``scalar`` marks rank-0 ones."""

    def __init__(self, model: onnx.ModelProto, shapes: dict[str, list]):
        self.shapes = shapes
        self.consts = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer
                       if t.data_type in (onnx.TensorProto.INT64, onnx.TensorProto.INT32)}
        self.values: dict[str, list] = {}
        self.scalar: set[str] = set()

    def get(self, name: str) -> list | None:
        if name in self.values:
            return self.values[name]
        if name in self.consts:
            return [int(v) for v in self.consts[name].reshape(-1)]
        return None

    def evaluate(self, node: onnx.NodeProto) -> bool:
        """Record the value of ``node``'s output when it is computable; True when it was."""
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        ins = [self.get(t) if t else None for t in node.input]
        out = node.output[0]
        if node.op_type == "Shape":
            dims = self.shapes.get(node.input[0])
            if dims is None or None in dims:
                return False
            value = dims[attrs.get("start", 0): attrs.get("end", len(dims))]
        elif not any(t in self.values for t in node.input) or ins[0] is None or node.op_type not in _FOLLOWED:
            return False  # only values derived from a Shape are followed
        elif node.op_type == "Gather":
            if ins[1] is None or attrs.get("axis", 0) != 0:
                return False
            value = [ins[0][i] for i in ins[1]]
            if node.input[1] in self.consts and self.consts[node.input[1]].ndim == 0:
                self.scalar.add(out)
        elif node.op_type == "Concat":
            if any(v is None for v in ins):
                return False
            value = [v for part in ins for v in part]
        elif node.op_type == "Slice":
            if any(v is None for v in ins[1:]) or (len(ins) > 3 and ins[3] not in (None, [0])):
                return False
            step = ins[4][0] if len(ins) > 4 else 1
            value = ins[0][ins[1][0]: ins[2][0]: step]
        else:  # Unsqueeze, Squeeze, Cast, Identity: the same values
            value = list(ins[0])
        self.values[out] = value
        return True


def _constant(model: onnx.ModelProto, name: str, values: list[int]) -> str:
    init = numpy_helper.from_array(np.array(values, np.int64), f"{name}/folded")
    model.graph.initializer.append(init)
    return init.name


def _expand_target(node, target: list, x_dims: list | None) -> list[int]:
    if x_dims is None:
        raise FoldError(f"{node.name}: Expand of a tensor of unknown shape")
    out = []
    for i, v in enumerate(target):
        if isinstance(v, str):
            j = i - (len(target) - len(x_dims))  # broadcasting aligns the trailing dimensions
            if j < 0 or x_dims[j] != v:
                raise FoldError(f"{node.name}: Expand to {target}: dimension {v} is not the input's own")
            v = 1
        out.append(int(v))
    return out


def _reshape_target(node, target: list, x_dims: list | None) -> list[int]:
    symbols = [i for i, v in enumerate(target) if isinstance(v, str)]
    out = [0 if isinstance(v, str) else int(v) for v in target]
    for i in symbols:
        if x_dims is not None and i < len(x_dims) and x_dims[i] == target[i]:
            continue  # 0: copy the input's dimension
        if len(symbols) == 1 and -1 not in target:
            out[i] = -1
        else:
            raise FoldError(f"{node.name}: Reshape to {target} cannot be made constant")
    if any(a.name == "allowzero" and a.i for a in node.attribute) and 0 in out:
        raise FoldError(f"{node.name}: Reshape with allowzero=1 cannot copy a dimension")
    return out


def _drop_dead_nodes(model: onnx.ModelProto) -> None:
    g = model.graph
    needed = {o.name for o in g.output}
    keep = []
    for node in reversed(list(g.node)):
        if any(o in needed for o in node.output):
            keep.append(node)
            needed.update(t for t in node.input if t)
    del g.node[:]
    g.node.extend(reversed(keep))
    used = {t for n in g.node for t in n.input}
    inits = [t for t in g.initializer if t.name in used]
    del g.initializer[:]
    g.initializer.extend(inits)


def fold_shape_values(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` with every ``Shape``-derived value folded into its consumers (module docstring).

    Raises :class:`FoldError` (one line, naming the node) where a value reaches a node that cannot take it."""
    m = copy.deepcopy(model)
    shapes = _shapes(m)
    values = _Values(m, shapes)
    for node in m.graph.node:
        if node.op_type in _FOLLOWED and node.output and values.evaluate(node):
            continue
        for k, t in enumerate(node.input):
            if t not in values.values:
                continue
            target, x_dims = values.values[t], shapes.get(node.input[0])
            if node.op_type == "Expand" and k == 1:
                node.input[k] = _constant(m, node.name or t, _expand_target(node, target, x_dims))
            elif node.op_type == "Reshape" and k == 1:
                node.input[k] = _constant(m, node.name or t, _reshape_target(node, target, x_dims))
            else:
                raise FoldError(f"{node.name or node.op_type}: input {k} is computed from a Shape; "
                                f"{node.op_type} cannot take a constant instead")
    _drop_dead_nodes(m)
    left = [n.name or n.op_type for n in m.graph.node if n.op_type == "Shape"]
    if left:
        raise FoldError(f"Shape nodes left after folding: {', '.join(left)}")
    return m


def shape_inputs(model: onnx.ModelProto) -> list[str]:
    """Names of the graph inputs that are not float tensors (what TensorRT would take as shape tensors)."""
    floats = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)
    inits = {t.name for t in model.graph.initializer}
    return [i.name for i in model.graph.input
            if i.name not in inits and i.type.tensor_type.elem_type not in floats]
