"""vsr's CUDA kernels (``vsr/kernels/cuda/*.cu``), run on the CPU harness, equal their definitions.

DCN: against a float64 numpy DCNv2 written from the definition here, on offsets that move samples by fractions
of a pixel and out of the frame, with masks, several offset groups and conv groups.  Tolerances: fp32 storage
1e-5 absolute (outputs are O(1); seen: 5e-7); fp16 storage (inputs rounded to half, the reference computed from
those rounded inputs) 1e-3 of the largest output (seen: 4.3e-4) -- the column buffer and the output are rounded
to half (2^-11 relative each).  PixelShuffle + LeakyReLU only moves and scales values: exact, in both dtypes, over
every half bit pattern (which also checks the shim's round-to-nearest-even half conversion).

The mask's sigmoid is applied in the sampling kernel where the mask holds logits (channels-last: the logits
after the offsets in ``conv_offset``'s record); saturated logits give 0 and 1, never NaN.

Index arithmetic is 32-bit: the launch refuses shapes beyond it, before launching anything.  The 3x3 taps run
unrolled (EDVR's), other sizes by the general loop: both are checked (``edvr-like``, ``conv-groups-rect-kernel``).

The channels-last forms (``*_nhwc``: every array ``(N, H, W, C)``) are checked against the same definitions, with
the offsets read out of a wider per-pixel record (as the CUDA runtime passes DCNv2Pack's whole ``conv_offset``
output) and the same tolerances.
"""

from __future__ import annotations

import numpy as np
import pytest

from vsr.kernels import DeformConvGeometry, deform_conv as cpu_deform_conv
from vsr.kernels.cuda import (deform_conv, deform_conv_nhwc, launcher_available, open_launcher, pixel_shuffle_lrelu,
                              pixel_shuffle_lrelu_nhwc, select_launcher)
from vsr.kernels.cuda.host import build_harness
from vsr.kernels.cuda.ops import column_chunk_pixels, deform_im2col, subpixel_major_order

pytestmark = pytest.mark.skipif(not launcher_available("host"), reason="no host C++ compiler for the CPU harness")


@pytest.fixture(scope="module")
def host():
    return open_launcher("host")


def reference_dcn(x, weight, offset, mask, bias, geom: DeformConvGeometry, slope=None):
    """DCNv2 from its definition, float64: out = bias + sum over taps of W * mask * bilinear(x, p + dp)."""
    g = geom
    x, weight, offset, mask, bias = (np.asarray(a, np.float64) for a in (x, weight, offset, mask, bias))
    oy = (np.arange(g.ho) * g.stride_h - g.pad_top)[:, None]
    ox = (np.arange(g.wo) * g.stride_w - g.pad_left)[None, :]
    cpog = g.c // g.offset_group
    cols = np.zeros((g.n, g.c, g.taps, g.ho, g.wo))
    for n in range(g.n):
        for og in range(g.offset_group):
            for k in range(g.taps):
                t = og * g.taps + k
                py = oy + (k // g.kw) * g.dilation_h + offset[n, 2 * t]
                px = ox + (k % g.kw) * g.dilation_w + offset[n, 2 * t + 1]
                y0, x0 = np.floor(py).astype(int), np.floor(px).astype(int)
                val = np.zeros((cpog, g.ho, g.wo))
                planes = x[n, og * cpog:(og + 1) * cpog]
                for dy in (0, 1):
                    for dx in (0, 1):
                        yy, xx = y0 + dy, x0 + dx
                        wgt = (1 - abs(py - yy)) * (1 - abs(px - xx))
                        inside = (yy >= 0) & (yy < g.h) & (xx >= 0) & (xx < g.w)
                        val += np.where(inside, wgt, 0.0) * planes[:, np.clip(yy, 0, g.h - 1), np.clip(xx, 0, g.w - 1)]
                cols[n, og * cpog:(og + 1) * cpog, k] = val * mask[n, t]
    cpg, cog = g.c // g.group, g.co // g.group
    out = np.empty(g.out_shape)
    for cg in range(g.group):
        w = weight[cg * cog:(cg + 1) * cog].reshape(cog, cpg, g.taps)
        out[:, cg * cog:(cg + 1) * cog] = np.einsum("oct,nctyx->noyx", w, cols[:, cg * cpg:(cg + 1) * cpg])
    out += bias[None, :, None, None]
    return out if slope is None else np.where(out >= 0, out, out * slope)


def make_case(seed, n, c, h, w, co, kh, kw, **attrs):
    rng = np.random.default_rng(seed)
    geom = DeformConvGeometry.from_attrs((n, c, h, w), (co, c // attrs.get("group", 1), kh, kw), **attrs)
    bound = 1.0 / np.sqrt(c // geom.group * kh * kw)
    offset = rng.uniform(-1.5, 1.5, geom.offset_shape)  # fractions of a pixel either way
    far = rng.random(geom.offset_shape) < 0.15  # and some samples well outside the frame, on either side
    offset[far] = rng.choice([-1.0, 1.0], far.sum()) * rng.uniform(h / 2, 2 * max(h, w), far.sum())
    return geom, [a.astype(np.float32) for a in (
        rng.standard_normal((n, c, h, w)), rng.uniform(-bound, bound, (co, c // geom.group, kh, kw)), offset,
        rng.random(geom.mask_shape), rng.standard_normal(co))]


CASES = {
    # name: (n, c, h, w, co, kh, kw, attrs)
    "edvr-like": (2, 16, 7, 9, 16, 3, 3, dict(pads=[1, 1, 1, 1], offset_group=8)),
    "several-gemm-blocks": (2, 8, 12, 13, 20, 3, 3, dict(pads=[1, 1, 1, 1], offset_group=2)),  # 312 px, 20 Co
    "stride2-dilation2": (1, 8, 11, 10, 6, 3, 3, dict(pads=[2, 2, 2, 2], strides=[2, 2], dilations=[2, 2],
                                                      offset_group=2)),
    "conv-groups-rect-kernel": (1, 8, 6, 7, 6, 2, 3, dict(pads=[0, 1, 1, 1], group=2, offset_group=4)),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("slope", [None, 0.1])
def test_dcn_fp32_matches_definition(host, name, slope):
    n, c, h, w, co, kh, kw, attrs = CASES[name]
    geom, arrays = make_case(1, n, c, h, w, co, kh, kw, **attrs)
    got = deform_conv(host, geom, *arrays, negative_slope=slope)
    want = reference_dcn(*arrays, geom, slope)
    assert got.dtype == np.float32 and got.shape == geom.out_shape
    assert np.abs(got - want).max() <= 1e-5


def test_dcn_fp32_chunks_across_images_match_one_launch(host):
    n, c, h, w, co, kh, kw, attrs = CASES["edvr-like"]
    geom, arrays = make_case(2, n, c, h, w, co, kh, kw, **attrs)
    whole = deform_conv(host, geom, *arrays)
    chunked = deform_conv(host, geom, *arrays, chunk_pixels=37)  # 126 px per image: chunks straddle images
    np.testing.assert_array_equal(chunked, whole)
    # and vsr's CPU kernel (numba gather + BLAS) agrees
    assert np.abs(whole - cpu_deform_conv(*arrays[:3], arrays[4], arrays[3], **attrs)).max() <= 1e-5


@pytest.mark.parametrize("name", ["edvr-like", "conv-groups-rect-kernel"])
def test_dcn_fp16_storage_matches_definition(host, name):
    n, c, h, w, co, kh, kw, attrs = CASES[name]
    geom, arrays = make_case(3, n, c, h, w, co, kh, kw, **attrs)
    halves = [a.astype(np.float16) for a in arrays]
    got = deform_conv(host, geom, *halves)
    want = reference_dcn(*halves, geom)
    assert got.dtype == np.float16
    err = np.abs(got.astype(np.float64) - want)
    assert err.max() <= 1e-3 * np.abs(want).max()
    assert err.max() > 0  # the half rounding is really there


def test_dcn_rejects_mixed_dtypes_and_wrong_shapes(host):
    n, c, h, w, co, kh, kw, attrs = CASES["edvr-like"]
    geom, arrays = make_case(4, n, c, h, w, co, kh, kw, **attrs)
    with pytest.raises(ValueError, match="one dtype"):
        deform_conv(host, geom, arrays[0].astype(np.float16), *arrays[1:])
    with pytest.raises(ValueError, match="mask has shape"):
        deform_conv(host, geom, *arrays[:3], arrays[3][:, :-1], arrays[4])


class RecordingLauncher:
    """A launcher that allocates nothing and records the launches it is asked for."""

    name = "recording"

    def __init__(self):
        self.launches = []

    def launch(self, kernel, grid, block, *args):
        self.launches.append((kernel, grid))


def test_dcn_indices_are_checked_to_fit_32_bits_before_any_launch():
    rec = RecordingLauncher()
    tiny = np.zeros(1, np.float32)
    # EDVR-M at batch 4 (20 frames), LR 540x960: the offset record of the batch has 2.2e9 values (its per-pixel
    # base is 64-bit), every 32-bit count fits
    geom = DeformConvGeometry.from_attrs((20, 64, 540, 960), (64, 64, 3, 3), pads=[1] * 4, offset_group=8)
    deform_im2col(rec, geom, tiny, tiny, tiny, tiny, 0, 22528)
    assert [k for k, _ in rec.launches] == ["dcn_im2col_f32"]
    # one image of 64 x 6000 x 6000 values does not fit, nor does a chunk of 2^22 pixels' columns
    big = DeformConvGeometry.from_attrs((1, 64, 6000, 6000), (64, 64, 3, 3), pads=[1] * 4, offset_group=8)
    with pytest.raises(ValueError, match="image_elements = 2304000000 exceeds the 32-bit index range"):
        deform_im2col(rec, big, tiny, tiny, tiny, tiny, 0, 256)
    with pytest.raises(ValueError, match="chunk_columns"):
        deform_im2col(rec, geom, tiny, tiny, tiny, tiny, 0, 1 << 22)
    assert len(rec.launches) == 1


def test_column_chunks_fill_half_the_l2_in_whole_gemm_tiles():
    geom = DeformConvGeometry.from_attrs((20, 64, 540, 960), (64, 64, 3, 3), pads=[1] * 4, offset_group=8)
    assert column_chunk_pixels(geom, 2, 50 * 2**20) == 22528  # EDVR-M fp16, an H100: 25 MiB of columns
    assert column_chunk_pixels(geom, 2) == 22528  # the default (the CPU emulation): an H100's L2
    assert column_chunk_pixels(geom, 4, 50 * 2**20) == 11264
    assert column_chunk_pixels(geom, 2, 1 << 20) == 256  # one GEMM tile at least


def to_nhwc(a):
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1))


def nhwc_operands(arrays, extra: int = 5):
    """x, weight, offset, mask, bias of a case channels-last; the offsets first in a record of ``extra`` more
    values per pixel (junk the kernel must skip)."""
    x, weight, offset, mask, bias = arrays
    junk = np.full(offset.shape[:1] + offset.shape[2:] + (extra,), 1e4, offset.dtype)
    record = np.ascontiguousarray(np.concatenate([to_nhwc(offset), junk], axis=-1))
    return to_nhwc(x), to_nhwc(weight), record, to_nhwc(mask), bias


@pytest.mark.parametrize("name", ["edvr-like", "stride2-dilation2", "conv-groups-rect-kernel"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_dcn_nhwc_matches_definition(host, name, dtype):
    n, c, h, w, co, kh, kw, attrs = CASES[name]
    geom, arrays = make_case(6, n, c, h, w, co, kh, kw, **attrs)
    arrays = [a.astype(dtype) for a in arrays]
    got = deform_conv_nhwc(host, geom, *nhwc_operands(arrays), negative_slope=0.1, chunk_pixels=37)
    want = reference_dcn(*arrays, geom, slope=0.1)
    assert got.dtype == dtype and got.shape == (n, geom.ho, geom.wo, co)
    err = np.abs(got.astype(np.float64).transpose(0, 3, 1, 2) - want).max()
    assert err <= (1e-5 if dtype == np.float32 else 1e-3 * np.abs(want).max())


def test_dcn_nhwc_refuses_short_records_and_nchw_weights(host):
    n, c, h, w, co, kh, kw, attrs = CASES["edvr-like"]
    geom, arrays = make_case(4, n, c, h, w, co, kh, kw, **attrs)
    x, weight, offset, mask, bias = nhwc_operands(arrays, extra=0)
    with pytest.raises(ValueError, match="offset has shape"):
        deform_conv_nhwc(host, geom, x, weight, np.ascontiguousarray(offset[..., :-1]), mask, bias)
    with pytest.raises(ValueError, match="channels-last"):
        deform_conv_nhwc(host, geom, x, arrays[1], offset, mask, bias)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("name", ["edvr-like", "conv-groups-rect-kernel"])
def test_dcn_applies_the_mask_sigmoid_to_logits_in_either_layout(host, name, dtype):
    n, c, h, w, co, kh, kw, attrs = CASES[name]
    geom, arrays = make_case(8, n, c, h, w, co, kh, kw, **attrs)
    rng = np.random.default_rng(9)
    logits = rng.normal(0.0, 3.0, geom.mask_shape)
    logits.flat[::7] = rng.choice([-100.0, 100.0], logits.flat[::7].size)  # saturated either way, never NaN
    arrays = [a.astype(dtype) for a in arrays[:3] + [logits] + arrays[4:]]
    x, weight, offset, mask, bias = arrays
    want = reference_dcn(x, weight, offset, 1.0 / (1.0 + np.exp(-mask.astype(np.float64))), bias, geom, slope=0.1)
    tol = 1e-5 if dtype == np.float32 else 1e-3 * np.abs(want).max()
    got = deform_conv(host, geom, *arrays, negative_slope=0.1, mask_logits=True)
    assert np.abs(got.astype(np.float64) - want).max() <= tol
    # channels-last, as DCNv2Pack's conv_offset gives them: one record per pixel, the offsets then the logits
    record = np.ascontiguousarray(np.concatenate([to_nhwc(offset), to_nhwc(mask)], axis=-1))
    got = deform_conv_nhwc(host, geom, to_nhwc(x), to_nhwc(weight), record, None, bias, negative_slope=0.1,
                           mask_logits=True, chunk_pixels=37)
    assert np.abs(got.astype(np.float64).transpose(0, 3, 1, 2) - want).max() <= tol
    with pytest.raises(ValueError, match="offset has shape"):  # no room for the logits after the offsets
        deform_conv_nhwc(host, geom, to_nhwc(x), to_nhwc(weight), to_nhwc(offset), None, bias, mask_logits=True)


def pixel_shuffle_reference(x, r):
    n, crr, h, w = x.shape
    return x.reshape(n, crr // (r * r), r, r, h, w).transpose(0, 1, 4, 2, 5, 3).reshape(n, -1, h * r, w * r)


@pytest.mark.parametrize("shape,r", [((2, 12, 3, 5), 2), ((1, 18, 4, 2), 3), ((1, 64 * 4, 5, 7), 2)])
@pytest.mark.parametrize("slope", [None, 0.1, 0.0])
def test_pixel_shuffle_lrelu_fp32_exact(host, shape, r, slope):
    x = np.random.default_rng(5).standard_normal(shape, dtype=np.float32)
    y = pixel_shuffle_reference(x, r)
    want = y if slope is None else np.where(y >= 0, y, y * np.float32(slope))
    np.testing.assert_array_equal(pixel_shuffle_lrelu(host, x, r, negative_slope=slope), want)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_pixel_shuffle_lrelu_nhwc_is_the_nchw_one_transposed(host, dtype):
    x = np.random.default_rng(7).standard_normal((2, 4 * 6, 3, 5)).astype(dtype)
    want = pixel_shuffle_lrelu(host, x, 2, negative_slope=0.1)
    got = pixel_shuffle_lrelu_nhwc(host, to_nhwc(x), 2, negative_slope=0.1)
    assert got.shape == (2, 6, 10, 6)
    np.testing.assert_array_equal(got, to_nhwc(want))


@pytest.mark.parametrize("r", [2, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_pixel_shuffle_nhwc_of_subpixel_major_channels_is_the_same_shuffle(host, dtype, r):
    """The conv's output channels permuted by subpixel_major_order: the same output, exactly."""
    x = np.random.default_rng(8).standard_normal((2, 5 * r * r, 3, 4)).astype(dtype)
    want = to_nhwc(pixel_shuffle_lrelu(host, x, r, negative_slope=0.1))
    order = subpixel_major_order(5 * r * r, r)
    assert sorted(order) == list(range(5 * r * r)) and order[1] == r * r  # sub-pixel 0 of channel 1 comes second
    got = pixel_shuffle_lrelu_nhwc(host, to_nhwc(x[:, order]), r, negative_slope=0.1, subpixel_major=True)
    np.testing.assert_array_equal(got, want)


def test_pixel_shuffle_refuses_grids_it_cannot_launch(host):
    with pytest.raises(ValueError, match="70000 output rows exceed the launch grid's 65535"):
        pixel_shuffle_lrelu(host, np.zeros((1, 4, 35000, 1), np.float32), 2)


@pytest.mark.parametrize("slope", [0.5, 0.1, 3.0])
def test_pixel_shuffle_lrelu_fp16_exact_over_every_half(host, slope):
    # every bit pattern but NaNs: subnormals times 0.5 are ties (round to even), times 3.0 some overflow to inf
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    x = bits.view(np.float16).copy()
    x[np.isnan(x)] = 0
    x = x.reshape(1, 16, 64, 64)
    y = pixel_shuffle_reference(x, 2)
    with np.errstate(over="ignore"):
        scaled = (y.astype(np.float32) * np.float32(slope)).astype(np.float16)
    want = np.where(y >= 0, y, scaled)
    got = pixel_shuffle_lrelu(host, x, 2, negative_slope=slope)
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


def test_selection_falls_back_to_the_host_harness_and_says_why():
    launcher = select_launcher(("pycuda", "cupy", "host") if not (launcher_available("pycuda")
                                                                   or launcher_available("cupy")) else ("host",))
    assert launcher.name == "host"
    assert all("not installed" in reason for reason in launcher.skipped)
    with pytest.raises(ValueError, match="unknown kernel launcher"):
        select_launcher(("opencl",))


def test_harness_build_is_cached_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    monkeypatch.setenv("VSR_KERNEL_CACHE", str(tmp_path))
    first = build_harness()
    stamp = first.stat().st_mtime_ns
    assert build_harness() == first and first.stat().st_mtime_ns == stamp
    assert [p.name for p in tmp_path.iterdir()] == [first.name]


def test_a_build_killed_outright_leaves_its_temporary_only_until_that_library_is_built_again(tmp_path, monkeypatch):
    """A kill -9 mid-compile left ``<stem>.XXXXXXXX.so.tmp`` in the cache for good (mkstemp's name: no process id
    to ask).  The next build of that library removes its temporaries not written for a day whose process is gone
    (the old names: not written for a day), only this user's regular files, never through a link."""
    import os
    import subprocess
    import sys
    import time

    def left(name: str, days: float = 1.5):
        (tmp_path / name).write_bytes(b"half a library")
        t = time.time() - days * 86400
        os.utime(tmp_path / name, (t, t), follow_symlinks=False)
        return tmp_path / name

    monkeypatch.setenv("VSR_KERNEL_CACHE", str(tmp_path))
    built = build_harness()
    built.unlink()  # (built again below)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    name, stem = built.name, built.stem
    gone = [left(f".{name}.vsr-partial-{dead}-0123abcd"), left(f"{stem}.ab_c1234.so.tmp")]
    kept = [left(f".{name}.vsr-partial-{os.getppid()}-0123abcd"),  # a build still going
            left(f".{name}.vsr-partial-{dead}-4567abcd", 0.5), left(f"{stem}.xyz_5678.so.tmp", 0.5),  # written lately
            left(f".vsr_cuda_host_{'0' * 20}.so.vsr-partial-{dead}-0123abcd"),  # another library's
            left(f"vsr_cuda_host_{'0' * 20}.ab_c1234.so.tmp"), left(f"{stem}.abc.so.tmp"), left(f"{stem}.so.tmp")]
    victim = left("victim")
    (tmp_path / f"{stem}.linklink.so.tmp").symlink_to(victim)
    os.utime(tmp_path / f"{stem}.linklink.so.tmp", (1, 1), follow_symlinks=False)
    assert build_harness() == built and built.is_file()
    assert [p.name for p in gone if os.path.lexists(p)] == []
    assert all(p.exists() for p in kept) and (tmp_path / f"{stem}.linklink.so.tmp").is_symlink()
    assert victim.read_bytes() == b"half a library"
    assert len(list(tmp_path.iterdir())) == 1 + len(kept) + 2  # no temporary of this build left


def test_host_launch_refuses_views_and_wrong_argument_counts(host):
    x = np.zeros((1, 8, 4, 6), np.float32)
    out = np.empty((1, 2, 8, 6), np.float32)
    with pytest.raises(TypeError, match="C-contiguous"):
        host.launch("pixel_shuffle_lrelu_f32", (1, 1, 1), (32, 1, 1), x[..., ::2], out, 1, 2, 4, 3, 2, 1.0)
    with pytest.raises(TypeError, match="takes 8 arguments"):
        host.launch("pixel_shuffle_lrelu_f32", (1, 1, 1), (32, 1, 1), x, out, 1, 2, 4, 3, 2)


def test_the_gemm_launch_shapes_are_those_the_kernel_is_written_for():
    """ops.py launches dcn_gemm with a block and a tile that deform_conv.cu's #defines fix: read from the source,
    so a change on one side alone fails here, not as wrong pixels on a GPU."""
    import re

    from vsr.kernels.cuda import ops
    from vsr.kernels.cuda.sources import SOURCE_DIR

    defines = {k: int(v) for k, v in re.findall(r"#define (VSR_GEMM_\w+) (\d+)",
                                                 (SOURCE_DIR / "deform_conv.cu").read_text())}
    assert ops._GEMM_BLOCK == (defines["VSR_GEMM_BX"], defines["VSR_GEMM_BY"], 1)
    assert ops._GEMM_TILE == (defines["VSR_GEMM_BX"] * defines["VSR_GEMM_TN"],
                              defines["VSR_GEMM_BY"] * defines["VSR_GEMM_TM"])


def test_a_kernel_folder_other_users_can_write_is_refused_and_a_planted_library_never_loaded(tmp_path,
                                                                                            monkeypatch):
    """The folder was a predictable /tmp name made with mkdir(exist_ok=True), and a library found there under
    the harness's name was loaded as it was: another user's planted `.so` ran as the one who ran vsr."""
    from vsr.errors import InputError

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv("VSR_KERNEL_CACHE", str(shared))
    with pytest.raises(InputError, match=r"will not keep vsr's compiled CPU kernels in .*shared: other users can "
                                         r"write to it \(mode 777\)"):
        build_harness()
    mine = tmp_path / "mine"
    monkeypatch.setenv("VSR_KERNEL_CACHE", str(mine))
    built = build_harness()
    assert (mine.stat().st_mode & 0o777) == 0o700
    built.chmod(0o666)  # as a file another user could have replaced: built again, not loaded
    stamp = built.stat().st_mtime_ns
    assert build_harness() == built and built.stat().st_mtime_ns != stamp and not built.stat().st_mode & 0o022
