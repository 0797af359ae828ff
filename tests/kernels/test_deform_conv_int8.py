"""The DCN bridge with its product in int8 stays within int8 rounding of vsr's fp32 kernel, and its u8 columns
cannot saturate: every value the gather writes lies in the range :func:`u8_range` bounds.

Tolerance: relative RMS 3 % of the fp32 output: u8 columns (one scale per call, from the input's range) times
8-bit per-channel weights, summed over K = 9 * C taps.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.test_deform_conv import CASES, make_case
from vsr.kernels import DeformConvKernel
from vsr.kernels.builtin import int8_deform_conv
from vsr.kernels.deform_conv import _CHUNK, _gather_columns
from vsr.kernels.deform_conv_int8 import Int8DeformConvKernel, u8_range
from vsr.kernels.node import BridgeNode

TOLERANCE = 0.03


def rel_rms(a, ref):
    return float(np.sqrt(np.mean((a - ref) ** 2)) / np.sqrt(np.mean(ref ** 2)))


@pytest.mark.parametrize("name", ["edvr-like", "stride2-dilation2", "sixteen-per-group", "edvr-s-like",
                                  "twelve-per-group"])
def test_int8_product_is_within_int8_rounding_of_fp32(name):
    n, c, h, w, co, kh, kw, attrs = CASES[name]
    geom, f = make_case(5, n, c, h, w, co, kh, kw, **attrs)
    ref = DeformConvKernel(geom, f["W"], f["B"], negative_slope=0.1).run(f["X"], f["O"], f["M"])
    k8 = Int8DeformConvKernel(geom, f["W"], f["B"], negative_slope=0.1, tile_pixels=32)
    got = k8.run(f["X"], f["O"], f["M"])
    assert rel_rms(got, ref) < TOLERANCE
    np.testing.assert_array_equal(k8.run(f["X"], f["O"], f["M"]), got)  # bindings reused, same result
    assert np.abs(k8.w_q).max() == 127


@pytest.mark.parametrize("mask_lo", [0.0, -1.5])
def test_every_column_value_lies_in_the_bound_the_codes_cover(mask_lo):
    geom, f = make_case(7, 2, 16, 9, 13, 16, 3, 3, pads=[1, 1, 1, 1], offset_group=8, offset_scale=0.7)
    mask = (f["M"] * (2.0 - mask_lo) + mask_lo).astype(np.float32)
    xh = np.ascontiguousarray(f["X"].transpose(0, 2, 3, 1))
    off, msk = f["O"].reshape(2, -1, 9 * 13), mask.reshape(2, -1, 9 * 13)
    cols = np.empty((9 * 13, 9 * 16), np.float32)
    lo, hi = u8_range(float(xh.min()), float(xh.max()), float(msk.min()), float(msk.max()))
    for b in range(2):
        _gather_columns(xh, off, msk, b, 0, 9 * 13, 13, 3, 3, 1, 1, 1, 1, 1, 1, 1, 8, cols,
                        np.empty((6, _CHUNK), np.float32), np.empty((4, _CHUNK), np.uint64))
        assert lo <= cols.min() and cols.max() <= hi
    # and they are near it: the values reach most of the range (the codes are not wasted)
    assert cols.max() > 0.3 * hi


def step(name: str, qmax: int):
    n, c, h, w, co, kh, kw, attrs = CASES[name]
    geom, f = make_case(1, n, c, h, w, co, kh, kw, **attrs)
    node = BridgeNode("DeformConv", dict(attrs))
    return int8_deform_conv(qmax)(node, [(n, c, h, w), None, geom.offset_shape, None, geom.mask_shape],
                                  {1: f["W"], 3: f["B"]})


def test_the_int8_factory_keeps_fp32_where_int8_does_not_pay():
    s16 = step("sixteen-per-group", 63)  # 16 channels per offset group: coded 8 at a time
    assert type(s16.kernel) is Int8DeformConvKernel and np.abs(s16.kernel.w_q).max() == 63
    assert type(step("edvr-like", 127).kernel) is DeformConvKernel  # 2 per offset group: one at a time
    assert type(step("conv-groups", 127).kernel) is DeformConvKernel
