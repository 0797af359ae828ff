"""Partition: steps cut at the bridge ops, each segment a valid standalone model, split == whole.

"Whole" is ONNX Runtime running the original graph; "split" is the plan executor (ORT segments + vsr kernels).
Tolerance 1e-4 absolute (outputs are O(1)).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.plan.toy_graphs import GraphBuilder, edvr_like
from vsr.errors import BackendError
from vsr.plan.executor import PlanExecutor
from tests.plan.arena_checks import check_no_overlap
from vsr.plan.partition import eval_dim, partition
from vsr.plan.plan import SubgraphPlan, write_plan
from vsr.plan.segments import OrtSegmentBackend

TOL = 1e-4


def run_whole(model: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})


def run_split(model: onnx.ModelProto, x: np.ndarray, tmp, **kw) -> tuple[SubgraphPlan, dict]:
    src = tmp / "model.onnx"
    onnx.save(model, str(src))
    plan = write_plan(src, tmp / "plan", **kw)
    ex = PlanExecutor(SubgraphPlan.load(tmp / "plan"), OrtSegmentBackend(threads=1))
    return plan, ex.run({"x": x})


def test_edvr_like_graph_is_cut_at_every_bridge_op(tmp_path):
    model = edvr_like()
    plan, _ = run_split(model, np.zeros((1, 3, 8, 6), np.float32), tmp_path)
    kinds = [(s.kind, s.op_type) for s in plan.steps]
    assert kinds == [("segment", None), ("bridge", "DeformConv"), ("segment", None), ("bridge", "DeformConv"),
                     ("segment", None), ("bridge", "DepthToSpace"), ("segment", None), ("bridge", "DepthToSpace"),
                     ("segment", None)]
    # every segment file is a valid model with typed, shaped I/O named after the original tensors
    for s in plan.steps:
        if s.kind == "segment":
            m = onnx.load(str(tmp_path / "plan" / s.file))
            onnx.checker.check_model(m, full_check=True)
            assert [i.name for i in m.graph.input] == s.inputs and [o.name for o in m.graph.output] == s.outputs
            for vi in list(m.graph.input) + list(m.graph.output):
                assert vi.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
                assert vi.type.tensor_type.shape.dim[0].dim_param == "N"


def test_offset_and_mask_conv_stay_in_the_segment_right_before_the_dcn():
    model = edvr_like()
    part = partition(model)
    producer = {o: n for n in model.graph.node for o in n.output}
    for k, s in enumerate(part.steps):
        if s.op_type != "DeformConv":
            continue
        before = part.steps[k - 1]
        assert before.kind == "segment"
        offset, mask = s.inputs[2], s.inputs[4]
        assert offset in before.outputs and mask in before.outputs
        seg_nodes = {n.name for n in part.segments[before.name].graph.node}
        # the Conv that predicts offsets and mask (two hops up: Mul, Conv) is in that segment
        mul = producer[producer[offset].input[0]]
        conv = producer[mul.input[0]]
        assert conv.op_type == "Conv" and conv.name in seg_nodes


def test_activation_after_a_bridge_is_fused_only_when_it_is_the_sole_consumer():
    g = GraphBuilder(8, 4, 4)
    a = g.depth_to_space("x")
    b = g.act(a)  # fused: sole consumer
    c = g.depth_to_space(g.conv(b, 8))
    d = g.act(c, "Relu")
    e = g.add(c, d)  # c has two consumers: not fused
    part = partition(g.model([e]))
    bridges = [s for s in part.steps if s.kind == "bridge"]
    assert bridges[0].epilogue == ("LeakyRelu", pytest.approx(0.1)) and bridges[0].outputs == [b]
    assert bridges[1].epilogue is None and bridges[1].outputs == [c]
    assert partition(g.model([e]), fuse_activations=False).steps[1].epilogue is None


@pytest.mark.parametrize("ops,n_bridges", [((), 0), (("DepthToSpace",), 2), (("DeformConv",), 2),
                                            (("DeformConv", "DepthToSpace"), 4), (("NarrowConv",), 1),
                                            (("DeformConv", "DepthToSpace", "NarrowConv"), 5)])
def test_bridge_op_set_is_configurable_and_output_is_unchanged(tmp_path, ops, n_bridges):
    model = edvr_like(seed=3)
    x = np.random.default_rng(0).random((2, 3, 8, 6), dtype=np.float32)
    plan, got = run_split(model, x, tmp_path, bridge_ops=ops)
    assert sum(s.kind == "bridge" for s in plan.steps) == n_bridges
    assert {s.op_type for s in plan.steps if s.kind == "bridge"} == set(ops)
    assert np.abs(got[plan.outputs[0]] - run_whole(model, x)[0]).max() <= TOL


def test_only_a_3x3_conv_of_few_outputs_is_a_narrow_conv_bridge():
    # the output conv (3 channels, 3x3, padding 1) is cut out; the 12-channel skip conv and the 3x3 convs of
    # many channels stay in their segments
    part = partition(edvr_like(), bridge_ops=("NarrowConv",))
    [b] = [s for s in part.steps if s.kind == "bridge"]
    assert b.op_type == "NarrowConv" and b.name.endswith("_NarrowConv") and b.constants.keys() == {1, 2}
    g = GraphBuilder(4, 5, 5)
    out = g.node("Conv", [g.conv("x", 3, k=3), g._init(np.zeros((2, 3, 3, 3))), g._init(np.zeros(2))], (2, 3, 3),
                 pads=[0, 0, 0, 0], kernel_shape=[3, 3])
    assert [s.op_type for s in partition(g.model([out]), bridge_ops=("NarrowConv",)).steps
            if s.kind == "bridge"] == ["NarrowConv"]  # the padded one, not the unpadded


def test_constant_nodes_are_copied_into_each_segment_that_uses_them(tmp_path):
    g = GraphBuilder(4, 4, 4)
    const = onnx.helper.make_node("Constant", [], ["k"], value=onnx.numpy_helper.from_array(
        np.full((1, 1, 1, 1), 0.5, np.float32)))
    g.nodes.append(const)
    g.shapes["k"] = (1, 1, 1)
    a = g.node("Mul", ["x", "k"], (4, 4, 4))
    b = g.depth_to_space(g.conv(a, 4))
    c = g.node("Mul", [b, "k"], g.shapes[b])
    model = g.model([c])
    x = np.random.default_rng(1).random((1, 4, 4, 4), dtype=np.float32)
    plan, got = run_split(model, x, tmp_path)
    assert "k" not in plan.tensors  # not exchanged between steps: every segment has its own copy
    assert np.abs(got[c] - run_whole(model, x)[0]).max() <= TOL


def test_unused_nodes_are_dropped_and_unknown_shapes_are_reported():
    g = GraphBuilder(4, 4, 4)
    a = g.depth_to_space(g.conv("x", 4))
    g.conv("x", 4)  # dead
    part = partition(g.model([g.act(g.conv(a, 4), "Relu")]))
    assert sum(len(m.graph.node) for m in part.segments.values()) == 3
    g2 = GraphBuilder(4, 4, 4)
    a = g2.depth_to_space(g2.conv("x", 4))
    model = g2.model([g2.conv(a, 4)], with_shapes=False)
    del model.graph.value_info[:]
    model.graph.node[0].op_type = "Conv"  # keep it valid, but make inference impossible:
    model.graph.node[0].input[1] = "missing_weight"
    with pytest.raises(BackendError, match="shape"):
        partition(model)


def test_eval_dim():
    assert eval_dim(7, {}) == 7
    assert eval_dim("3*N", {"N": 4}) == 12
    assert eval_dim("N*T+1", {"N": 2, "T": 5}) == 11
    with pytest.raises(BackendError, match="not bound"):
        eval_dim("M", {"N": 1})
    with pytest.raises(BackendError, match="arithmetic"):
        eval_dim("__import__('os')", {})


# -- random graphs ------------------------------------------------------------------------------------------

@st.composite
def random_graphs(draw):
    """Random DAGs of convs, activations, adds, concats, PixelShuffles and DCNs over 1..6 channel tensors."""
    seed = draw(st.integers(0, 2**16))
    h, w = draw(st.integers(2, 6)), draw(st.integers(2, 6))
    g = GraphBuilder(draw(st.sampled_from([2, 4])), h, w, seed)
    pool = ["x"]
    for _ in range(draw(st.integers(1, 7))):
        op = draw(st.sampled_from(["conv", "act", "add", "concat", "d2s", "dcn", "dcn"]))
        x = draw(st.sampled_from(pool))
        c, hh, ww = g.shapes[x]
        if op == "conv":
            pool.append(g.conv(x, draw(st.sampled_from([2, 4, 8]))))
        elif op == "act":
            pool.append(g.act(x, draw(st.sampled_from(["LeakyRelu", "Relu", "Sigmoid"]))))
        elif op in ("add", "concat"):
            same = [t for t in pool if g.shapes[t][1:] == (hh, ww) and (op == "concat" or g.shapes[t] == g.shapes[x])]
            y = draw(st.sampled_from(same))
            pool.append(g.add(x, y) if op == "add" else g.concat(x, y))
        elif op == "d2s":
            if c % 4:
                x = g.conv(x, 4)
            if g.shapes[x][1] * g.shapes[x][2] <= 64:
                pool.append(g.depth_to_space(x))
        else:
            groups = draw(st.sampled_from([1, 2])) if c % 2 == 0 else 1
            feat = draw(st.sampled_from([t for t in pool if g.shapes[t][1:] == (hh, ww)]))
            pool.append(g.dcn(x, feat, draw(st.sampled_from([2, 4])), groups,
                              offset_scale=draw(st.sampled_from([0.5, 3.0]))))
    outs = [pool[-1]] + ([pool[len(pool) // 2]] if len(pool) > 2 and pool[len(pool) // 2] != pool[-1] else [])
    return g.model(outs), (g.shapes["x"])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(graph=random_graphs(), batch=st.integers(1, 3), ops=st.sampled_from(
    [("DeformConv", "DepthToSpace"), ("DeformConv",), ("DepthToSpace",)]))
def test_split_equals_whole_on_random_graphs(tmp_path_factory, graph, batch, ops):
    model, (c, h, w) = graph
    tmp = tmp_path_factory.mktemp("g")
    x = np.random.default_rng(batch).random((batch, c, h, w), dtype=np.float32)
    plan, got = run_split(model, x, tmp, bridge_ops=ops)
    want = run_whole(model, x)
    for name, ref in zip(plan.outputs, want):
        assert got[name].shape == ref.shape
        assert np.abs(got[name] - ref).max() <= TOL
    # every bridge op of the chosen types became its own step; segments alternate with them
    n_ops = sum(n.op_type in ops for n in model.graph.node)
    assert sum(s.kind == "bridge" for s in plan.steps) == n_ops
    mem = plan.arena_plan(plan.symbols({"x": x.shape}))
    check_no_overlap(mem)
    assert mem.arena_nbytes <= mem.naive_nbytes
