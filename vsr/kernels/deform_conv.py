"""Modulated deformable convolution (ONNX ``DeformConv``, DCNv2) on the CPU.

Layouts are those of ONNX ``DeformConv`` (and torchvision, see :mod:`vsr.model.dcn`):

* ``x``      ``(N, C, H, W)``
* ``weight`` ``(Co, C/group, kh, kw)``, ``bias`` ``(Co,)``
* ``offset`` ``(N, 2*G*kh*kw, Ho, Wo)``: for offset group ``g`` and tap ``k`` (row-major over ``kh x kw``),
  channel ``2*(g*kh*kw + k)`` is the row (y) displacement and the next one the column (x) displacement
* ``mask``   ``(N, G*kh*kw, Ho, Wo)`` (already a probability; the kernel only multiplies)
* out        ``(N, Co, Ho, Wo)``

Algorithm: the input is copied once to channels-last so that the channels of an offset group sit side by side;
then tiles of output pixels are shared out to worker threads (:mod:`vsr.kernels.threads`).  Per tile, a numba
*gather* (GIL released) writes the column matrix ``(P, kh*kw*C)`` (bilinear sampling with zero padding, times the
mask), one single-threaded BLAS sgemm per conv group multiplies it with the re-ordered weights, and one pass
transposes the product back to NCHW with the bias (and a fused LeakyReLU) added.  Tiles bound the column buffer
and keep it in cache; every buffer is part of a workspace the caller may allocate once
(:meth:`DeformConvKernel.workspace_nbytes`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numba
import numpy as np

from vsr.kernels.blend import blend4, blend8, put
from vsr.kernels.threads import KernelWorkers, shared_workers

# Output pixels per gather/sgemm tile.  256 x 576 floats = 576 KiB of columns for EDVR's DCN: the tile is
# written by the gather and read by the sgemm while it still sits in the core's L2 cache.  Measured on EDVR-M's
# L1 shapes (CPU-seconds per frame, gather + sgemm): 256 -> 0.19, 1024 -> 0.28, 2048 -> 0.31.
DEFAULT_TILE_PIXELS = 256


@dataclass(frozen=True)
class DeformConvGeometry:
    """Attributes of one ``DeformConv`` node (ONNX names) and the shapes they act on."""

    n: int
    c: int
    h: int
    w: int
    co: int
    kh: int
    kw: int
    ho: int
    wo: int
    pad_top: int = 1
    pad_left: int = 1
    stride_h: int = 1
    stride_w: int = 1
    dilation_h: int = 1
    dilation_w: int = 1
    group: int = 1
    offset_group: int = 1

    @classmethod
    def from_attrs(cls, x_shape, w_shape, *, pads=None, strides=None, dilations=None, group=1, offset_group=1):
        """Geometry from input/weight shapes and ONNX attributes (defaults as in the ONNX spec)."""
        n, c, h, w = (int(v) for v in x_shape)
        co, cpg, kh, kw = (int(v) for v in w_shape)
        pads = list(pads) if pads else [0, 0, 0, 0]
        strides = list(strides) if strides else [1, 1]
        dilations = list(dilations) if dilations else [1, 1]
        if cpg * group != c:
            raise ValueError(f"DeformConv: weight has {cpg} channels per group x {group} groups, input has {c}")
        if c % offset_group:
            raise ValueError(f"DeformConv: {c} channels are not divisible into {offset_group} offset groups")
        if group > 1 and cpg % (c // offset_group):
            raise ValueError(f"DeformConv: an offset group of {c // offset_group} channels straddles conv groups "
                             f"of {cpg} channels (not supported)")
        ho = (h + pads[0] + pads[2] - dilations[0] * (kh - 1) - 1) // strides[0] + 1
        wo = (w + pads[1] + pads[3] - dilations[1] * (kw - 1) - 1) // strides[1] + 1
        return cls(n=n, c=c, h=h, w=w, co=co, kh=kh, kw=kw, ho=ho, wo=wo, pad_top=pads[0], pad_left=pads[1],
                   stride_h=strides[0], stride_w=strides[1], dilation_h=dilations[0], dilation_w=dilations[1],
                   group=group, offset_group=offset_group)

    @property
    def taps(self) -> int:
        return self.kh * self.kw

    @property
    def offset_shape(self) -> tuple[int, int, int, int]:
        return (self.n, 2 * self.offset_group * self.taps, self.ho, self.wo)

    @property
    def mask_shape(self) -> tuple[int, int, int, int]:
        return (self.n, self.offset_group * self.taps, self.ho, self.wo)

    @property
    def out_shape(self) -> tuple[int, int, int, int]:
        return (self.n, self.co, self.ho, self.wo)

    @property
    def gflop(self) -> float:
        """Multiply-adds of the matrix product, counted as two flops."""
        return 2.0 * self.n * self.co * self.c * self.taps * self.ho * self.wo / 1e9


# Output pixels whose column rows are completed (all taps and groups) before moving on: 128 rows of
# kh*kw*C floats (288 KiB for EDVR-M) stay in the L2 cache while they are written.
_CHUNK = 128


@numba.njit(nogil=True, cache=True)
def _gather_columns(xh, offset, mask, b, p0, p1, wo, kh, kw, pad_top, pad_left, stride_h, stride_w,
                    dilation_h, dilation_w, group, offset_group, cols, scratch_w, scratch_i,
                    inv=np.float32(1.0), zq=np.float32(0.0)):  # pragma: no cover
    """Column matrix of output pixels ``p0 <= p < p1`` of image ``b`` (single-threaded; releases the GIL).

    xh ``(N, H, W, C)``; offset ``(N, 2*G*kk, Ho*Wo)``; mask ``(N, G*kk, Ho*Wo)``;
    cols ``(>= p1-p0, kk*C)``: one row per pixel, columns ordered (conv group, tap, channel within the conv
    group) so that the channels sampled at one tap are contiguous; float32, or uint8 for the u8 codes
    ``rint(v * inv + zq)`` of the values (the int8 kernel, :mod:`vsr.kernels.deform_conv_int8`); scratch_w
    float32 ``(6, _CHUNK)`` and scratch_i uint64 ``(4, _CHUNK)``.

    For a chunk of pixels and each (offset group, tap), pass 1 computes the four bilinear corner weights
    (times the mask) and flat indices of every pixel -- a branch-free map that vectorises over pixels; pass 2
    blends the ``C/G`` contiguous channels at the four corners into ``C/G`` contiguous columns (8-wide vectors).
    """
    h = xh.shape[1]
    w = xh.shape[2]
    c = xh.shape[3]
    kk = kh * kw
    cpg = c // group  # channels per conv group
    cpog = c // offset_group  # channels per offset group
    vec_end = cpog - cpog % 8
    vec4 = cpog % 8 >= 4  # 4 more channels as one 4-wide vector
    tail = vec_end + 4 if vec4 else vec_end
    ncol = np.uint64(cols.shape[1])
    xf = xh.reshape(-1)
    cf = cols.reshape(-1)
    img = b * h * w * c
    zero = np.float32(0.0)
    one = np.float32(1.0)
    # Samples are clamped to [-2, size + 1] before flooring: every position outside (-1, size) still
    # contributes zero, and the float -> int conversion cannot overflow for huge offsets.
    lo = np.float32(-2.0)
    hi_y = np.float32(h + 1)
    hi_x = np.float32(w + 1)
    w00 = scratch_w[0]
    w01 = scratch_w[1]
    w10 = scratch_w[2]
    w11 = scratch_w[3]
    base_y = scratch_w[4]
    base_x = scratch_w[5]
    i00 = scratch_i[0]
    i01 = scratch_i[1]
    i10 = scratch_i[2]
    i11 = scratch_i[3]
    for q0 in range(p0, p1, _CHUNK):
        q1 = min(q0 + _CHUNK, p1)
        nq = q1 - q0
        for p in range(nq):
            oy = (q0 + p) // wo
            base_y[p] = np.float32(oy * stride_h - pad_top)
            base_x[p] = np.float32((q0 + p - oy * wo) * stride_w - pad_left)
        for g in range(offset_group):
            c0 = g * cpog
            for k in range(kk):
                ky = k // kw
                kx = k - ky * kw
                t = g * kk + k
                dy = np.float32(ky * dilation_h)
                dx = np.float32(kx * dilation_w)
                off_y = offset[b, 2 * t, q0:q1]
                off_x = offset[b, 2 * t + 1, q0:q1]
                msk = mask[b, t, q0:q1]
                for p in range(nq):
                    py = min(max(base_y[p] + dy + off_y[p], lo), hi_y)
                    px = min(max(base_x[p] + dx + off_x[p], lo), hi_x)
                    fy = np.floor(py)
                    fx = np.floor(px)
                    ly = py - fy
                    lx = px - fx
                    y0 = np.int64(fy)
                    x0 = np.int64(fx)
                    m = msk[p]
                    vy0 = one if 0 <= y0 < h else zero
                    vy1 = one if -1 <= y0 < h - 1 else zero
                    vx0 = one if 0 <= x0 < w else zero
                    vx1 = one if -1 <= x0 < w - 1 else zero
                    hy = (one - ly) * m * vy0
                    ly = ly * m * vy1
                    w00[p] = hy * (one - lx) * vx0
                    w01[p] = hy * lx * vx1
                    w10[p] = ly * (one - lx) * vx0
                    w11[p] = ly * lx * vx1
                    yc0 = min(max(y0, 0), h - 1)
                    yc1 = min(max(y0 + 1, 0), h - 1)
                    xc0 = min(max(x0, 0), w - 1)
                    xc1 = min(max(x0 + 1, 0), w - 1)
                    i00[p] = np.uint64(img + (yc0 * w + xc0) * c + c0)
                    i01[p] = np.uint64(img + (yc0 * w + xc1) * c + c0)
                    i10[p] = np.uint64(img + (yc1 * w + xc0) * c + c0)
                    i11[p] = np.uint64(img + (yc1 * w + xc1) * c + c0)
                if group == 1:
                    col0 = k * c + c0
                else:
                    cg = c0 // cpg
                    col0 = cg * kk * cpg + k * cpg + (c0 - cg * cpg)
                if cpog == 4:
                    _blend4_rows(xf, cf, w00, w01, w10, w11, i00, i01, i10, i11, nq,
                                 np.uint64(q0 - p0) * ncol + np.uint64(col0), ncol, inv, zq)
                    continue
                # Unsigned indices: numba then needs no negative-index wrap-around.
                for p in range(nq):
                    f00 = w00[p]
                    f01 = w01[p]
                    f10 = w10[p]
                    f11 = w11[p]
                    a00 = i00[p]
                    a01 = i01[p]
                    a10 = i10[p]
                    a11 = i11[p]
                    j = np.uint64(q0 - p0 + p) * ncol + np.uint64(col0)
                    for cb in range(0, vec_end, 8):
                        u = np.uint64(cb)
                        blend8(xf, a00 + u, a01 + u, a10 + u, a11 + u, f00, f01, f10, f11, cf, j + u, inv, zq)
                    if vec4:
                        u = np.uint64(vec_end)
                        blend4(xf, a00 + u, a01 + u, a10 + u, a11 + u, f00, f01, f10, f11, cf, j + u, inv, zq)
                    for ci in range(tail, cpog):
                        e = np.uint64(ci)
                        put(cf, j + e, f00 * xf[a00 + e] + f01 * xf[a01 + e] + f10 * xf[a10 + e]
                             + f11 * xf[a11 + e], inv, zq)


@numba.njit(nogil=True, cache=True)
def _blend4_rows(xf, cf, w00, w01, w10, w11, i00, i01, i10, i11, nq, j, ncol, inv, zq):  # pragma: no cover
    """Pass 2 of :func:`_gather_columns` for offset groups of 4 channels (EDVR-S's 32 / 8): pixel ``p``'s blend
    into ``cf[j + p * ncol:][:4]``, the same operations as the loop nest's.  A loop of its own because inline,
    beside the nest's dozens of live values, each pixel reloaded its indices and weights' addresses from the stack:
    the gather of EDVR-S's L1 DCN (5 frames at 180x320) took 0.142-0.163 s on one core, 0.112-0.132 s so."""
    for p in range(nq):
        blend4(xf, i00[p], i01[p], i10[p], i11[p], w00[p], w01[p], w10[p], w11[p], cf, j, inv, zq)
        j += ncol


@numba.njit(nogil=True, cache=True)
def _bias_activation(prod, scale, bias, slope, out):  # pragma: no cover - compiled
    """``out (Co, P) = act(prod.T * scale + bias)`` for prod ``(P, Co)`` (float32, or the int8 kernel's int32
    sums), scale and bias ``(Co,)``: the transpose back to NCHW, the scale, the bias and the activation in one
    pass.  act is LeakyReLU(slope); slope 1.0 means none.  A scale of 1 leaves float32 sums exact."""
    s = np.float32(slope)
    npix = prod.shape[0]
    nco = prod.shape[1]
    # blocks of 16 pixels keep the strided reads of prod within a few cache lines per output row
    for q0 in range(0, npix, 16):
        q1 = min(q0 + 16, npix)
        for co in range(nco):
            sc = scale[co]
            bc = bias[co]
            for p in range(q0, q1):
                v = np.float32(prod[p, co]) * sc + bc
                out[co, p] = v if v >= 0 or slope == 1.0 else v * s


def _aligned(nbytes: int, align: int = 64) -> int:
    return -(-nbytes // align) * align


def pack_weight(weight: np.ndarray, group: int) -> np.ndarray:
    """``(Co, C/group, kh, kw)`` -> ``(group, kh*kw*C/group, Co/group)``: rows in the column order of the gather,
    so that each tile is one ``cols (P, K) @ w (K, Co)`` (the long dimension first suits sgemm best)."""
    co, cpg, kh, kw = weight.shape
    w = np.asarray(weight, dtype=np.float32).reshape(group, co // group, cpg, kh * kw)
    return np.ascontiguousarray(w.transpose(0, 3, 2, 1).reshape(group, kh * kw * cpg, co // group))


class DeformConvKernel:
    """vsr's CPU ``DeformConv`` for one geometry; weights packed once.

    ``run(x, offset, mask, out, workspace)`` writes ``out (N, Co, Ho, Wo)``; ``workspace`` is a float32 buffer of
    at least :meth:`workspace_nbytes` bytes (allocated here when omitted).  The columns' and products' dtypes,
    how the columns are coded (:meth:`codes`) and the product (:meth:`product`) are what the int8 kernel
    (:mod:`vsr.kernels.deform_conv_int8`) changes.
    """

    columns, products = np.float32, np.float32

    def __init__(self, geometry: DeformConvGeometry, weight: np.ndarray, bias: np.ndarray | None,
                 tile_pixels: int = DEFAULT_TILE_PIXELS, workers: KernelWorkers | None = None,
                 negative_slope: float | None = None):
        self.geom = geometry
        # LeakyReLU fused after the bias (None: no activation, 0.0: ReLU)
        self.slope = 1.0 if negative_slope is None else float(negative_slope)
        self.workers = workers or shared_workers()
        if tuple(weight.shape) != (geometry.co, geometry.c // geometry.group, geometry.kh, geometry.kw):
            raise ValueError(f"DeformConv: weight shape {tuple(weight.shape)} does not match {geometry}")
        self.weight = pack_weight(weight, geometry.group)
        self.bias = (np.zeros(geometry.co, np.float32) if bias is None
                     else np.ascontiguousarray(bias, dtype=np.float32).reshape(geometry.co))
        self.tile = max(1, min(int(tile_pixels), geometry.ho * geometry.wo))
        self.ones = np.ones(geometry.co, np.float32)

    def _workspace_layout(self) -> list[tuple[tuple[int, ...], type]]:
        g = self.geom
        per_worker = [((self.tile, g.taps * g.c), self.columns), (((g.co // g.group) * self.tile,), self.products),
                      ((6, _CHUNK), np.float32), ((4, _CHUNK), np.uint64)]
        return [((g.n, g.h, g.w, g.c), np.float32)] + per_worker * self.workers.threads

    def workspace_nbytes(self) -> int:
        return sum(_aligned(math.prod(s) * np.dtype(t).itemsize) for s, t in self._workspace_layout())

    def _views(self, workspace: np.ndarray) -> list[np.ndarray]:
        raw = workspace.reshape(-1).view(np.uint8)
        if raw.size < self.workspace_nbytes():
            raise ValueError(f"DeformConv: workspace of {raw.size} bytes, needs {self.workspace_nbytes()}")
        views, at = [], 0
        for shape, dtype in self._workspace_layout():
            nbytes = math.prod(shape) * np.dtype(dtype).itemsize
            views.append(raw[at:at + nbytes].view(dtype).reshape(shape))
            at += _aligned(nbytes)
        return views

    def run(self, x: np.ndarray, offset: np.ndarray, mask: np.ndarray, out: np.ndarray | None = None,
            workspace: np.ndarray | None = None) -> np.ndarray:
        g = self.geom
        if tuple(x.shape) != (g.n, g.c, g.h, g.w) or tuple(offset.shape) != g.offset_shape \
                or tuple(mask.shape) != g.mask_shape:
            raise ValueError(f"DeformConv: got x {x.shape}, offset {offset.shape}, mask {mask.shape} for {g}")
        if out is None:
            out = np.empty(g.out_shape, np.float32)
        if workspace is None:
            workspace = np.empty(self.workspace_nbytes(), np.uint8)
        xh, *scratch = self._views(workspace)
        np.copyto(xh, x.transpose(0, 2, 3, 1))  # numpy's blocked transpose: ~3x faster than a numba loop here
        off = np.ascontiguousarray(offset, dtype=np.float32).reshape(g.n, offset.shape[1], -1)
        msk = np.ascontiguousarray(mask, dtype=np.float32).reshape(g.n, mask.shape[1], -1)
        out3 = out.reshape(g.n, g.co, g.ho * g.wo)
        npix = g.ho * g.wo
        per_image = -(-npix // self.tile)
        cog = g.co // g.group
        kg = g.taps * (g.c // g.group)
        inv, zq, scale = self.codes(xh, msk)

        def tile(worker: int, i: int) -> None:
            b, p0 = divmod(i, per_image)
            p0 *= self.tile
            p1 = min(p0 + self.tile, npix)
            t = p1 - p0
            cols, prod, corner_w, corner_i = scratch[4 * worker:4 * worker + 4]
            _gather_columns(xh, off, msk, b, p0, p1, g.wo, g.kh, g.kw, g.pad_top, g.pad_left, g.stride_h,
                            g.stride_w, g.dilation_h, g.dilation_w, g.group, g.offset_group, cols, corner_w,
                            corner_i, inv, zq)
            dst = prod[:cog * t].reshape(t, cog)
            for cg in range(g.group):
                self.product(worker, cols[:t, cg * kg:(cg + 1) * kg], cg, dst)
                _bias_activation(dst, scale[cg * cog:(cg + 1) * cog], self.bias[cg * cog:(cg + 1) * cog], self.slope,
                                 out3[b, cg * cog:(cg + 1) * cog, p0:p1])

        self.workers.map_tiles(tile, g.n * per_image)
        return out

    def codes(self, xh: np.ndarray, mask: np.ndarray) -> tuple[np.float32, np.float32, np.ndarray]:
        """``(inv, zq, scale)`` of one call: how the gather codes the columns (float32: as they are) and the
        per-output-channel scale that turns a product back into values."""
        return np.float32(1.0), np.float32(0.0), self.ones

    def product(self, worker: int, cols: np.ndarray, group: int, dst: np.ndarray) -> None:
        """``dst (t, Co/group) = cols (t, K) @ weight[group]``, on ``worker``'s thread."""
        np.dot(cols, self.weight[group], out=dst)


def deform_conv(x, weight, offset, bias=None, mask=None, *, pads=None, strides=None, dilations=None, group=1,
                offset_group=1, tile_pixels: int = DEFAULT_TILE_PIXELS, negative_slope: float | None = None
                ) -> np.ndarray:
    """One-shot ``DeformConv`` with the ONNX signature (inputs ``X, W, offset, B, mask``)."""
    geom = DeformConvGeometry.from_attrs(x.shape, weight.shape, pads=pads, strides=strides, dilations=dilations,
                                         group=group, offset_group=offset_group)
    if mask is None:
        mask = np.ones(geom.mask_shape, np.float32)
    return DeformConvKernel(geom, weight, bias, tile_pixels, negative_slope=negative_slope).run(x, offset, mask)
