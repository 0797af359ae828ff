"""The narrow 3x3 convolution (EDVR's conv_last, 64 -> 3 at output resolution) equals ONNX ``Conv`` (3x3, stride
1, padding 1) in ONNX Runtime and ``onnx.reference`` to float32 rounding: it sums in another order, so the
tolerance is 1e-5 relative to the output's scale (64 * 9 products of O(1) values: sums of O(10))."""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.onnx_refs import run_ort, run_reference, single_node_model
from vsr.kernels import conv3x3_narrow

CONV = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])


def _case(shape, k, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape, dtype=np.float32)
    w = rng.standard_normal((k, shape[1], 3, 3), dtype=np.float32)
    b = rng.standard_normal(k, dtype=np.float32)
    return x, w, b


@pytest.mark.parametrize("shape,k", [((1, 64, 9, 13), 3), ((2, 5, 4, 3), 1), ((1, 8, 1, 1), 4), ((1, 3, 1, 7), 2),
                                     ((1, 16, 6, 1), 3)])
def test_matches_onnx_conv(shape, k):
    x, w, b = _case(shape, k)
    model = single_node_model("Conv", ["X", "W", "B"], **CONV)
    feeds = {"X": x, "W": w, "B": b}
    got = conv3x3_narrow(x, w, b)
    ref = run_reference(model, feeds)
    tol = 1e-5 * max(1.0, float(np.abs(ref).max()))
    assert got.shape == ref.shape
    assert np.abs(got - ref).max() <= tol
    assert np.abs(got - run_ort(model, feeds)).max() <= tol


def test_without_bias_and_with_a_fused_leaky_relu():
    x, w, b = _case((1, 12, 5, 6), 3, seed=1)
    y = run_reference(single_node_model("Conv", ["X", "W"], **CONV), {"X": x, "W": w})
    tol = 1e-5 * float(np.abs(y).max())
    assert np.abs(conv3x3_narrow(x, w) - y).max() <= tol
    assert np.abs(conv3x3_narrow(x, w, negative_slope=0.1) - np.where(y >= 0, y, y * np.float32(0.1))).max() <= tol
    assert np.abs(conv3x3_narrow(x, w, negative_slope=0.0) - np.maximum(y, 0)).max() <= tol


def test_writes_into_a_given_buffer_and_checks_shapes():
    x, w, b = _case((1, 4, 3, 3), 3, seed=2)
    out = np.full((1, 3, 3, 3), np.nan, np.float32)
    assert conv3x3_narrow(x, w, b, out=out) is out and np.isfinite(out).all()
    with pytest.raises(ValueError, match="out has shape"):
        conv3x3_narrow(x, w, b, out=np.empty((1, 3, 3, 4), np.float32))
    with pytest.raises(ValueError, match="weight"):
        conv3x3_narrow(x, w[:, :3], b)
