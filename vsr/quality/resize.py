"""MATLAB-compatible bicubic ``imresize``: the degradation (BI) that super-resolution benchmarks use.

Each axis is resized by a matrix ``R (out, in)`` that holds, for every output sample, the weights of the
cubic kernel (a = -0.5) over its input neighbours; downscaling widens the kernel by ``1 / scale``
(antialiasing).  Samples beyond the border are mirrored (``... 2 1 | 1 2 ... n | n n-1 ...``), folded
into ``R``, so an image is resized by two matrix products: ``R_h @ img @ R_w.T``.  The matrices depend
only on ``(length, scale)`` and are cached.

dtype convention: float in -> float64 out, neither clipped nor rounded; ``uint8`` in -> ``uint8`` out.
For ``uint8`` MATLAB keeps the class between the two axis passes, so the intermediate image is rounded
(half away from zero) and saturated too; we do the same, which reproduces MATLAB-made LR frames bit for bit
(checked on Vid4 calendar).  Resizing the same image as float differs from that by a few levels at most.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

_KERNEL_RADIUS = 2.0  # the cubic kernel is non-zero on (-2, 2)


def cubic(x: np.ndarray) -> np.ndarray:
    """Keys' cubic convolution kernel with a = -0.5 (MATLAB's ``cubic``)."""
    ax = np.abs(x)
    ax2, ax3 = ax * ax, ax * ax * ax
    near = (1.5 * ax3 - 2.5 * ax2 + 1.0) * (ax <= 1)
    far = (-0.5 * ax3 + 2.5 * ax2 - 4.0 * ax + 2.0) * ((ax > 1) & (ax <= 2))
    return near + far


def output_length(in_length: int, scale: float) -> int:
    """MATLAB's output size for ``imresize(img, scale)``: ``ceil(in_length * scale)``."""
    return int(math.ceil(in_length * scale))


@lru_cache(maxsize=64)
def resize_matrix(in_length: int, scale: float) -> np.ndarray:
    """The ``(out_length, in_length)`` float64 matrix that resizes one axis as MATLAB's bicubic imresize.

    Output sample ``x`` (1-based) sits at input coordinate ``u = x / scale + (1 - 1 / scale) / 2``; it takes
    the ``ceil(kernel_width) + 2`` input samples from ``floor(u - kernel_width / 2)`` on.  Indices outside
    ``1..in_length`` are mirrored back inside (symmetric padding, the edge sample repeated).
    """
    if in_length < 1:
        raise ValueError(f"cannot resize an axis of length {in_length}")
    if scale <= 0:
        raise ValueError(f"scale must be positive, got {scale}")
    out_length = output_length(in_length, scale)
    antialias = scale < 1
    kernel_width = 2 * _KERNEL_RADIUS / scale if antialias else 2 * _KERNEL_RADIUS

    x = np.arange(1, out_length + 1, dtype=np.float64)
    u = x / scale + 0.5 * (1 - 1 / scale)
    left = np.floor(u - kernel_width / 2)
    taps = int(math.ceil(kernel_width)) + 2
    idx = left[:, None] + np.arange(taps)[None, :]  # 1-based input positions, may leave 1..in_length
    dist = u[:, None] - idx
    w = scale * cubic(scale * dist) if antialias else cubic(dist)
    w /= w.sum(axis=1, keepdims=True)

    # Mirror: MATLAB indexes [1..n, n..1] periodically, i.e. symmetric padding with the edge repeated.
    period = np.concatenate([np.arange(in_length), np.arange(in_length - 1, -1, -1)])
    src = period[np.mod(idx.astype(np.int64) - 1, 2 * in_length)]

    mat = np.zeros((out_length, in_length), dtype=np.float64)
    rows = np.broadcast_to(np.arange(out_length)[:, None], src.shape)
    np.add.at(mat, (rows, src), w)
    mat.setflags(write=False)
    return mat


def _axis_order(scale_h: float, scale_w: float) -> tuple[int, int]:
    # MATLAB resizes the axis with the smaller scale first (rows first on ties).  For floats the order only
    # moves rounding noise; for uint8 it decides which axis sees the rounded intermediate.
    return (0, 1) if scale_h <= scale_w else (1, 0)


def imresize(img: np.ndarray, scale: float | tuple[float, float]) -> np.ndarray:
    """Resize ``img`` (``(H, W)`` or ``(H, W, C)``) by ``scale`` like MATLAB's ``imresize(img, scale)``.

    ``scale`` is one factor or ``(scale_h, scale_w)``; the output is ``(ceil(H*sh), ceil(W*sw)[, C])``.
    ``uint8`` comes back as ``uint8`` (rounded after each axis, as MATLAB); any other dtype is resized as
    float and comes back as float64, unclipped.
    """
    img = np.asarray(img)
    if img.ndim not in (2, 3):
        raise ValueError(f"imresize expects (H, W) or (H, W, C), got shape {img.shape}")
    sh, sw = (float(scale), float(scale)) if np.isscalar(scale) else (float(scale[0]), float(scale[1]))
    is_uint8 = img.dtype == np.uint8
    out = img.astype(np.float64, copy=False)
    squeeze = out.ndim == 2
    if squeeze:
        out = out[:, :, None]
    for axis in _axis_order(sh, sw):
        if axis == 0:
            r = resize_matrix(out.shape[0], sh)
            h, w, c = out.shape
            out = (r @ out.reshape(h, w * c)).reshape(r.shape[0], w, c)
        else:
            r = resize_matrix(out.shape[1], sw)
            # (H, W, C) . (W', W) over W -> (H, C, W') -> (H, W', C); one BLAS call, unlike matmul/einsum
            out = np.ascontiguousarray(np.tensordot(out, r, axes=([1], [1])).transpose(0, 2, 1))
        if is_uint8:
            out = to_uint8_matlab(out).astype(np.float64)
    if squeeze:
        out = out[:, :, 0]
    return out.astype(np.uint8) if is_uint8 else out


def to_uint8_matlab(img: np.ndarray) -> np.ndarray:
    """MATLAB's ``uint8(x)``: round half away from zero, saturate to 0..255."""
    # saturating first leaves only non-negative values, where half-away-from-zero is floor(x + 0.5)
    out = np.clip(img, 0.0, 255.0)
    out += 0.5
    np.floor(out, out=out)
    return out.astype(np.uint8)


def bicubic_downscale_x4(img: np.ndarray) -> np.ndarray:
    """The BI x4 degradation: ``imresize(img, 1/4)``.  ``uint8`` -> ``uint8`` (MATLAB rounding); float -> float64.

    Crop the image to a multiple of 4 first (see :func:`mod_crop`) for an LR that is exactly H/4 x W/4.
    """
    return imresize(img, 0.25)


def bicubic_upscale_x4(img: np.ndarray) -> np.ndarray:
    """The bicubic x4 baseline: ``imresize(img, 4)``.  ``uint8`` -> ``uint8`` (MATLAB rounding); float -> float64."""
    return imresize(img, 4)


def mod_crop(img: np.ndarray, modulus: int = 4) -> np.ndarray:
    """``img`` cropped at the bottom/right to a height and width that are multiples of ``modulus``."""
    h, w = img.shape[:2]
    return img[: h - h % modulus, : w - w % modulus]
