"""The graph forms TensorRT needs: ``Shape`` values folded per bucket (no int64 segment input) and the fp16
form with TSA's correlation kept fp32 by name.

The real export of EDVR-tiny (with TSA) is checked against the torch model at three batch sizes; the split plan
written from it is checked segment by segment.  The overflow that the fp32 nodes prevent is shown on a small
graph of the same ``Mul -> ReduceSum -> Sigmoid`` pattern, with features large enough to overflow fp16.
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from vsr.export.fold import FoldError, fold_shape_values, shape_inputs
from vsr.export.fp16 import KEPT_METADATA, fp32_nodes, half_model
from vsr.export.onnx import export_onnx
from vsr.plan.plan import write_plan

H, W = 16, 20


@pytest.fixture(scope="module")
def tiny_export(tmp_path_factory):
    from vsr.model import load_model

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, cfg = load_model("random", "edvr-tiny")
    path = export_onnx(model, cfg, tmp_path_factory.mktemp("export") / "tiny.onnx", H, W)
    return model, cfg, path


def _run(proto_or_path, x):
    src = proto_or_path if isinstance(proto_or_path, str) else proto_or_path.SerializeToString()
    return ort.InferenceSession(src, providers=["CPUExecutionProvider"]).run(None, {"lr": x})[0]


def test_export_has_no_shape_node_and_equals_torch_at_any_batch(tiny_export):
    model, cfg, path = tiny_export
    proto = onnx.load(str(path))
    assert not [n for n in proto.graph.node if n.op_type == "Shape"]
    assert shape_inputs(proto) == []
    for n in (1, 2, 3):  # the batch stays dynamic: the folded constants broadcast / infer it
        x = np.random.default_rng(n).random((n, cfg.num_frame, 3, H, W), dtype=np.float32)
        with torch.no_grad():
            want = model(torch.from_numpy(x)).numpy()
        assert np.abs(_run(str(path), x) - want).max() <= 1e-4


def test_split_segments_take_only_float_tensors(tiny_export, tmp_path):
    _, _, path = tiny_export
    plan = write_plan(path, tmp_path / "plan")
    dtypes = {plan.tensors[t].dtype for s in plan.steps for t in s.runtime_inputs() + s.outputs}
    assert dtypes == {"float32"}
    for s in plan.steps:
        if s.kind == "segment":
            assert shape_inputs(onnx.load(str(plan.directory / s.file))) == [], s.name


def _shape_graph(consumer: str, target_tail: list[int]) -> onnx.ModelProto:
    """x (N, 2, 3) -> Shape[0:1] -> Concat with ``target_tail`` -> ``consumer``(x, shape)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    tail = numpy_helper.from_array(np.array(target_tail, np.int64), "tail")
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape", start=0, end=1),
             helper.make_node("Concat", ["s", "tail"], ["target"], name="concat", axis=0),
             helper.make_node(consumer, ["x", "target"], ["y"], name="consumer")]
    graph = helper.make_graph(nodes, "g", [x], [y], [tail])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


@pytest.mark.parametrize("consumer, tail, want", [("Reshape", [6], [0, 6]), ("Reshape", [3, 2], [0, 3, 2]),
                                                  ("Expand", [2, 3], [1, 2, 3])])
def test_reshape_and_expand_targets_become_constants(consumer, tail, want):
    folded = fold_shape_values(_shape_graph(consumer, tail))
    assert [n.op_type for n in folded.graph.node] == [consumer]
    target = {t.name: numpy_helper.to_array(t) for t in folded.graph.initializer}[folded.graph.node[0].input[1]]
    assert target.tolist() == want
    for n in (1, 4):
        x = np.random.default_rng(n).random((n, 2, 3), dtype=np.float32)
        got = ort.InferenceSession(folded.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
        want_y = x.reshape(n, *tail) if consumer == "Reshape" else x
        np.testing.assert_array_equal(got[0], want_y)


def test_a_shape_value_reaching_another_op_is_refused_by_name():
    model = _shape_graph("Reshape", [6])
    model.graph.node[2].op_type = "Tile"  # Tile(x, repeats): repeats from a Shape cannot become constant
    with pytest.raises(FoldError, match="consumer: input 1 is computed from a Shape; Tile"):
        fold_shape_values(model)


def _attention_graph() -> onnx.ModelProto:
    """TSA's correlation in small: emb (N, T, C, H, W) * ref (N, 1, C, H, W) -> ReduceSum(C) -> Sigmoid
    -> times emb (the attention applied)."""
    emb = helper.make_tensor_value_info("emb", TensorProto.FLOAT, ["N", 3, 8, 4, 4])
    ref = helper.make_tensor_value_info("ref", TensorProto.FLOAT, ["N", 1, 8, 4, 4])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", 3, 8, 4, 4])
    axes = numpy_helper.from_array(np.array([2], np.int64), "axes")
    nodes = [helper.make_node("Mul", ["emb", "ref"], ["prod"], name="corr_mul"),
             helper.make_node("ReduceSum", ["prod", "axes"], ["corr"], name="corr_sum", keepdims=1),
             helper.make_node("Sigmoid", ["corr"], ["prob"], name="corr_sigmoid"),
             helper.make_node("Mul", ["emb", "prob"], ["out"], name="apply")]
    graph = helper.make_graph(nodes, "attention", [emb, ref], [out], [axes])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def test_fp16_keeps_the_correlation_fp32_so_large_features_do_not_overflow():
    model = _attention_graph()
    assert fp32_nodes(model) == ["corr_mul", "corr_sum", "corr_sigmoid"]
    rng = np.random.default_rng(0)
    feeds = {"emb": (rng.standard_normal((1, 3, 8, 4, 4)) * 400).astype(np.float32),
             "ref": (rng.standard_normal((1, 1, 8, 4, 4)) * 400).astype(np.float32)}  # products ~1.6e5 > 65504

    def run(m):  # ONNX's reference evaluator computes each node in its declared type (ONNX Runtime's CPU
        # provider would run fp16 Mul/ReduceSum in fp32 behind casts of its own, hiding the overflow)
        with np.errstate(over="ignore", invalid="ignore"):  # the overflow is what the bare form shows
            return ReferenceEvaluator(m).run(None, feeds)[0]

    want = run(model)
    kept = half_model(model)
    assert {e.key: e.value for e in kept.metadata_props}[KEPT_METADATA] == "corr_mul,corr_sum,corr_sigmoid"
    got = run(kept)
    assert np.isfinite(got).all() and np.abs(got - want).max() <= 1e-3 * np.abs(want).max()
    bare = run(half_model(model, keep_fp32=[]))  # everything fp16: the sum of products overflows
    assert not np.isfinite(bare).all()


def test_fp16_export_of_edvr_is_half_but_for_io_and_the_attention(tiny_export):
    model, cfg, path = tiny_export
    fp32 = onnx.load(str(path))
    half = half_model(fp32)
    kept = fp32_nodes(fp32)
    assert len(kept) == 3 and {n.op_type for n in fp32.graph.node if n.name in kept} == {"Mul", "ReduceSum",
                                                                                          "Sigmoid"}
    inferred = onnx.shape_inference.infer_shapes(half)
    types = {vi.name: vi.type.tensor_type.elem_type for vi in (*inferred.graph.value_info, *inferred.graph.input,
                                                               *inferred.graph.output)}
    for node in half.graph.node:
        if node.name in kept:
            assert {types[t] for t in (*node.input, *node.output) if t in types} == {TensorProto.FLOAT}, node.name
    conv_weights = {n.input[1] for n in half.graph.node if n.op_type == "Conv"}
    assert {t.data_type for t in half.graph.initializer if t.name in conv_weights} == {TensorProto.FLOAT16}
    assert types["lr"] == types["hr"] == TensorProto.FLOAT
    x = np.random.default_rng(4).random((2, cfg.num_frame, 3, H, W), dtype=np.float32)
    want = _run(str(path), x)
    err = np.abs(_run(half, x) - want).max()
    assert 0 < err <= 5e-3  # it did run in fp16, yet close
