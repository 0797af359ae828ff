"""The CPU bridge kernels vsr ships, by ONNX op type (:data:`BUILTIN_KERNELS`, read by :mod:`.registry`)."""

from __future__ import annotations

import numpy as np

from vsr.errors import BackendError
from vsr.kernels.deform_conv import DeformConvGeometry, DeformConvKernel
from vsr.kernels.deform_conv_int8 import Int8DeformConvKernel
from vsr.kernels.depth_to_space import depth_to_space_crd
from vsr.kernels.narrow_conv import conv3x3_narrow
from vsr.kernels.node import BridgeNode, KernelFactory


class _DeformConvStep:
    """ONNX ``DeformConv(X, W, offset, B?, mask?)``; W (and B) must be constants; ``qmax``: the product in int8
    with weights of that largest code (:mod:`vsr.kernels.deform_conv_int8`) where :func:`int8_pays`, else fp32."""

    def __init__(self, node: BridgeNode, shapes, constants, qmax: int | None = None):
        if 1 not in constants:
            raise BackendError("DeformConv bridge: the weight must be a constant (initializer)")
        if any(i in (0, 2, 4) for i in constants):
            raise BackendError("DeformConv bridge: X, offset and mask must be runtime tensors")
        a = node.attrs
        self.geom = DeformConvGeometry.from_attrs(
            shapes[0], constants[1].shape, pads=a.get("pads"), strides=a.get("strides"),
            dilations=a.get("dilations"), group=int(a.get("group", 1)), offset_group=int(a.get("offset_group", 1)))
        self.has_mask = len(shapes) > 4 and shapes[4] is not None
        kind, kw = DeformConvKernel, {}
        if qmax is not None and int8_pays(self.geom):
            kind, kw = Int8DeformConvKernel, {"qmax": qmax}
        self.kernel = kind(self.geom, constants[1], constants.get(3), negative_slope=node.negative_slope, **kw)
        self._ones = None if self.has_mask else np.ones(self.geom.mask_shape, np.float32)

    def workspace_nbytes(self) -> int:
        return self.kernel.workspace_nbytes()

    def run(self, inputs, outputs, workspace) -> None:
        mask = inputs[4] if self.has_mask else self._ones
        self.kernel.run(inputs[0], inputs[2], mask, outputs[0], workspace)


def int8_pays(geom: DeformConvGeometry) -> bool:
    """Whether the int8 DCN is faster than fp32 for ``geom``: one conv group, and offset groups of a multiple of 8
    channels, whose u8 codes the gather writes 8 at a time.  Measured (docs/benchmarks.md, issue 33): EDVR-M's
    8 channels per offset group 1.3-1.4x fp32; EDVR-S's 4, coded one by one, 0.8-0.9x."""
    return geom.group == 1 and (geom.c // geom.offset_group) % 8 == 0


def int8_deform_conv(qmax: int) -> KernelFactory:
    """The ``DeformConv`` kernel factory with the product in int8, weights' codes within ``[-qmax, qmax]``."""

    def factory(node: BridgeNode, shapes, constants) -> _DeformConvStep:
        return _DeformConvStep(node, shapes, constants, qmax=qmax)

    return factory


class _DepthToSpaceStep:
    def __init__(self, node: BridgeNode, shapes, constants):
        mode = node.attrs.get("mode", "DCR")
        mode = mode.decode() if isinstance(mode, bytes) else mode
        if mode != "CRD":
            raise BackendError(f"DepthToSpace bridge: only mode CRD (PixelShuffle) is implemented, not {mode}")
        self.blocksize = int(node.attrs["blocksize"])
        self.slope = node.negative_slope

    def workspace_nbytes(self) -> int:
        return 0

    def run(self, inputs, outputs, workspace) -> None:
        depth_to_space_crd(inputs[0], self.blocksize, out=outputs[0], negative_slope=self.slope)


class _NarrowConvStep:
    """ONNX ``Conv(X, W, B?)`` 3x3, stride 1, padding 1, few output channels (the plan's ``NarrowConv``)."""

    def __init__(self, node: BridgeNode, shapes, constants):
        if 1 not in constants or 0 in constants:
            raise BackendError("NarrowConv bridge: the weight must be a constant and X a runtime tensor")
        self.weight = np.ascontiguousarray(constants[1], np.float32)
        bias = constants.get(2)  # contiguous float32 once, not per call
        self.bias = None if bias is None else np.ascontiguousarray(bias, np.float32)
        self.slope = node.negative_slope

    def workspace_nbytes(self) -> int:
        return 0

    def run(self, inputs, outputs, workspace) -> None:
        conv3x3_narrow(inputs[0], self.weight, self.bias, out=outputs[0], negative_slope=self.slope)


# The factory of a kernel is its class: ``_DeformConvStep(node, input_shapes, constants)``.
BUILTIN_KERNELS: dict[tuple[str, str], KernelFactory] = {
    ("DeformConv", "cpu"): _DeformConvStep,
    ("DepthToSpace", "cpu"): _DepthToSpaceStep,
    ("NarrowConv", "cpu"): _NarrowConvStep,
}
