"""vsr's CUDA kernels (``*.cu`` here) and the launchers that run them: pycuda, NVRTC via cupy, or the CPU harness.

Importing this package compiles nothing; :func:`select_launcher` / :func:`open_launcher` do.
"""

from vsr.kernels.cuda.launch import LAUNCHER_ORDER, launcher_available, open_launcher, select_launcher
from vsr.kernels.cuda.ops import deform_conv, deform_conv_nhwc, pixel_shuffle_lrelu, pixel_shuffle_lrelu_nhwc
from vsr.kernels.cuda.sources import KERNELS, KernelSpec

__all__ = ["KERNELS", "LAUNCHER_ORDER", "KernelSpec", "deform_conv", "deform_conv_nhwc", "launcher_available",
           "open_launcher", "pixel_shuffle_lrelu", "pixel_shuffle_lrelu_nhwc", "select_launcher"]
