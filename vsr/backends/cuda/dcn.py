"""Deformable convolution for the CUDA runtime: vsr's sampling kernel, then the matrix product on torch.

vsr's ``dcn_im2col`` kernel fills the column buffer of a range of output pixels of one image; ``torch.addmm``
multiplies the weights by it straight into the output (cuBLAS on a GPU, tensor cores in fp16), on the same
stream.  vsr's own GEMM kernel (``dcn_gemm``, register-tiled, no tensor cores) stays the choice for grouped
convolutions and for comparison (``gemm="kernel"``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from vsr.kernels.cuda.ops import DEFAULT_CHUNK_PIXELS, deform_conv, deform_im2col
from vsr.kernels.deform_conv import DeformConvGeometry

GEMMS = ("torch", "kernel")


def deform_conv_torch(launcher, geom: DeformConvGeometry, x, weight, offset, mask, bias, *, out=None,
                      negative_slope: float | None = None, gemm: str = "torch",
                      chunk_pixels: int = DEFAULT_CHUNK_PIXELS) -> torch.Tensor:
    """``DeformConv`` x ``(N, C, H, W)`` -> ``(N, Co, Ho, Wo)`` on torch tensors (all one dtype, contiguous), with
    an optional LeakyReLU; arguments as :func:`vsr.kernels.cuda.ops.deform_conv`."""
    g = geom
    if gemm not in GEMMS:
        raise ValueError(f"DCN gemm {gemm!r}: choose from {', '.join(GEMMS)}")
    if gemm == "kernel" or g.group != 1:
        return deform_conv(launcher, g, x, weight, offset, mask, bias, out=out, negative_slope=negative_slope,
                           chunk_pixels=chunk_pixels)
    if out is None:
        out = launcher.empty(g.out_shape, x.dtype)
    npix = g.ho * g.wo
    chunk = max(1, min(int(chunk_pixels), npix))
    cols = launcher.empty((g.c * g.taps * chunk,), x.dtype)
    w2 = weight.reshape(g.co, g.c * g.taps)
    b2 = bias.reshape(g.co, 1)
    flat = out.view(g.n, g.co, npix)
    for n in range(g.n):
        for p0 in range(0, npix, chunk):
            nq = min(chunk, npix - p0)
            deform_im2col(launcher, g, x, offset, mask, cols, n * npix + p0, nq)
            # rows of the output block are npix apart: a valid BLAS leading dimension, no copy
            torch.addmm(b2, w2, cols[: g.c * g.taps * nq].view(g.c * g.taps, nq), out=flat[n, :, p0:p0 + nq])
    if negative_slope is not None:
        F.leaky_relu_(out, negative_slope)
    return out
