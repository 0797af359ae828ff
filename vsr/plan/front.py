"""The per-frame front of a graph: the nodes that compute each frame's features on their own.

EDVR reshapes its windows ``(N, T, C, H, W)`` into frames ``(N*T, C, H, W)`` and runs its feature extraction on
each frame alone (convolutions and activations); only then do frames meet (the alignment takes the centre
frame's features).  A window shares T-1 frames with the next, so a runner that computes each frame's features
once and keeps them saves that work T-1 times over.  :func:`find_front` finds those nodes in the graph:

* the *frame tensor* is the output of the one ``Reshape`` that turns a rank-5 graph input into rank 4;
* a node is in the front when its op works on each batch row alone (:data:`PER_FRAME_OPS`), every input that
  is not a constant is the frame tensor or a front node's output, and no constant it broadcasts spans the
  batch dimension.

The front's outputs (the tensors a node outside it reads) are each frame's features.
"""

from __future__ import annotations

import onnx

from vsr.errors import BackendError

# Ops that compute each batch row from the same row of their inputs alone (given per-row constants).
PER_FRAME_OPS = frozenset({"Conv", "Relu", "LeakyRelu", "PRelu", "Add", "Sub", "Mul", "Div", "Sigmoid", "Tanh",
                           "Clip"})
# Of those, the ones whose constant inputs broadcast against the rows (a Conv's weights do not).
BROADCASTING_OPS = frozenset({"PRelu", "Add", "Sub", "Mul", "Div"})
# The symbol of a per-frame segment's batch dimension: frames, not windows.
FRAMES = "F"


def find_front(nodes: list, inits: dict, inputs: list[str], ranks: dict[str, int]) -> tuple[str, set[int]]:
    """``(frame tensor, indices of the front's nodes)`` of a graph (``nodes`` in topological order;
    ``ranks``: tensor -> rank where known); a BackendError when the graph has no such front."""
    reshapes = [n.output[0] for n in nodes if n.op_type == "Reshape" and n.input[0] in inputs
                and ranks.get(n.input[0]) == 5 and ranks.get(n.output[0]) == 4]
    if len(reshapes) != 1:
        raise BackendError(f"no per-frame front: expected one Reshape of the (N, T, C, H, W) input into frames, "
                           f"found {len(reshapes)}")
    frame = reshapes[0]
    produced, front = {frame}, set()
    for i, n in enumerate(nodes):
        if n.op_type not in PER_FRAME_OPS or n.domain not in ("", "ai.onnx"):
            continue
        ins = [t for t in n.input if t]
        dynamic = [t for t in ins if t not in inits]
        if not dynamic or any(t not in produced for t in dynamic):
            continue
        if n.op_type in BROADCASTING_OPS and any(_spans_batch(inits[t]) for t in ins if t in inits):
            continue
        front.add(i)
        produced.update(n.output)
    if not front:
        raise BackendError("no per-frame front: no node computes on the frames alone")
    return frame, front


def _spans_batch(t: onnx.TensorProto) -> bool:
    """A constant that broadcasts against ``(F, C, H, W)`` with more than one row along the batch dimension."""
    return len(t.dims) == 4 and t.dims[0] != 1


def per_frame_model(model: onnx.ModelProto) -> None:
    """Name the leading dimension of every declared tensor of a per-frame segment :data:`FRAMES` (in place): it
    runs on frames, whatever the windows' batch was."""
    g = model.graph
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        dims = vi.type.tensor_type.shape.dim
        if len(dims) and not dims[0].HasField("dim_value"):
            dims[0].dim_param = FRAMES
