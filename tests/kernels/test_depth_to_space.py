"""PixelShuffle kernel equals ONNX ``DepthToSpace`` (CRD) in ONNX Runtime and ``onnx.reference`` (exactly: it
only moves values), with and without the fused LeakyReLU; equals ``torch.nn.PixelShuffle``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.kernels.onnx_refs import run_ort, run_reference, single_node_model
from vsr.kernels import depth_to_space_crd


@pytest.mark.parametrize("shape,r", [((2, 12, 3, 5), 2), ((1, 18, 4, 2), 3), ((1, 64 * 4, 6, 7), 2)])
def test_matches_onnx_depth_to_space_crd(shape, r):
    x = np.random.default_rng(0).standard_normal(shape, dtype=np.float32)
    model = single_node_model("DepthToSpace", ["X"], blocksize=r, mode="CRD")
    got = depth_to_space_crd(x, r)
    np.testing.assert_array_equal(got, run_ort(model, {"X": x}))
    np.testing.assert_array_equal(got, run_reference(model, {"X": x}))
    np.testing.assert_array_equal(got, torch.nn.PixelShuffle(r)(torch.from_numpy(x)).numpy())


def test_fused_leaky_relu_and_relu():
    x = np.random.default_rng(1).standard_normal((2, 16, 3, 4), dtype=np.float32)
    y = run_ort(single_node_model("DepthToSpace", ["X"], blocksize=2, mode="CRD"), {"X": x})
    np.testing.assert_array_equal(depth_to_space_crd(x, 2, negative_slope=0.1),
                                  np.where(y >= 0, y, y * np.float32(0.1)))
    np.testing.assert_array_equal(depth_to_space_crd(x, 2, negative_slope=0.0), np.maximum(y, 0))


def test_writes_into_a_given_buffer_and_checks_it():
    x = np.random.default_rng(2).standard_normal((1, 8, 2, 3), dtype=np.float32)
    out = np.empty((1, 2, 4, 6), np.float32)
    assert depth_to_space_crd(x, 2, out=out) is out
    with pytest.raises(ValueError, match="shape"):
        depth_to_space_crd(x, 2, out=np.empty((1, 2, 4, 5), np.float32))
    with pytest.raises(ValueError, match="divisible"):
        depth_to_space_crd(x[:, :7], 2)
