"""int8 segments against their fp32 reference: error within a stated tolerance, and run-time scales that follow
the input where calibration scales fall behind.

Tolerance: the relative RMS error of the output (||int8 - fp32|| / ||fp32||) of a five-conv toy graph with
u8 activations and per-channel 7-bit weights (see ``vsr.quant.segment_graph.WEIGHT_QMAX``) stays below 3 % where each
conv's output is rounded once (its bias in the conv, zero points fed at run time): about the rounding of 8 bits on
every one of five layers of only 8 channels (little averaging); below 4.5 % (3 % x 1.5: two roundings of
each conv output, sqrt(2), and a little) where the zero points are constants and the bias is added after the
conv (``fixed_zero``, the plans' default: ONNX Runtime's fast int8 convs).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from tests.quant.int8_graphs import conv_chain, inputs, rel_rms, run_fp32, run_int8, write_int8_segment
from vsr.quant.segment_graph import WEIGHT_QMAX, quantize_weights

TOLERANCE = 0.03
TOLERANCE_FIXED_ZERO = 0.045


def test_weights_are_symmetric_per_output_channel_and_cannot_overflow_int16_pair_sums():
    w = np.random.default_rng(0).normal(size=(4, 3, 3, 3)).astype(np.float32)
    w[2] *= 100.0  # one large channel must not coarsen the others
    q, s = quantize_weights(w)
    assert q.dtype == np.int8 and s.shape == (4,) and np.abs(q).max() == WEIGHT_QMAX
    assert 2 * 255 * WEIGHT_QMAX <= 32767  # AVX2's vpmaddubsw adds two u8 x s8 products in int16
    err = np.abs(q.astype(np.float32) * s[:, None, None, None] - w)
    assert (err <= s[:, None, None, None] / 2 + 1e-7).all()


def test_rewritten_segment_is_int8(tmp_path):
    path = write_int8_segment(conv_chain(), inputs(), tmp_path)
    ops = [n.op_type for n in onnx.load(str(path)).graph.node]
    assert ops.count("QLinearConv") == 5 and "Conv" not in ops
    assert "QLinearLeakyRelu" in ops and "Relu" not in ops  # the ReLU is the u8 clamp at zero point 0


@pytest.mark.parametrize("fixed_zero", [True, False])
@pytest.mark.parametrize("scales", ["runtime", "static"])
def test_int8_matches_fp32_on_calibration_like_input(tmp_path, scales, fixed_zero):
    model = conv_chain()
    path = write_int8_segment(model, inputs(seed=1), tmp_path, fixed_zero=fixed_zero)
    x = inputs(seed=2)
    y, _ = run_int8(path, x, scales, windows=2)  # run-time scales: the first window starts wide (``start``)
    assert rel_rms(y, run_fp32(model, x)) < (TOLERANCE_FIXED_ZERO if fixed_zero else TOLERANCE)


@pytest.mark.parametrize("gain", [0.25, 3.0])  # 3.0: beyond where run-time scales start (2x calibration)
def test_runtime_scales_follow_the_input_static_ones_do_not(tmp_path, gain):
    model = conv_chain()
    path = write_int8_segment(model, inputs(seed=1), tmp_path)
    x = inputs(seed=2) * np.float32(gain)
    ref = run_fp32(model, x)
    runtime, backend = run_int8(path, x, "runtime", windows=2)
    static, _ = run_int8(path, x, "static", windows=2)
    e_runtime, e_static = rel_rms(runtime, ref), rel_rms(static, ref)
    assert e_runtime < TOLERANCE_FIXED_ZERO
    assert e_static > 1.3 * e_runtime
    if gain > 1:
        assert backend.table.reruns >= 1  # the first window saturated and was run again with wider scales


def test_facts_give_the_reruns_share_of_the_per_call_steps():
    from vsr.quant import Int8SegmentBackend

    backend = Int8SegmentBackend(threads=1)
    steps = {"segment00": 2.0, "segment00:rerun": 1.0, "bridge00_DeformConv": 1.0, "build:warmup": 9.0}
    facts = backend.facts(steps)["int8"]
    assert facts["rerun_s"] == 1.0 and facts["rerun_share"] == 0.25  # builds are not per-call steps
    assert "rerun_share" not in backend.facts()["int8"] and facts["dcn"] in ("int8", "fp32")
