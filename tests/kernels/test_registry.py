"""Kernel registry: built-in kernels are found by (op type, device); unknown ones are a BackendError."""

from __future__ import annotations

import numpy as np
import pytest

from vsr.errors import BackendError
from vsr.kernels import KERNELS, BridgeNode, KernelRegistry, kernel_factory, register_kernel, registered_ops


def test_builtin_kernels_are_registered_for_cpu():
    assert {"DeformConv", "DepthToSpace"} <= set(registered_ops("cpu"))
    with pytest.raises(BackendError, match="no bridge kernel for DeformConv on cuda"):
        kernel_factory("DeformConv", "cuda")


def test_registered_kernel_runs_through_the_protocol():
    k = kernel_factory("DepthToSpace")(BridgeNode("DepthToSpace", {"blocksize": 2, "mode": "CRD"},
                                                  ("LeakyRelu", 0.2)), [(1, 4, 2, 2)], {})
    x = -np.ones((1, 4, 2, 2), np.float32)
    out = np.empty((1, 1, 4, 4), np.float32)
    k.run([x], [out], np.empty(k.workspace_nbytes(), np.uint8))
    assert np.allclose(out, -0.2)
    with pytest.raises(BackendError, match="CRD"):
        kernel_factory("DepthToSpace")(BridgeNode("DepthToSpace", {"blocksize": 2, "mode": "DCR"}), [(1, 4, 2, 2)], {})


def test_dcn_needs_constant_weights():
    with pytest.raises(BackendError, match="constant"):
        kernel_factory("DeformConv")(BridgeNode("DeformConv", {}), [(1, 4, 3, 3)] * 5, {})


def test_register_a_new_kernel_in_the_global_registry():
    assert "Identity" not in registered_ops("test-device")
    try:
        @register_kernel("Identity", "test-device")
        def make(node, shapes, constants):
            return "kernel"

        assert kernel_factory("Identity", "test-device")(BridgeNode("Identity"), [], {}) == "kernel"
        assert registered_ops("test-device") == ["Identity"]
    finally:
        KERNELS.unregister("Identity", "test-device")
    with pytest.raises(BackendError, match="no bridge kernel for Identity on test-device"):
        kernel_factory("Identity", "test-device")


def test_a_private_registry_leaves_the_global_one_alone():
    reg = KernelRegistry()
    reg.register("DeformConv", "cpu")(lambda node, shapes, constants: "mine")
    assert reg.factory("DeformConv")(BridgeNode("DeformConv"), [], {}) == "mine"
    assert reg.ops("cpu") == ["DeformConv"]
    assert kernel_factory("DeformConv") is not reg.factory("DeformConv")
