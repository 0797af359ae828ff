"""The per-frame front: the nodes that compute each frame's features alone become one segment of their own, and a
plan run with it (front on the frames, then the rest on the windows) equals the whole graph."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.plan.toy_graphs import edvr_like
from vsr.errors import BackendError
from vsr.plan.executor import plan_executor
from vsr.plan.front import FRAMES
from vsr.plan.partition import partition
from vsr.plan.plan import PlanCache, plan_key
from vsr.plan.segments import OrtSegmentBackend

T, C, H, W = 3, 2, 8, 6


def windowed(seed: int = 0) -> onnx.ModelProto:
    """``x (N, T, C, H, W)`` -> frames -> conv, LeakyReLU, conv, residual Add, per-channel Mul (the front) ->
    back to windows -> the mean over T -> conv -> ``y (N, 3, H, W)``; also ``x``'s centre frame added."""
    rng = np.random.default_rng(seed)

    def init(name, arr, dtype=np.float32):
        return numpy_helper.from_array(np.asarray(arr, dtype), name)

    inits = [init("s_frames", [-1, C, H, W], np.int64), init("s_windows", [-1, T, 4, H, W], np.int64),
             init("w1", rng.normal(0, 0.3, (4, C, 3, 3))), init("b1", rng.normal(0, 0.1, 4)),
             init("w2", rng.normal(0, 0.3, (4, 4, 3, 3))), init("k", rng.normal(1, 0.2, (1, 4, 1, 1))),
             init("w3", rng.normal(0, 0.3, (C, 4, 3, 3))), init("centre", [1], np.int64)]
    conv = {"pads": [1, 1, 1, 1], "kernel_shape": [3, 3]}
    nodes = [helper.make_node("Reshape", ["x", "s_frames"], ["frames"]),
             helper.make_node("Conv", ["frames", "w1", "b1"], ["a"], name="conv1", **conv),
             helper.make_node("LeakyRelu", ["a"], ["a2"], alpha=0.1),
             helper.make_node("Conv", ["a2", "w2"], ["b"], name="conv2", **conv),
             helper.make_node("Add", ["a2", "b"], ["c"]),
             helper.make_node("Mul", ["c", "k"], ["feat"]),
             helper.make_node("Reshape", ["feat", "s_windows"], ["win"]),
             helper.make_node("ReduceMean", ["win"], ["m"], axes=[1], keepdims=0),
             helper.make_node("Conv", ["m", "w3"], ["r"], name="conv3", **conv),
             helper.make_node("Gather", ["x", "centre"], ["xc"], axis=1),
             helper.make_node("Squeeze", ["xc", "centre"], ["xs"]),
             helper.make_node("Add", ["r", "xs"], ["y"])]

    def vi(name, *dims):
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(dims))

    frames = [vi(t, f"{T}*N", c, H, W) for t, c in (("frames", C), ("a", 4), ("a2", 4), ("b", 4), ("c", 4),
                                                     ("feat", 4))]
    graph = helper.make_graph(nodes, "windowed", [vi("x", "N", T, C, H, W)], [vi("y", "N", C, H, W)], inits,
                              value_info=frames + [vi("win", "N", T, 4, H, W), vi("m", "N", 4, H, W),
                                                   vi("r", "N", C, H, W), vi("xs", "N", C, H, W)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    onnx.checker.check_model(model)
    return model


def test_the_front_is_one_per_frame_segment_of_the_nodes_that_see_one_frame():
    part = partition(windowed(), front=True)
    first = part.steps[0]
    assert first.name == "segment_features" and first.per_frame and part.frame_input == "frames"
    assert first.inputs == ["frames"] and first.outputs == ["feat"]
    assert [s.per_frame for s in part.steps] == [True] + [False] * (len(part.steps) - 1)
    ops = [n.op_type for n in part.segments["segment_features"].graph.node]
    assert ops == ["Conv", "LeakyRelu", "Conv", "Add", "Mul"]
    rest = [n.op_type for s in part.steps[1:] for n in part.segments[s.name].graph.node]
    assert "Conv" in rest and "Reshape" in rest and rest.count("Conv") == 1  # the frames' Reshape is dropped
    seg = part.segments["segment_features"].graph
    assert all(vi.type.tensor_type.shape.dim[0].dim_param == FRAMES for vi in list(seg.input) + list(seg.output))


def test_a_plan_with_a_front_runs_the_frames_then_the_windows_and_equals_the_graph(tmp_path):
    model = windowed(seed=1)
    path = tmp_path / "w.onnx"
    onnx.save(model, str(path))
    cache = PlanCache(tmp_path / "plans")
    plan = cache.get(path, front=True)
    assert plan.frame_input == "frames" and cache.get(path).frame_input is None  # two plans, two keys
    front = plan.per_frame_plan()
    assert front.inputs == ["frames"] and front.tensors["feat"].shape == (FRAMES, 4, H, W)
    assert plan.window_plan().inputs == ["x", "feat"]
    x = np.random.default_rng(2).random((2, T, C, H, W), dtype=np.float32)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = plan_executor(plan, OrtSegmentBackend(threads=1)).run({"x": x})["y"]
    assert np.abs(got - want).max() <= 1e-6
    # the front alone, on any number of frames: each frame's features, whatever else is in the call
    one = plan_executor(plan, OrtSegmentBackend(threads=1)).front
    five = one.run({"frames": x.reshape(-1, C, H, W)[:5]})["feat"]
    two = one.run({"frames": x.reshape(-1, C, H, W)[3:5]})["feat"]
    np.testing.assert_array_equal(five[3:5], two)


def test_the_front_is_in_the_key_and_keys_without_it_are_unchanged(tmp_path):
    path = tmp_path / "w.onnx"
    onnx.save(windowed(), str(path))
    plain, cut = plan_key(path), plan_key(path, front=True)
    assert plain.digest != cut.digest and "front" not in plain.fields() and cut.fields()["front"] is True


def test_a_graph_without_windows_has_no_front():
    with pytest.raises(BackendError, match="no per-frame front"):
        partition(edvr_like(), front=True)
