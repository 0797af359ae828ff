"""vsr's CUDA kernels as operations on any launcher's arrays (:mod:`vsr.kernels.cuda.launch`).

Storage is float32 or float16 (every tensor of one call the same); arithmetic is float32 throughout.  Each
operation has an NCHW form and a channels-last one (``*_nhwc``: every array ``(N, H, W, C)``).
"""

from __future__ import annotations

import numpy as np

from vsr.kernels.deform_conv import DeformConvGeometry

_SUFFIX = {"float32": "f32", "float16": "f16"}
# The L2 cache the column chunks are sized to where the launcher cannot say (the CPU emulation): an H100's.
DEFAULT_L2_BYTES = 50 * 2**20
_IM2COL_BLOCK = 256
_GEMM_BLOCK = (64, 4, 1)  # VSR_GEMM_BX, VSR_GEMM_BY in deform_conv.cu
_GEMM_TILE = (256, 16)  # pixels x output channels per GEMM block
# The kernels index in 32-bit C int (64 bits only for each thread's per-image base): every count below this.
INT32_LIMIT = 2**31 - 1
_GRID_YZ_LIMIT = 65535  # a launch grid's y and z extents


def _suffix(*arrays) -> str:
    # by name, so that torch tensors (dtype torch.float16) pass as well as numpy/cupy arrays
    dtypes = {str(a.dtype).removeprefix("torch.") for a in arrays if a is not None}
    if len(dtypes) != 1 or next(iter(dtypes)) not in _SUFFIX:
        raise ValueError(f"CUDA kernels take float32 or float16 tensors of one dtype, got {sorted(dtypes)}")
    return _SUFFIX[dtypes.pop()]


def _blocks(n: int, per_block: int) -> int:
    return -(-n // per_block)


def column_chunk_pixels(geom: DeformConvGeometry, itemsize: int, l2_bytes: int | None = None) -> int:
    """Output pixels per im2col/GEMM launch pair: their columns (``kh*kw*C`` values a pixel) fill half the L2 cache
    (``l2_bytes``, None: :data:`DEFAULT_L2_BYTES`), so the GEMM reads from L2 what the sampling kernel just wrote
    and the other half holds the input rows being sampled; whole GEMM tiles of 256 pixels, one tile at least.
    EDVR-M in fp16 on an H100: 22,528 pixels, 25 MiB (65,536 pixels were 72 MiB, past its 50 MiB)."""
    per_pixel = geom.taps * geom.c * int(itemsize)
    pixels = (l2_bytes or DEFAULT_L2_BYTES) // 2 // per_pixel
    return max(_GEMM_TILE[0], pixels // _GEMM_TILE[0] * _GEMM_TILE[0])


def chunk_for(launcher, geom: DeformConvGeometry, x, chunk_pixels: int | None) -> int:
    """The chunk of a call: ``chunk_pixels`` where given, else sized to the launcher's L2 (its ``l2_cache_bytes``,
    where it has one); never more than the batch's output pixels."""
    if chunk_pixels is None:
        itemsize = 2 if _suffix(x) == "f16" else 4
        chunk_pixels = column_chunk_pixels(geom, itemsize, getattr(launcher, "l2_cache_bytes", None))
    return max(1, min(int(chunk_pixels), geom.n * geom.ho * geom.wo))


def check_int32(op: str, **counts: int) -> None:
    """ValueError naming the first of ``counts`` (element counts a kernel indexes in 32-bit int) that does not fit."""
    for label, value in counts.items():
        if int(value) > INT32_LIMIT:
            raise ValueError(f"{op}: {label} = {int(value)} exceeds the 32-bit index range of vsr's CUDA kernels "
                             f"({INT32_LIMIT}); split the batch or the frame")


def _check_dcn_int32(g: DeformConvGeometry, chunk: int) -> None:
    """What the DCN kernels index in 32 bits: the batch's output pixels, one image's input, offsets, mask and
    output, a chunk's columns (and its threads, rounded up to whole blocks); the per-image bases are 64-bit."""
    check_int32("DeformConv", batch_pixels=g.n * g.ho * g.wo, image_elements=g.c * g.h * g.w,
                image_offsets=2 * g.offset_group * g.taps * g.ho * g.wo, image_outputs=g.co * g.ho * g.wo,
                batch_channels=g.n * max(g.c, g.co), chunk_columns=g.c * g.taps * chunk,
                chunk_threads=_blocks(g.c * chunk, _IM2COL_BLOCK) * _IM2COL_BLOCK)


def deform_conv(launcher, geom: DeformConvGeometry, x, weight, offset, mask, bias, *, out=None,
                negative_slope: float | None = None, chunk_pixels: int | None = None,
                mask_logits: bool = False):
    """``DeformConv`` (ONNX, DCNv2) with an optional fused LeakyReLU: x ``(N, C, H, W)`` -> ``(N, Co, Ho, Wo)``.

    weight ``(Co, C/group, kh, kw)``, offset ``geom.offset_shape``, mask ``geom.mask_shape``, bias ``(Co,)``;
    all C-contiguous arrays of ``launcher`` with one dtype.  ``mask_logits``: mask holds the logits, the sampling
    kernel applies the sigmoid.  ``chunk_pixels``: output pixels per launch pair (None: :func:`chunk_for`).
    """
    g = geom
    expect = {"x": (g.n, g.c, g.h, g.w), "weight": (g.co, g.c // g.group, g.kh, g.kw), "offset": g.offset_shape,
              "mask": g.mask_shape, "bias": (g.co,)}
    for label, arr in zip(expect, (x, weight, offset, mask, bias)):
        if tuple(arr.shape) != tuple(expect[label]):
            raise ValueError(f"DeformConv: {label} has shape {tuple(arr.shape)}, expected {expect[label]}")
    suffix = _suffix(x, weight, offset, mask, bias)
    if out is None:
        out = launcher.empty(g.out_shape, x.dtype)
    slope = 1.0 if negative_slope is None else float(negative_slope)
    total = g.n * g.ho * g.wo
    chunk = chunk_for(launcher, g, x, chunk_pixels)
    cols = launcher.empty((g.c * g.taps * chunk,), x.dtype)
    kg = (g.c // g.group) * g.taps
    for q0 in range(0, total, chunk):
        nq = min(chunk, total - q0)
        deform_im2col(launcher, g, x, offset, mask, cols, q0, nq, mask_logits=mask_logits)
        grid = (_blocks(nq, _GEMM_TILE[0]), _blocks(g.co // g.group, _GEMM_TILE[1]), g.group)
        launcher.launch(f"dcn_gemm_{suffix}", grid, _GEMM_BLOCK, cols, weight, bias, out, g.co, g.group, kg,
                        g.ho * g.wo, q0, nq, slope)
    return out


def deform_im2col(launcher, geom: DeformConvGeometry, x, offset, mask, cols, q0: int, nq: int, *,
                  mask_logits: bool = False):
    """The sampled columns of output pixels ``q0 <= q < q0 + nq`` (``q = n*Ho*Wo + p``, across the batch):
    ``cols`` holds ``(C*kh*kw, nq)`` row-major at its start (the masked bilinear samples, see deform_conv.cu)."""
    g = geom
    _check_dcn_int32(g, nq)
    launcher.launch(f"dcn_im2col_{_suffix(x, offset, mask, cols)}", (_blocks(g.c * nq, _IM2COL_BLOCK), 1, 1),
                    (_IM2COL_BLOCK, 1, 1), x, offset, mask, cols, g.c, g.h, g.w, g.ho, g.wo, g.kh, g.kw, g.pad_top,
                    g.pad_left, g.stride_h, g.stride_w, g.dilation_h, g.dilation_w, g.offset_group, int(mask_logits),
                    q0, nq)
    return cols


def pixel_shuffle_lrelu(launcher, x, upscale: int = 2, *, out=None, negative_slope: float | None = None,
                        block: int = 256):
    """``DepthToSpace`` (CRD) then LeakyReLU (None: none, 0.0: ReLU): ``(N, C*r*r, H, W) -> (N, C, H*r, W*r)``."""
    n, crr, h, w = (int(v) for v in x.shape)
    r = int(upscale)
    if crr % (r * r):
        raise ValueError(f"DepthToSpace: {crr} channels are not divisible by blocksize^2 = {r * r}")
    shape = (n, crr // (r * r), h * r, w * r)
    out = _shuffle_out(launcher, x, out, shape)
    slope = 1.0 if negative_slope is None else float(negative_slope)
    grid = _shuffle_grid(w * r, h * r, n * shape[1], block)
    launcher.launch(f"pixel_shuffle_lrelu_{_suffix(x, out)}", grid, (block, 1, 1), x, out, n, shape[1], h, w, r,
                    slope)
    return out


def _shuffle_out(launcher, x, out, shape):
    if out is None:
        return launcher.empty(shape, x.dtype)
    if tuple(out.shape) != shape:
        raise ValueError(f"DepthToSpace: out has shape {tuple(out.shape)}, expected {shape}")
    return out


def _shuffle_grid(row: int, rows: int, images: int, block: int) -> tuple[int, int, int]:
    """The shuffle's grid: one thread per element of an output row, a block row per output row and image."""
    check_int32("DepthToSpace", row_elements=row)
    for label, value in (("output rows", rows), ("images (x channels in NCHW)", images)):
        if value > _GRID_YZ_LIMIT:
            raise ValueError(f"DepthToSpace: {value} {label} exceed the launch grid's {_GRID_YZ_LIMIT}")
    return _blocks(row, block), rows, images


def subpixel_major_order(channels: int, upscale: int = 2):
    """The channel permutation that makes a conv's output sub-pixel-major for the NHWC shuffle: new channel
    ``s*C + c`` is the old ``c*r*r + s`` (``s = i*r + j``), C = channels / r^2 -- an index array for dim 0 of the
    conv's weight and bias."""
    rr = int(upscale) ** 2
    if channels % rr:
        raise ValueError(f"DepthToSpace: {channels} channels are not divisible by blocksize^2 = {rr}")
    return np.arange(channels).reshape(channels // rr, rr).T.reshape(-1)


def deform_conv_nhwc(launcher, geom: DeformConvGeometry, x, weight, offset, mask, bias, *, out=None,
                     negative_slope: float | None = None, chunk_pixels: int | None = None,
                     mask_logits: bool = False):
    """:func:`deform_conv` channels-last: x ``(N, H, W, C)`` -> ``(N, Ho, Wo, Co)`` with vsr's GEMM kernel.

    weight ``(Co, kh, kw, C/group)`` (the module's ``(Co, C/group, kh, kw)`` permuted); offset ``(N, Ho, Wo, S)``
    whose first ``2*G*kh*kw`` values per pixel are the offsets (S larger: e.g. the whole ``conv_offset`` output);
    mask ``(N, Ho, Wo, S')`` likewise, its first ``G*kh*kw`` values, or None: the ``G*kh*kw`` values after the
    offsets in offset's record (``conv_offset``'s whole output: offsets, then the mask's logits); bias ``(Co,)``.
    ``mask_logits``: the mask's values are logits, the sampling kernel applies the sigmoid."""
    g = geom
    if tuple(weight.shape) != (g.co, g.kh, g.kw, g.c // g.group):
        raise ValueError(f"DeformConv: weight has shape {tuple(weight.shape)}, expected "
                         f"{(g.co, g.kh, g.kw, g.c // g.group)} (channels-last)")
    suffix = _suffix(x, weight, offset, mask, bias)
    if out is None:
        out = launcher.empty((g.n, g.ho, g.wo, g.co), x.dtype)
    slope = 1.0 if negative_slope is None else float(negative_slope)
    total = g.n * g.ho * g.wo
    chunk = chunk_for(launcher, g, x, chunk_pixels)
    cols = launcher.empty((chunk * g.taps * g.c,), x.dtype)
    for q0 in range(0, total, chunk):
        nq = min(chunk, total - q0)
        deform_im2col_nhwc(launcher, g, x, offset, mask, cols, q0, nq, mask_logits=mask_logits)
        grid = (_blocks(nq, _GEMM_TILE[0]), _blocks(g.co // g.group, _GEMM_TILE[1]), g.group)
        launcher.launch(f"dcn_gemm_nhwc_{suffix}", grid, _GEMM_BLOCK, cols, weight, bias, out, g.c, g.co, g.group,
                        g.taps, q0, nq, slope)
    return out


def deform_im2col_nhwc(launcher, geom: DeformConvGeometry, x, offset, mask, cols, q0: int, nq: int, *,
                       mask_logits: bool = False):
    """The sampled columns of output pixels ``q0 <= q < q0 + nq`` channels-last: ``cols`` holds
    ``(nq, kh*kw*C)`` row-major at its start (column ``k*C + c``: tap k, channel c); x ``(N, H, W, C)``, offset
    and mask as :func:`deform_conv_nhwc` takes them (their last dimension is their pixel stride; mask None: the
    values after the offsets in offset's record)."""
    g = geom
    n_offsets, n_mask = 2 * g.offset_group * g.taps, g.offset_group * g.taps
    expect = [("x", x, (g.n, g.h, g.w, g.c)),
              ("offset", offset, (g.n, g.ho, g.wo, n_offsets + (n_mask if mask is None else 0)))]
    expect += [] if mask is None else [("mask", mask, (g.n, g.ho, g.wo, n_mask))]
    for label, arr, want in expect:  # offset and mask may hold more values per pixel than they give
        shape = tuple(arr.shape)
        if shape[:3] != want[:3] or (shape[3] != want[3] if label == "x" else shape[3] < want[3]):
            raise ValueError(f"DeformConv: {label} has shape {shape}, expected {want} (channels-last)")
    if mask is None:  # a flat view from the first mask value of the first pixel on: contiguous, no copy
        mask, mask_stride = offset.reshape(-1)[n_offsets:], int(offset.shape[-1])
    else:
        mask_stride = int(mask.shape[-1])
    _check_dcn_int32(g, nq)
    launcher.launch(f"dcn_im2col_nhwc_{_suffix(x, offset, mask, cols)}", (_blocks(nq * g.c, _IM2COL_BLOCK), 1, 1),
                    (_IM2COL_BLOCK, 1, 1), x, offset, mask, cols, g.c, g.h, g.w, g.ho, g.wo, g.kh, g.kw, g.pad_top,
                    g.pad_left, g.stride_h, g.stride_w, g.dilation_h, g.dilation_w, g.offset_group,
                    int(offset.shape[-1]), mask_stride, int(mask_logits), q0, nq)
    return cols


def pixel_shuffle_lrelu_nhwc(launcher, x, upscale: int = 2, *, out=None, negative_slope: float | None = None,
                             block: int = 256, subpixel_major: bool = False):
    """:func:`pixel_shuffle_lrelu` channels-last: ``(N, H, W, C*r*r) -> (N, H*r, W*r, C)``.  ``subpixel_major``:
    x's channels are ordered ``(i*r + j)*C + c`` (the conv before it permuted by :func:`subpixel_major_order`),
    so that the shuffle copies runs of ``r*C`` contiguous values; the result is the same."""
    n, h, w, crr = (int(v) for v in x.shape)
    r = int(upscale)
    if crr % (r * r):
        raise ValueError(f"DepthToSpace: {crr} channels are not divisible by blocksize^2 = {r * r}")
    shape = (n, h * r, w * r, crr // (r * r))
    out = _shuffle_out(launcher, x, out, shape)
    check_int32("DepthToSpace", input_row_elements=w * crr)
    slope = 1.0 if negative_slope is None else float(negative_slope)
    grid = _shuffle_grid(w * r * shape[3], h * r, n, block)
    launcher.launch(f"pixel_shuffle_lrelu_nhwc_{_suffix(x, out)}", grid, (block, 1, 1), x, out, n, shape[3], h, w,
                    r, int(subpixel_major), slope)
    return out
