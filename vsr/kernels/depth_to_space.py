"""PixelShuffle as ONNX ``DepthToSpace`` (mode ``CRD``), with the activation after it fused in.

``(N, C*r*r, H, W) -> (N, C, H*r, W*r)``, ``out[n, c, h*r + i, w*r + j] = x[n, c*r*r + i*r + j, h, w]``.

ONNX Runtime and the usual numpy recipe (reshape -> transpose -> reshape, then a separate LeakyReLU) move every
pixel two or three times; here one parallel pass reads each input row once and writes each output row once,
applying the LeakyReLU (EDVR's ``lrelu(pixel_shuffle(conv(x)))``) on the way.
"""

from __future__ import annotations

import numba
import numpy as np

from vsr.kernels.threads import parallel_loop_threads


@numba.njit(parallel=True, cache=True)
def _depth_to_space_crd(x, r, slope, out):  # pragma: no cover - compiled
    """slope: LeakyReLU negative slope applied to the output (1.0 means identity)."""
    n, crr, h, w = x.shape
    c = crr // (r * r)
    s = np.float32(slope)
    act = slope != 1.0
    for row in numba.prange(n * c * h):
        b = row // (c * h)
        ch = (row // h) % c
        y = row % h
        for i in range(r):
            dst = out[b, ch, y * r + i]
            for j in range(r):
                src = x[b, ch * r * r + i * r + j, y]
                if act:
                    for xx in range(w):
                        v = src[xx]
                        dst[xx * r + j] = v if v >= 0 else v * s
                else:
                    for xx in range(w):
                        dst[xx * r + j] = src[xx]


def depth_to_space_crd(x: np.ndarray, blocksize: int, out: np.ndarray | None = None,
                       negative_slope: float | None = None) -> np.ndarray:
    """``DepthToSpace(mode=CRD)``; with ``negative_slope`` a LeakyReLU (0.0: ReLU) is applied on the way."""
    n, crr, h, w = x.shape
    r = int(blocksize)
    if crr % (r * r):
        raise ValueError(f"DepthToSpace: {crr} channels are not divisible by blocksize^2 = {r * r}")
    shape = (n, crr // (r * r), h * r, w * r)
    if out is None:
        out = np.empty(shape, x.dtype)
    elif out.shape != shape:
        raise ValueError(f"DepthToSpace: out has shape {out.shape}, expected {shape}")
    slope = 1.0 if negative_slope is None else float(negative_slope)
    parallel_loop_threads()
    _depth_to_space_crd(np.ascontiguousarray(x), r, slope, out)
    return out
