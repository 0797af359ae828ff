"""A 3x3 convolution with few output channels (EDVR's ``conv_last``: 64 -> 3 at output resolution).

``(N, C, H, W), weight (K, C, 3, 3), bias (K,) -> (N, K, H, W)``, stride 1, padding 1 (zeros), K small.

ONNX Runtime runs such a convolution in its blocked layout (NCHWc, 8 channels a block): the K = 3 outputs are
computed as a block of 8 and the 64-channel input is streamed from memory for one block -- about 3 GMAC/s on the
2-core AVX2 machine, 11 % of edvr-tiny's plan at LR 480x640 for 2 % of its arithmetic (docs/benchmarks.md, issue
25 item 6).  Here each output row keeps its K accumulator rows in L1 while the input rows pass once, the inner
loop running along the row (vectorised by LLVM).  The sum runs in another order than ONNX Runtime's: results
agree to float32 rounding (about 1e-6 relative), not bit for bit.
"""

from __future__ import annotations

import numba
import numpy as np

from vsr.kernels.threads import parallel_loop_threads

# the most output channels this kernel is for: beyond that, ONNX Runtime's blocked convolution is the better one
MAX_OUT_CHANNELS = 4


@numba.njit(parallel=True, cache=True)
def _conv3x3_narrow(x, w, b, slope, out):  # pragma: no cover - compiled
    """Per output row: its K accumulator rows (in L1); per input channel, all nine taps added in one pass."""
    n, c, h, wd = x.shape
    k = w.shape[0]
    zeros = np.zeros(wd, np.float32)  # the rows above and below the frame (padding)
    for row in numba.prange(n * h):
        bi = row // h
        y = row % h
        acc = np.zeros((k, wd), np.float32)
        for ci in range(c):
            r0 = x[bi, ci, y - 1] if y > 0 else zeros
            r1 = x[bi, ci, y]
            r2 = x[bi, ci, y + 1] if y + 1 < h else zeros
            for o in range(k):
                _add_taps(acc[o], r0, r1, r2, w[o, ci], wd)
        for o in range(k):
            dst = out[bi, o, y]
            for xx in range(wd):
                v = acc[o, xx] + b[o]
                dst[xx] = v if v >= 0 or slope == 1.0 else v * slope


@numba.njit(inline="always", cache=True)
def _add_taps(a, r0, r1, r2, t, wd):  # pragma: no cover - compiled
    """``a[x] += sum over ky, kx of t[ky, kx] * r_ky[x + kx - 1]`` (zero past the row's ends)."""
    t00, t01, t02 = t[0, 0], t[0, 1], t[0, 2]
    t10, t11, t12 = t[1, 0], t[1, 1], t[1, 2]
    t20, t21, t22 = t[2, 0], t[2, 1], t[2, 2]
    if wd == 1:
        a[0] += t01 * r0[0] + t11 * r1[0] + t21 * r2[0]
        return
    a[0] += (t01 * r0[0] + t02 * r0[1]) + (t11 * r1[0] + t12 * r1[1]) + (t21 * r2[0] + t22 * r2[1])
    for xx in range(1, wd - 1):
        a[xx] += ((t00 * r0[xx - 1] + t01 * r0[xx] + t02 * r0[xx + 1])
                  + (t10 * r1[xx - 1] + t11 * r1[xx] + t12 * r1[xx + 1])
                  + (t20 * r2[xx - 1] + t21 * r2[xx] + t22 * r2[xx + 1]))
    e = wd - 1
    a[e] += (t00 * r0[e - 1] + t01 * r0[e]) + (t10 * r1[e - 1] + t11 * r1[e]) + (t20 * r2[e - 1] + t21 * r2[e])


def conv3x3_narrow(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None,
                   out: np.ndarray | None = None, negative_slope: float | None = None) -> np.ndarray:
    """``Conv(x, weight, bias)`` with a 3x3 kernel, stride 1, padding 1; ``x (N, C, H, W)`` float32; with
    ``negative_slope`` a LeakyReLU (0.0: ReLU) on the way out."""
    n, c, h, wd = x.shape
    k = weight.shape[0]
    if weight.shape != (k, c, 3, 3):
        raise ValueError(f"conv3x3_narrow: weight of shape {weight.shape}, expected ({k}, {c}, 3, 3)")
    shape = (n, k, h, wd)
    if out is None:
        out = np.empty(shape, np.float32)
    elif out.shape != shape:
        raise ValueError(f"conv3x3_narrow: out has shape {out.shape}, expected {shape}")
    b = np.zeros(k, np.float32) if bias is None else np.ascontiguousarray(bias, np.float32)
    slope = np.float32(1.0 if negative_slope is None else negative_slope)
    parallel_loop_threads()
    _conv3x3_narrow(np.ascontiguousarray(x, np.float32), np.ascontiguousarray(weight, np.float32), b, slope, out)
    return out
