"""The fused one-kernel DCN (``dcn_gemm="fused"``, :mod:`vsr.kernels.cuda.fused_dcn`), run here by Triton's
interpreter on the CPU -- the same kernel code a GPU compiles -- against the pure-PyTorch reference in float64
(``grid_sample`` + matrix product: an independent implementation) and against the two-kernel form it replaces.

Tolerances, relative to the output's largest magnitude: fp32 1e-5 (float32 arithmetic, IEEE products); fp16 3e-3
(inputs, samples and output rounded to half precision: ~5e-4 each, as the two-kernel form's columns are)."""

from __future__ import annotations

import importlib.util
import time

import pytest
import torch

from vsr.kernels.deform_conv import DeformConvGeometry
from vsr.model.dcn import deform_conv2d_reference

needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                                  reason="Triton is not installed (pip install triton): its interpreter runs the "
                                         "fused DCN on the CPU")
pytestmark = needs_triton

TOL = {torch.float32: 1e-5, torch.float16: 3e-3}


def _case(n, c, h, w, groups, co, *, k=3, pad=1, dil=1, seed=0):
    """x, offsets (a few pixels, some far outside the frame, some landing on the border), mask logits, weight,
    bias in float64, NCHW."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, c, h, w, generator=g, dtype=torch.float64)
    offset = torch.randn(n, 2 * groups * k * k, h, w, generator=g, dtype=torch.float64) * 2.0
    offset[:, :3] += 40.0  # group 0's first taps sample outside: zeros
    offset[:, 2 * k * k: 2 * k * k + 2] = torch.tensor([-0.5, float(w) - 0.5]).view(1, 2, 1, 1)  # edge taps
    logits = torch.randn(n, groups * k * k, h, w, generator=g, dtype=torch.float64)
    weight = torch.randn(co, c, k, k, generator=g, dtype=torch.float64) / (c * k * k) ** 0.5
    bias = torch.randn(co, generator=g, dtype=torch.float64) * 0.1
    return x, offset, logits, weight, bias


def _fused(args, dtype, *, pad=1, dil=1, mask_in_record=True, slope=None):
    from vsr.kernels.cuda.fused_dcn import deform_conv_fused, fused_weight

    x, offset, logits, weight, bias = args
    geom = DeformConvGeometry.from_attrs(tuple(x.shape), tuple(weight.shape), pads=[pad] * 4,
                                         dilations=[dil] * 2, offset_group=logits.shape[1] // weight[0, 0].numel())
    nhwc = lambda t: t.permute(0, 2, 3, 1).contiguous().to(dtype)  # noqa: E731
    if mask_in_record:  # conv_offset's whole output: offsets then the logits, the sigmoid in the kernel
        record, mask, logit = nhwc(torch.cat([offset, logits], 1)), None, True
    else:
        record, mask, logit = nhwc(offset), nhwc(torch.sigmoid(logits)), False
    out = deform_conv_fused(geom, nhwc(x), fused_weight(weight.to(dtype), geom), record, mask, bias.to(dtype),
                            mask_logits=logit, negative_slope=slope)
    return out.permute(0, 3, 1, 2).double()


def _reference(args, *, pad=1, dil=1, slope=None):
    x, offset, logits, weight, bias = args
    y = deform_conv2d_reference(x, offset, torch.sigmoid(logits), weight, bias, padding=pad, dilation=dil)
    return y if slope is None else torch.nn.functional.leaky_relu(y, slope)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("shape", [(2, 16, 6, 7, 8, 16), (1, 40, 5, 9, 8, 40), (1, 64, 4, 5, 8, 64),
                                   (2, 32, 5, 4, 8, 24)],
                         ids=["tiny", "s-wide-40ch", "m-64ch", "32-to-24"])
def test_the_fused_dcn_equals_the_reference(shape, dtype):
    """EDVR's channel counts (16, 32, 40: not a power of two, 64), 8 offset groups, a batch of 2, outputs fewer
    than inputs; the mask's logits read from the offsets' record."""
    args = _case(*shape)
    want = _reference(args)
    got = _fused(args, dtype)
    assert got.shape == want.shape
    assert (got - want).abs().max() <= TOL[dtype] * want.abs().max()


def test_a_separate_mask_dilation_and_leaky_relu():
    args = _case(1, 16, 7, 6, 4, 16, seed=3)
    want = _reference(args, pad=2, dil=2, slope=0.1)
    got = _fused(args, torch.float32, pad=2, dil=2, mask_in_record=False, slope=0.1)
    assert (got - want).abs().max() <= TOL[torch.float32] * want.abs().max()


def test_the_fused_dcn_equals_the_two_kernel_form_in_fp16():
    """Against what it replaces in the CUDA runtime (vsr's sampling kernel, then the product; the CPU harness):
    the same samples rounded to fp16, so the two differ by the products' rounding alone."""
    from vsr.backends.cuda.dcn import deform_conv_nhwc_torch
    from vsr.backends.cuda.tensors import open_tensor_launcher

    x, offset, logits, weight, bias = args = _case(2, 32, 6, 8, 8, 32, seed=5)
    geom = DeformConvGeometry.from_attrs(tuple(x.shape), tuple(weight.shape), pads=[1] * 4, offset_group=8)
    h = torch.float16
    record = torch.cat([offset, logits], 1).permute(0, 2, 3, 1).contiguous().to(h)
    two = deform_conv_nhwc_torch(open_tensor_launcher("auto", torch.device("cpu")), geom,
                                 x.permute(0, 2, 3, 1).contiguous().to(h), weight.permute(0, 2, 3, 1).contiguous().to(h),
                                 record, None, bias.to(h), mask_logits=True).permute(0, 3, 1, 2).double()
    got = _fused(args, h)
    scale = two.abs().max()
    assert (got - two).abs().max() <= 2e-3 * scale  # measured: 2.1e-4 of the largest output (fp32: 3.7e-7)


def test_the_fused_weights_are_laid_out_per_tap_and_padded_with_zeros():
    from vsr.kernels.cuda.fused_dcn import fused_weight, padded_sizes

    weight = torch.arange(40 * 40 * 9, dtype=torch.float32).reshape(40, 40, 3, 3)
    geom = DeformConvGeometry.from_attrs((1, 40, 4, 4), (40, 40, 3, 3), pads=[1] * 4, offset_group=8)
    assert padded_sizes(geom) == (8, 8, 64)  # 8 groups of 5 channels -> of 8; 40 outputs -> 64
    w = fused_weight(weight, geom)
    assert w.shape == (9, 64, 64)
    for k, (i, j) in enumerate([(i, j) for i in range(3) for j in range(3)]):
        for g in range(8):
            assert torch.equal(w[k, g * 8: g * 8 + 5, :40], weight[:, g * 5: g * 5 + 5, i, j].T)
            assert not w[k, g * 8 + 5: g * 8 + 8].any()
    assert not w[:, :, 40:].any()


@pytest.mark.parametrize("bad, match", [("weight", "weight does not fit"), ("dtype", "one dtype"),
                                        ("record", "record does not fit"), ("out", "out must be contiguous")])
def test_wrong_operands_are_refused(bad, match):
    from vsr.kernels.cuda.fused_dcn import deform_conv_fused, fused_weight

    x, offset, logits, weight, bias = _case(1, 16, 4, 4, 8, 16)
    geom = DeformConvGeometry.from_attrs(tuple(x.shape), tuple(weight.shape), pads=[1] * 4, offset_group=8)
    f = torch.float32
    xn = x.permute(0, 2, 3, 1).contiguous().to(f)
    record = torch.cat([offset, logits], 1).permute(0, 2, 3, 1).contiguous().to(f)
    w = fused_weight(weight.to(f), geom)
    if bad == "weight":
        w = weight.to(f)
    elif bad == "dtype":
        xn = xn.half()
    elif bad == "record":
        record = record[..., :100].contiguous()  # the offsets without the mask's logits
    out = torch.empty(1, 16, 4, 4).permute(0, 2, 3, 1) if bad == "out" else None  # NCHW memory: not (N, H, W, C)
    with pytest.raises(ValueError, match=match):
        deform_conv_fused(geom, xn, w, record, None, bias.to(f), mask_logits=True, out=out)


@pytest.mark.parametrize("dtype, channels", [("fp16", 64), ("fp16", 40), ("fp32", 64)])
def test_the_kernel_compiles_for_hopper_with_tensor_core_products(dtype, channels, tmp_path, monkeypatch):
    """The kernel a GPU compiles, compiled here for sm_90 with Triton's own ptxas (no GPU needed): the products
    are Hopper's warpgroup MMAs (TF32 in fp32), and the tile the autotuner tries first keeps within registers."""
    import re
    import subprocess
    import tempfile
    from pathlib import Path

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from vsr.kernels.cuda.fused_dcn import GPU_TILES, padded_sizes
    from vsr.kernels.cuda.fused_dcn_kernel import dcn_fused_nhwc

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))  # compiled fresh, nothing left in ~/.triton
    fn = triton.jit(dcn_fused_nhwc)
    geom = DeformConvGeometry.from_attrs((1, channels, 8, 8), (channels, channels, 3, 3), pads=[1] * 4,
                                         offset_group=8)
    gp, cp, cop = padded_sizes(geom)
    block_p, warps, stages = GPU_TILES[0]
    consts = dict(C=channels, CO=channels, G=8, CPG=channels // 8, G_P=gp, CPG_P=cp, CO_P=cop, KH=3, KW=3,
                  MASK_LOGITS=True, LEAKY=False, IEEE=False, BLOCK_P=block_p)
    signature = {name: ("constexpr" if name in consts else f"*{dtype}" if name.endswith("_ptr")
                        else "fp32" if name == "slope" else "i32") for name in fn.arg_names}
    source = ASTSource(fn, signature, constexprs={(fn.arg_names.index(k),): v for k, v in consts.items()})
    kernel = triton.compile(source, target=GPUTarget("cuda", 90, 32),
                            options={"num_warps": warps, "num_stages": stages})
    assert "wgmma" in kernel.asm["ptx"]
    cuobjdump = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "k.cubin"
        cubin.write_bytes(kernel.asm["cubin"])
        usage = subprocess.run([str(cuobjdump), "--dump-resource-usage", str(cubin)], capture_output=True,
                               text=True, check=True).stdout
    stack = int(re.search(r"STACK:(\d+)", usage).group(1))
    assert stack <= (128 if dtype == "fp32" else 0), usage  # measured: 0, 0 and 72 bytes


def _hopper_driver():
    """A stand-in for Triton's CUDA driver where there is no GPU: it names an sm_90 device (an H100's), so Triton
    compiles for it -- the real compiler and ptxas -- and it launches nothing (any launch or timing raises)."""
    from triton.backends.compiler import GPUTarget
    from triton.backends.driver import DriverBase

    class Hopper(DriverBase):
        @classmethod
        def is_active(cls):
            return False

        def map_python_to_cpp_type(self, ty):
            raise NotImplementedError("the stand-in launches nothing")

        def get_current_target(self):
            return GPUTarget("cuda", 90, 32)

        def get_active_torch_device(self):
            return torch.device("cpu")

        def get_benchmarker(self):
            raise NotImplementedError("the stand-in times nothing")

        def get_current_device(self):
            return 0

        def get_current_stream(self, device=None):
            return 0

    return Hopper()


def _kernel_args(h, w):
    """The fused kernel's arguments for EDVR-M's DCN on an ``h x w`` frame in fp16, as deform_conv_fused gives them."""
    from vsr.kernels.cuda.fused_dcn import padded_sizes

    geom = DeformConvGeometry.from_attrs((1, 64, h, w), (64, 64, 3, 3), pads=[1] * 4, offset_group=8)
    gp, cp, cop = padded_sizes(geom)
    f = torch.float16
    record = torch.zeros(1, h, w, 216, dtype=f)
    args = (torch.zeros(1, h, w, 64, dtype=f), record, record, torch.zeros(9, gp * cp, cop, dtype=f),
            torch.zeros(64, dtype=f), torch.zeros(1, h, w, 64, dtype=f), h * w, h, w, h, w, 216, 216, 144,
            1, 1, 1, 1, 1, 1, 1.0)
    consts = dict(C=64, CO=64, G=8, CPG=8, G_P=gp, CPG_P=cp, CO_P=cop, KH=3, KW=3, MASK_LOGITS=True, LEAKY=False,
                  IEEE=False)
    return args, consts


def test_each_tile_is_compiled_once_per_variant_whatever_the_frame_size(tmp_path, monkeypatch, caplog):
    """On a GPU the autotuner's tiles are compiled side by side before it times them, and once per dtype and
    channel layout: a frame of another size (rows a multiple of 16 or not, an odd width) compiles nothing more --
    Triton would otherwise specialise on the integer arguments and compile every tile again. Compiled here for
    sm_90 through a stand-in driver (two of the tiles: each is ~7 s on a CI core)."""
    from triton.runtime.driver import driver

    import vsr.kernels.cuda.fused_dcn as fused

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    monkeypatch.setattr(fused, "GPU_TILES", fused.GPU_TILES[:2])
    monkeypatch.setattr(fused, "compile_seconds", {})
    parsing = _parses_side_by_side(monkeypatch)
    fused._compiled.cache_clear()
    fused._tuned.cache_clear()
    previous = driver._active
    driver.set_active(_hopper_driver())
    try:
        args, consts = _kernel_args(540, 960)
        with caplog.at_level("INFO", logger=fused.__name__):
            fused._compile_tiles(args, consts)
        assert "not compiled side by side" not in caplog.text  # where it was, the reason
        # each tile's thread parses the kernel's source, one at a time: two at once failed now and then in a full run
        # ("SystemError: AST constructor recursion depth mismatch", CPython's AST state is not per thread)
        assert parsing["calls"] >= 2 and parsing["most"] == 1, parsing
        kernels = fused._compiled().device_caches[0][0]
        assert len(kernels) == 2 and len(fused.compile_seconds) == 1
        assert all("wgmma" in k.asm["ptx"] for k in kernels.values())
        assert sorted((k.metadata.num_warps, k.metadata.num_stages) for k in kernels.values()) == [(8, 2), (8, 3)]
        for h, w in ((544, 963), (135, 240), (17, 1)):  # what the autotuner compiles for other frames: nothing
            args, consts = _kernel_args(h, w)
            fused._compile_tiles(args, consts)
            fused._tuned().warmup(*args, grid=(1,), **consts)
        assert len(kernels) == 2 and len(fused.compile_seconds) == 1
        args, consts = _kernel_args(64, 64)
        with caplog.at_level("INFO", logger=fused.__name__):
            fused._compile_tiles(args, {**consts, "LEAKY": True})  # another variant: its tiles compiled
        # (2 of 4 in two clone-alone full runs: the parsing race above, which the log named)
        assert len(kernels) == 4 and len(fused.compile_seconds) == 2, caplog.text
        assert parsing["most"] == 1, parsing
    finally:
        driver._active = previous
        fused._compiled.cache_clear()
        fused._tuned.cache_clear()


def _parses_side_by_side(monkeypatch) -> dict:
    """How many ``ast.parse`` calls ran, and the most at once (each held a moment, so that two threads parsing
    together meet)."""
    import ast
    import threading

    seen, lock, parse = {"calls": 0, "now": 0, "most": 0}, threading.Lock(), ast.parse

    def watched(*args, **kwargs):
        with lock:
            seen["calls"] += 1
            seen["now"] += 1
            seen["most"] = max(seen["most"], seen["now"])
        try:
            time.sleep(0.2)
            return parse(*args, **kwargs)
        finally:
            with lock:
                seen["now"] -= 1

    monkeypatch.setattr(ast, "parse", watched)
    return seen


def test_a_failed_side_by_side_compilation_leaves_the_tiles_to_the_autotuner(monkeypatch, caplog):
    import types

    import vsr.kernels.cuda.fused_dcn as fused

    def broken(*args, **kwargs):
        raise RuntimeError("no compiler here")

    monkeypatch.setattr(fused, "compile_seconds", {})
    monkeypatch.setattr(fused, "_tuned", lambda: types.SimpleNamespace(warmup=broken))
    args, consts = _kernel_args(8, 8)
    with caplog.at_level("INFO", logger=fused.__name__):
        fused._compile_tiles(args, consts)  # logged, not raised: the autotuner compiles what is missing
    assert "not compiled side by side (RuntimeError: no compiler here)" in caplog.text
    assert len(fused.compile_seconds) == 1


def test_a_tile_that_fails_to_compile_leaves_the_next_variant_free_to_compile_side_by_side(monkeypatch, caplog):
    """Triton's ``AsyncCompileMode`` stays marked active where a compilation in its pool raises (its exit re-raises
    before it clears the mark): the first failure refused every later side-by-side compilation in the process."""
    import types

    import vsr.kernels.cuda.fused_dcn as fused
    from triton.runtime._async_compile import active_mode

    def failing_tile():
        raise RuntimeError("ptxas died")

    def warmup(*args, **kwargs):
        active_mode.get().submit(("tile", len(warmups)), failing_tile, lambda kernel: None)
        warmups.append(kwargs["LEAKY"])

    warmups = []
    monkeypatch.setattr(fused, "compile_seconds", {})
    monkeypatch.setattr(fused, "_tuned", lambda: types.SimpleNamespace(warmup=warmup))
    args, consts = _kernel_args(8, 8)
    with caplog.at_level("INFO", logger=fused.__name__):
        fused._compile_tiles(args, consts)
        fused._compile_tiles(args, {**consts, "LEAKY": True})
    assert warmups == [False, True]  # the second variant got as far as its own compilation
    assert caplog.text.count("(RuntimeError: ptxas died)") == 2 and "already active" not in caplog.text
    assert active_mode.get() is None
