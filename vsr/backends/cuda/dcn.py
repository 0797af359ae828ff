"""Deformable convolution for the CUDA runtime: vsr's sampling kernel, then the matrix product on torch.

vsr's ``dcn_im2col`` kernel fills the column buffer of a range of output pixels of one image; ``torch.addmm``
multiplies the weights by it straight into the output (cuBLAS on a GPU, tensor cores in fp16), on the same
stream.  vsr's own GEMM kernel (``dcn_gemm``, register-tiled, no tensor cores) stays the choice for grouped
convolutions and for comparison (``gemm="kernel"``).

Channels-last (:func:`deform_conv_nhwc_torch`): the columns are ``(pixels, kh*kw*C)`` rows and the output
``(N*Ho*Wo, Co)`` rows, so ``out = cols . W^T + bias`` is one row-major GEMM per chunk of pixels across the
whole batch (cuBLAS's "TN" form: W ``(Co, kh*kw*C)`` as it is stored, no copy of either operand), the bias
added by the GEMM itself.  Chunks of pixels are sized so that their columns fill half the device's L2 cache
(:func:`vsr.kernels.cuda.ops.column_chunk_pixels`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from vsr.kernels.cuda.ops import chunk_for, deform_conv, deform_conv_nhwc, deform_im2col, deform_im2col_nhwc
from vsr.kernels.deform_conv import DeformConvGeometry

GEMMS = ("torch", "kernel")


def deform_conv_torch(launcher, geom: DeformConvGeometry, x, weight, offset, mask, bias, *, out=None,
                      negative_slope: float | None = None, gemm: str = "torch",
                      chunk_pixels: int | None = None, mask_logits: bool = False) -> torch.Tensor:
    """``DeformConv`` x ``(N, C, H, W)`` -> ``(N, Co, Ho, Wo)`` on torch tensors (all one dtype, contiguous), with
    an optional LeakyReLU; arguments as :func:`vsr.kernels.cuda.ops.deform_conv`."""
    g = geom
    if _own_gemm(gemm, g):
        return deform_conv(launcher, g, x, weight, offset, mask, bias, out=out, negative_slope=negative_slope,
                           chunk_pixels=chunk_pixels, mask_logits=mask_logits)
    if out is None:
        out = launcher.empty(g.out_shape, x.dtype)
    npix = g.ho * g.wo
    chunk = min(chunk_for(launcher, g, x, chunk_pixels), npix)  # per image: its output columns are npix apart
    cols = launcher.empty((g.c * g.taps * chunk,), x.dtype)
    w2 = weight.reshape(g.co, g.c * g.taps)
    b2 = bias.reshape(g.co, 1)
    flat = out.view(g.n, g.co, npix)
    for n in range(g.n):
        for p0 in range(0, npix, chunk):
            nq = min(chunk, npix - p0)
            deform_im2col(launcher, g, x, offset, mask, cols, n * npix + p0, nq, mask_logits=mask_logits)
            # rows of the output block are npix apart: a valid BLAS leading dimension, no copy
            torch.addmm(b2, w2, cols[: g.c * g.taps * nq].view(g.c * g.taps, nq), out=flat[n, :, p0:p0 + nq])
    if negative_slope is not None:
        F.leaky_relu_(out, negative_slope)
    return out


def deform_conv_nhwc_torch(launcher, geom: DeformConvGeometry, x, weight, offset, mask, bias, *, out=None,
                           negative_slope: float | None = None, gemm: str = "torch",
                           chunk_pixels: int | None = None, mask_logits: bool = False) -> torch.Tensor:
    """``DeformConv`` channels-last on torch tensors: x ``(N, H, W, C)`` -> ``(N, Ho, Wo, Co)``; weight
    ``(Co, kh, kw, C/group)``, offset and mask (None: its logits in offset's record after the offsets) and
    ``mask_logits`` as :func:`vsr.kernels.cuda.ops.deform_conv_nhwc` takes them."""
    g = geom
    if _own_gemm(gemm, g):
        return deform_conv_nhwc(launcher, g, x, weight, offset, mask, bias, out=out, negative_slope=negative_slope,
                                chunk_pixels=chunk_pixels, mask_logits=mask_logits)
    total, k = g.n * g.ho * g.wo, g.taps * g.c
    if out is None:
        out = launcher.empty((g.n, g.ho, g.wo, g.co), x.dtype)
    chunk = chunk_for(launcher, g, x, chunk_pixels)
    cols = launcher.empty((chunk * k,), x.dtype)
    w_t = weight.reshape(g.co, k).t()  # (kh*kw*C, Co): a view, cuBLAS reads it transposed
    rows = out.view(total, g.co)
    for q0 in range(0, total, chunk):  # chunks run across images: their output rows are contiguous
        nq = min(chunk, total - q0)
        deform_im2col_nhwc(launcher, g, x, offset, mask, cols, q0, nq, mask_logits=mask_logits)
        torch.addmm(bias, cols[: nq * k].view(nq, k), w_t, out=rows[q0:q0 + nq])
    if negative_slope is not None:
        F.leaky_relu_(out, negative_slope)
    return out


def _own_gemm(gemm: str, geom: DeformConvGeometry) -> bool:
    """Whether vsr's GEMM kernel runs (asked for, or a grouped convolution), else torch's matrix product."""
    if gemm not in GEMMS:
        raise ValueError(f"DCN gemm {gemm!r}: choose from {', '.join(GEMMS)}")
    return gemm == "kernel" or geom.group != 1
