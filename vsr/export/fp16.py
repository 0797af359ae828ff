"""The fp16 form of an exported EDVR, the form TensorRT builds fp16 engines from.

TensorRT 11 takes every network as strongly typed (the fp16 builder flag is gone; 10 has the same mode): an
engine's precision is the ONNX file's.  So vsr writes fp16 ONNX itself, with ONNX Runtime's converter
(``onnxruntime.transformers.float16``): weights and activations fp16, the graph's input and output kept fp32
(casts inside), and the nodes that overflow fp16 kept fp32 by name.  The converter casts every kept node's output
to fp16 and back, also between two kept nodes, which would round the very values kept fp32 (and overflow); such
round trips are removed afterwards.  Kept:

* TSA's temporal attention: ``corr = (embedding * embedding_ref).sum(dim=2)`` then ``sigmoid`` -- a sum of
  ``num_feat`` products of unbounded features (64 for EDVR-M) that exceeds fp16's 65504 long before the sigmoid
  saturates.  In the graph it is the only ``ReduceSum``: its ``Mul`` input, itself and its ``Sigmoid``.

The CUDA runtime's torch segments keep the same correlation fp32, and its two embedding convolutions with it
(``vsr.backends.cuda.bridges.keep_attention_fp32``).
"""

from __future__ import annotations

import copy

import numpy as np
import onnx
from onnx import numpy_helper

KEPT_METADATA = "vsr.fp32_nodes"


def fp32_nodes(model: onnx.ModelProto) -> list[str]:
    """Names of the nodes an fp16 form of ``model`` keeps fp32: each ``Mul -> ReduceSum -> Sigmoid`` chain."""
    g = model.graph
    producer = {o: n for n in g.node for o in n.output}
    consumers: dict[str, list] = {}
    for n in g.node:
        for t in n.input:
            consumers.setdefault(t, []).append(n)
    kept = []
    for n in g.node:
        if n.op_type != "ReduceSum":
            continue
        mul = producer.get(n.input[0])
        sigmoid = [c for c in consumers.get(n.output[0], []) if c.op_type == "Sigmoid"]
        if mul is None or mul.op_type != "Mul" or not sigmoid:
            continue
        kept += [mul.name, n.name, *(s.name for s in sigmoid)]
    if any(not name for name in kept):
        raise ValueError("fp16: a node to keep fp32 has no name; keeping it by name needs one")
    return kept


def half_model(model: onnx.ModelProto, keep_fp32: list[str] | None = None) -> onnx.ModelProto:
    """``model`` in fp16 with float32 graph I/O; ``keep_fp32``: node names left fp32 (default
    :func:`fp32_nodes`), recorded in the metadata ``vsr.fp32_nodes``."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    keep = fp32_nodes(model) if keep_fp32 is None else list(keep_fp32)
    half = convert_float_to_float16(copy.deepcopy(model), keep_io_types=True, node_block_list=keep,
                                    disable_shape_infer=False)
    _drop_round_trips(half)
    _sort_nodes(half)
    entry = half.metadata_props.add()
    entry.key, entry.value = KEPT_METADATA, ",".join(keep)
    return half


def _drop_round_trips(model: onnx.ModelProto) -> None:
    """Bypass every ``Cast(to fp32)`` of a ``Cast(to fp16)`` output: its readers take the fp32 value itself; a
    ``Cast(to fp32)`` of a constant becomes an fp32 constant.  Casts and constants nobody reads are removed."""
    g = model.graph
    to = {n.output[0]: n for n in g.node if n.op_type == "Cast"}

    def cast_to(node) -> int:
        return next(a.i for a in node.attribute if a.name == "to")

    inits = {t.name: t for t in g.initializer}
    rename, folded = {}, []
    for node in g.node:
        if node.op_type != "Cast" or cast_to(node) != onnx.TensorProto.FLOAT:
            continue
        src = to.get(node.input[0])
        if src is not None and cast_to(src) == onnx.TensorProto.FLOAT16:
            rename[node.output[0]] = src.input[0]
        elif node.input[0] in inits:  # a constant cast back (Resize's scales): an fp32 constant instead
            value = numpy_helper.to_array(inits[node.input[0]]).astype(np.float32)
            g.initializer.append(numpy_helper.from_array(value, node.output[0]))
            folded.append(node)
    for node in folded:
        g.node.remove(node)
    for node in g.node:
        node.input[:] = [rename.get(t, t) for t in node.input]
    graph_outputs = {o.name for o in g.output}
    while True:
        read = {t for n in g.node for t in n.input} | graph_outputs
        dead = [n for n in g.node if n.op_type == "Cast" and n.output[0] not in read]
        if not dead:
            break
        for n in dead:
            g.node.remove(n)
    names = {t for n in g.node for t in (*n.input, *n.output)}
    used = [t for t in g.initializer if t.name in names]
    del g.initializer[:]
    g.initializer.extend(used)
    kept = [vi for vi in g.value_info if vi.name in names and vi.name not in {t.name for t in used}]
    del g.value_info[:]
    g.value_info.extend(kept)


def _sort_nodes(model: onnx.ModelProto) -> None:
    """Nodes in topological order (the converter appends its casts at the end; ONNX's checker, the partition
    and TensorRT's parser want every input produced before it is read), otherwise in their old order."""
    g = model.graph
    ready = {i.name for i in g.input} | {t.name for t in g.initializer} | {""}
    pending, ordered = list(g.node), []
    while pending:
        left = []
        for node in pending:
            if all(t in ready for t in node.input):
                ordered.append(node)
                ready.update(node.output)
            else:
                left.append(node)
        if len(left) == len(pending):
            raise ValueError(f"fp16: a cycle or a missing input at {left[0].name or left[0].op_type}")
        pending = left
    del g.node[:]
    g.node.extend(ordered)
