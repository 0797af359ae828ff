"""vsr's DeformConv kernel equals ONNX Runtime's ``DeformConv``, ``onnx.reference`` and the PyTorch reference.

Tolerance: 1e-4 absolute, with weights at the model's initialisation scale (uniform +-1/sqrt(C*k*k)) so that
outputs are O(1).  Offsets are scaled so that many samples fall outside the image (zero padding) or exactly on
its border.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.kernels.onnx_refs import run_ort, run_reference, single_node_model
from vsr.kernels import DeformConvGeometry, DeformConvKernel, deform_conv
from vsr.kernels.deform_conv import _CHUNK, _gather_columns
from vsr.model.dcn import deform_conv2d_reference

TOL = 1e-4


def make_case(seed, n, c, h, w, co, kh, kw, *, pads, strides=(1, 1), dilations=(1, 1), group=1, offset_group=1,
              offset_scale=3.0):
    rng = np.random.default_rng(seed)
    geom = DeformConvGeometry.from_attrs((n, c, h, w), (co, c // group, kh, kw), pads=pads, strides=strides,
                                         dilations=dilations, group=group, offset_group=offset_group)
    bound = 1.0 / np.sqrt(c // group * kh * kw)
    return geom, dict(
        X=rng.standard_normal((n, c, h, w), dtype=np.float32),
        W=rng.uniform(-bound, bound, (co, c // group, kh, kw)).astype(np.float32),
        O=(rng.standard_normal(geom.offset_shape) * offset_scale).astype(np.float32),
        B=rng.standard_normal(co).astype(np.float32),
        M=rng.random(geom.mask_shape, dtype=np.float32),
    )


def ort_deform_conv(feeds, geom, pads, strides=(1, 1), dilations=(1, 1), mask=True):
    inputs = ["X", "W", "O", "B", "M"] if mask else ["X", "W", "O", "B"]
    model = single_node_model("DeformConv", inputs, kernel_shape=[geom.kh, geom.kw], pads=list(pads),
                              strides=list(strides), dilations=list(dilations), group=geom.group,
                              offset_group=geom.offset_group)
    return model, {k: feeds[k] for k in inputs}


CASES = {
    # name: (n, c, h, w, co, kh, kw, attrs)
    "edvr-like": (2, 16, 9, 13, 16, 3, 3, dict(pads=[1, 1, 1, 1], offset_group=8)),
    "one-group": (1, 4, 7, 6, 5, 3, 3, dict(pads=[1, 1, 1, 1])),
    "stride2-dilation2": (1, 8, 11, 10, 6, 3, 3, dict(pads=[2, 2, 2, 2], strides=[2, 2], dilations=[2, 2],
                                                      offset_group=2)),
    "no-pad-rect-kernel": (2, 6, 8, 9, 4, 2, 3, dict(pads=[0, 0, 0, 0], offset_group=3)),
    "asym-pads": (1, 4, 6, 7, 3, 3, 3, dict(pads=[0, 1, 2, 1], offset_group=1)),
    "conv-groups": (1, 8, 6, 6, 6, 3, 3, dict(pads=[1, 1, 1, 1], group=2, offset_group=4)),
    "sixteen-per-group": (1, 32, 5, 7, 8, 3, 3, dict(pads=[1, 1, 1, 1], offset_group=2)),  # 8-wide + remainder
    "edvr-s-like": (2, 32, 7, 9, 8, 3, 3, dict(pads=[1, 1, 1, 1], offset_group=8)),  # 4 a group: 4-wide
    "twelve-per-group": (1, 24, 5, 6, 4, 3, 3, dict(pads=[1, 1, 1, 1], offset_group=2)),  # 8-wide + 4-wide
    "six-per-group": (1, 12, 6, 5, 4, 3, 3, dict(pads=[1, 1, 1, 1], offset_group=2)),  # 4-wide + remainder
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_onnxruntime(name):
    n, c, h, w, co, kh, kw, attrs = CASES[name]
    geom, f = make_case(1, n, c, h, w, co, kh, kw, **attrs)
    model, feeds = ort_deform_conv(f, geom, attrs["pads"], attrs.get("strides", (1, 1)),
                                   attrs.get("dilations", (1, 1)))
    want = run_ort(model, feeds)
    got = deform_conv(f["X"], f["W"], f["O"], f["B"], f["M"], **attrs)
    assert got.shape == want.shape == geom.out_shape
    assert np.abs(got - want).max() <= TOL


def test_matches_onnx_reference_evaluator():
    # onnx.reference is a plain-Python loop nest: keep the case tiny
    geom, f = make_case(2, 1, 4, 5, 6, 3, 3, 3, pads=[1, 1, 1, 1], offset_group=2, offset_scale=4.0)
    model, feeds = ort_deform_conv(f, geom, [1, 1, 1, 1])
    want = run_reference(model, feeds)
    got = deform_conv(f["X"], f["W"], f["O"], f["B"], f["M"], pads=[1, 1, 1, 1], offset_group=2)
    assert np.abs(got - want).max() <= TOL


def test_matches_pytorch_reference_with_tiles_smaller_than_an_image():
    geom, f = make_case(3, 3, 16, 10, 12, 16, 3, 3, pads=[1, 1, 1, 1], offset_group=8)
    kernel = DeformConvKernel(geom, f["W"], f["B"], tile_pixels=7)  # 120 pixels -> 18 tiles, last one partial
    got = kernel.run(f["X"], f["O"], f["M"])
    t = {k: torch.from_numpy(v) for k, v in f.items()}
    want = deform_conv2d_reference(t["X"], t["O"], t["M"], t["W"], t["B"], padding=1).numpy()
    assert np.abs(got - want).max() <= TOL


def test_samples_far_outside_the_image_contribute_nothing():
    geom, f = make_case(4, 1, 8, 5, 5, 4, 3, 3, pads=[1, 1, 1, 1], offset_group=1)
    f["O"][:] = 1e6  # every sample far below/right of the image (and no integer overflow)
    got = deform_conv(f["X"], f["W"], f["O"], f["B"], f["M"], pads=[1, 1, 1, 1])
    assert np.array_equal(got, np.broadcast_to(f["B"][None, :, None, None], got.shape))
    f["O"][:] = -1e6
    got = deform_conv(f["X"], f["W"], f["O"], f["B"], f["M"], pads=[1, 1, 1, 1])
    assert np.array_equal(got, np.broadcast_to(f["B"][None, :, None, None], got.shape))


@pytest.mark.parametrize("shift", [-1.0, -0.5, 0.0, 0.5, 1.0])
def test_samples_exactly_on_and_just_past_the_border(shift):
    # integer and half-integer offsets put samples on the first/last row and column, or one pixel beyond
    geom, f = make_case(5, 1, 8, 6, 7, 4, 3, 3, pads=[1, 1, 1, 1], offset_group=1)
    f["O"][:] = shift
    model, feeds = ort_deform_conv(f, geom, [1, 1, 1, 1])
    want = run_ort(model, feeds)
    got = deform_conv(f["X"], f["W"], f["O"], f["B"], f["M"], pads=[1, 1, 1, 1])
    assert np.abs(got - want).max() <= TOL


def test_without_mask_equals_mask_of_ones():
    geom, f = make_case(6, 1, 8, 6, 6, 8, 3, 3, pads=[1, 1, 1, 1], offset_group=2)
    model, feeds = ort_deform_conv(f, geom, [1, 1, 1, 1], mask=False)
    want = run_ort(model, feeds)
    got = deform_conv(f["X"], f["W"], f["O"], f["B"], None, pads=[1, 1, 1, 1], offset_group=2)
    assert np.abs(got - want).max() <= TOL


def test_fused_leaky_relu():
    geom, f = make_case(7, 2, 16, 6, 5, 16, 3, 3, pads=[1, 1, 1, 1], offset_group=8)
    plain = deform_conv(f["X"], f["W"], f["O"], f["B"], f["M"], pads=[1, 1, 1, 1], offset_group=8)
    fused = deform_conv(f["X"], f["W"], f["O"], f["B"], f["M"], pads=[1, 1, 1, 1], offset_group=8,
                        negative_slope=0.1)
    assert (plain < 0).any()
    np.testing.assert_array_equal(fused, np.where(plain >= 0, plain, plain * np.float32(0.1)))


def test_workspace_is_reused_and_checked():
    geom, f = make_case(8, 1, 8, 6, 6, 8, 3, 3, pads=[1, 1, 1, 1], offset_group=2)
    kernel = DeformConvKernel(geom, f["W"], f["B"], tile_pixels=16)
    ws = np.full(kernel.workspace_nbytes(), 255, np.uint8)  # garbage (NaN patterns) must not leak through
    out = np.empty(geom.out_shape, np.float32)
    kernel.run(f["X"], f["O"], f["M"], out, ws)
    want = deform_conv(f["X"], f["W"], f["O"], f["B"], f["M"], pads=[1, 1, 1, 1], offset_group=2)
    assert np.abs(out - want).max() <= TOL
    with pytest.raises(ValueError, match="workspace"):
        kernel.run(f["X"], f["O"], f["M"], out, ws[:-1])


def test_rejects_shapes_that_do_not_match_the_geometry():
    geom, f = make_case(9, 1, 4, 5, 5, 4, 3, 3, pads=[1, 1, 1, 1])
    kernel = DeformConvKernel(geom, f["W"], f["B"])
    with pytest.raises(ValueError, match="DeformConv"):
        kernel.run(f["X"][:, :, :4], f["O"], f["M"])
    with pytest.raises(ValueError, match="offset groups"):
        DeformConvGeometry.from_attrs((1, 6, 5, 5), (4, 6, 3, 3), offset_group=4)


def columns_by_numpy(x, offset, mask, geom, inv=None, zq=None):
    """The gather's column matrix ``(N*Ho*Wo, kh*kw*C)`` (conv group 1, stride 1, dilation 1) evaluated by numpy in
    float32 with the kernel's own order of operations (its sample clamp, corner weights and blend), so that it
    equals the kernel's bit for bit; ``inv``/``zq``: the u8 codes ``rint(v * inv + zq)`` clamped to [0, 255]."""
    n, c, h, w = x.shape
    g, kk, cpog = geom.offset_group, geom.taps, c // geom.offset_group
    f32, one = np.float32, np.float32(1.0)
    oy, ox = np.meshgrid(np.arange(geom.ho), np.arange(geom.wo), indexing="ij")
    base_y, base_x = (oy - geom.pad_top).astype(f32)[None], (ox - geom.pad_left).astype(f32)[None]
    xh = x.transpose(0, 2, 3, 1)
    cols = np.empty((n, geom.ho, geom.wo, kk, c), f32)
    for gi in range(g):
        for k in range(kk):
            t = gi * kk + k
            py = np.clip(base_y + f32(k // geom.kw) + offset[:, 2 * t], f32(-2.0), f32(h + 1))
            px = np.clip(base_x + f32(k % geom.kw) + offset[:, 2 * t + 1], f32(-2.0), f32(w + 1))
            fy, fx = np.floor(py), np.floor(px)
            ly, lx = py - fy, px - fx
            y0, x0 = fy.astype(np.int64), fx.astype(np.int64)
            m = mask[:, t]
            hy = (one - ly) * m * ((0 <= y0) & (y0 < h)).astype(f32)
            ly = ly * m * ((-1 <= y0) & (y0 < h - 1)).astype(f32)
            vx0, vx1 = ((0 <= x0) & (x0 < w)).astype(f32), ((-1 <= x0) & (x0 < w - 1)).astype(f32)
            b = np.arange(n)[:, None, None]
            yc0, yc1 = np.clip(y0, 0, h - 1), np.clip(y0 + 1, 0, h - 1)
            xc0, xc1 = np.clip(x0, 0, w - 1), np.clip(x0 + 1, 0, w - 1)
            ch = slice(gi * cpog, (gi + 1) * cpog)
            acc = xh[b, yc0, xc0, ch] * (hy * (one - lx) * vx0)[..., None]
            acc = acc + xh[b, yc0, xc1, ch] * (hy * lx * vx1)[..., None]
            acc = acc + xh[b, yc1, xc0, ch] * (ly * (one - lx) * vx0)[..., None]
            cols[:, :, :, k, ch] = acc + xh[b, yc1, xc1, ch] * (ly * lx * vx1)[..., None]
    cols = cols.reshape(n * geom.ho * geom.wo, kk * c)
    if inv is None:
        return cols
    return np.clip(np.rint(cols * inv + zq), 0, 255).astype(np.uint8)


@pytest.mark.parametrize("codes", [False, True])
def test_four_channel_groups_gather_bit_for_bit(codes):
    """EDVR-S's offset groups of 4 channels (the default weights' DCNs, blended by their own loop): the columns of
    several chunks of pixels, with many samples outside the image, equal numpy's evaluation of the formula exactly
    (float32 columns, and the u8 codes of the int8 kernel)."""
    geom, f = make_case(11, 2, 32, 9, 31, 8, 3, 3, pads=[1, 1, 1, 1], offset_group=8)  # 279 pixels: 3 chunks
    xh = np.ascontiguousarray(f["X"].transpose(0, 2, 3, 1))
    npix = geom.ho * geom.wo
    off, msk = f["O"].reshape(2, -1, npix), f["M"].reshape(2, -1, npix)
    inv, zq = (np.float32(40.0), np.float32(128.0)) if codes else (np.float32(1.0), np.float32(0.0))
    cols = np.empty((2 * npix, 9 * 32), np.uint8 if codes else np.float32)
    for b in range(2):
        _gather_columns(xh, off, msk, b, 0, npix, geom.wo, 3, 3, 1, 1, 1, 1, 1, 1, 1, 8, cols[b * npix:],
                        np.empty((6, _CHUNK), np.float32), np.empty((4, _CHUNK), np.uint64), inv, zq)
    want = columns_by_numpy(f["X"], f["O"], f["M"], geom, *((inv, zq) if codes else ()))
    assert np.array_equal(cols.view(np.uint8), want.view(np.uint8))
    assert (np.abs(f["O"]) > 9).sum() > 100  # samples displaced past the image's 9 rows, and beyond its border


def test_four_channel_groups_match_pytorch_reference_across_tiles():
    geom, f = make_case(12, 2, 32, 9, 31, 16, 3, 3, pads=[1, 1, 1, 1], offset_group=8)
    kernel = DeformConvKernel(geom, f["W"], f["B"], tile_pixels=200)  # tiles that end inside a chunk
    got = kernel.run(f["X"], f["O"], f["M"])
    t = {k: torch.from_numpy(v) for k, v in f.items()}
    want = deform_conv2d_reference(t["X"], t["O"], t["M"], t["W"], t["B"], padding=1).numpy()
    assert np.abs(got - want).max() <= TOL
