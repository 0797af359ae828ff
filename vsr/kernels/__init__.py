"""vsr's own CPU kernels for the ops a subgraph plan bridges (DCN, PixelShuffle); see :mod:`.registry`."""

from vsr.kernels.deform_conv import DeformConvGeometry, DeformConvKernel, deform_conv
from vsr.kernels.depth_to_space import depth_to_space_crd
from vsr.kernels.narrow_conv import conv3x3_narrow
from vsr.kernels.registry import (KERNELS, BridgeKernel, BridgeNode, KernelRegistry, kernel_factory, register_kernel,
                                  registered_ops)

__all__ = ["KERNELS", "BridgeKernel", "BridgeNode", "DeformConvGeometry", "DeformConvKernel", "KernelRegistry",
           "conv3x3_narrow", "deform_conv", "depth_to_space_crd", "kernel_factory", "register_kernel",
           "registered_ops"]
