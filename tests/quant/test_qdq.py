"""The explicit Q/DQ export (TensorRT's int8 input): checked with ONNX Runtime against fp32; TensorRT itself only
where it is installed."""

from __future__ import annotations

import onnx
import pytest

from tests.quant.int8_graphs import conv_chain, inputs, rel_rms, run_fp32
from vsr.quant.calibrate import calibrate
from vsr.quant.qdq import qdq_model

TOLERANCE = 0.03  # relative RMS error of the output, as for the ONNX Runtime int8 segments


def test_qdq_model_has_int8_weights_and_activations_and_matches_fp32():
    model = conv_chain()
    stats = calibrate(model, inputs(seed=1)[None], threads=1)
    q = qdq_model(model, stats, {s.node for s in stats})
    onnx.checker.check_model(q)
    ops = [n.op_type for n in q.graph.node]
    assert ops.count("QuantizeLinear") == 5 and ops.count("DequantizeLinear") == 10  # 5 inputs, 5 weights
    assert all(t.data_type == onnx.TensorProto.INT8 for t in q.graph.initializer if t.name.endswith("/w_q"))
    x = inputs(seed=2)
    assert rel_rms(run_fp32(q, x), run_fp32(model, x)) < TOLERANCE


def test_tensorrt_builds_an_int8_engine_from_the_qdq_model(tmp_path):
    trt = pytest.importorskip("tensorrt")
    model = conv_chain()
    stats = calibrate(model, inputs(seed=1)[None], threads=1)
    q = qdq_model(model, stats, {s.node for s in stats})
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    assert parser.parse(q.SerializeToString())
    config = builder.create_builder_config()
    profile = builder.create_optimization_profile()
    profile.set_shape("x", (1, 3, 12, 10), (2, 3, 12, 10), (2, 3, 12, 10))
    config.add_optimization_profile(profile)
    assert builder.build_serialized_network(network, config) is not None
