"""The CUDA runtime, checked on the CPU: the same code with ``device="cpu"`` and the kernels on the CPU harness
(vsr's ``.cu`` sources built by g++), so CI verifies the wiring end to end.

* torch segments (:class:`CudaTorchBackend`): EDVR-tiny and EDVR-S equal the torch reference backend within
  1e-5 (fp32); the fp16 path (fp16 weights, activations and kernels) within 5e-3 of it;
* the cut points: one bridge per DeformConv / DepthToSpace node of the split plan, 7 segments between them;
* channels-last end to end: every convolution and bridge reads (H, W, C)-ordered tensors (``contiguous``: NCHW);
* the plan on a device arena (:class:`CudaTensorRTBackend`) with ONNX Runtime standing in for the TensorRT
  engines: equals the reference within 1e-4 (ONNX Runtime's own fp32 difference from torch);
* options, ``auto``, the one-line error without a GPU, the launcher adapter on torch tensors.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from vsr.backends import CudaOptions, OrtOptions, SplitOptions, TorchOptions, backend_options, open_backend
from vsr.backends.cuda import options as backend_options_module
from tests.kernels.test_cuda_kernels import CASES, make_case, reference_dcn
from tests.kernels.test_fused_dcn import needs_triton
from vsr.backends.cuda import resolve_device, segment_runtime
from vsr.backends.cuda.bridges import DCNBridge, ShuffleBridge, Timeline
from vsr.backends.cuda.layout import Layout, PaddedOutputConv
from vsr.backends.cuda.dcn import deform_conv_nhwc_torch, deform_conv_torch
from vsr.backends.cuda.engines import CudaTensorRTBackend
from vsr.backends.cuda.runtime import CudaTorchBackend
from vsr.backends.cuda.tensors import TensorLauncher, open_tensor_launcher
from vsr.errors import BackendError
from vsr.kernels.cuda import pixel_shuffle_lrelu
from vsr.model import load_model
from vsr.model.dcn import DCNv2Pack
from vsr.plan.segments import OrtSegmentBackend

CPU_FP32 = CudaOptions(device="cpu", precision="fp32", output="float32")
needs_no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without a GPU")


def _open(config: str, options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # seeded random weights: the same in every backend opened here
        return open_backend("random", config, options)


@pytest.fixture(scope="module")
def tiny():
    return _open("edvr-tiny", CPU_FP32), _open("edvr-tiny", TorchOptions(device="cpu", threads=1))


def _frames(seed: int, shape) -> np.ndarray:
    return np.random.default_rng(seed).random(shape, dtype=np.float32)


def test_tiny_fp32_equals_the_torch_reference_on_an_odd_size_batch(tiny):
    cuda_b, ref = tiny
    assert isinstance(cuda_b, CudaTorchBackend) and cuda_b.launcher.name == "host"
    x = _frames(1, (2, 3, 3, 13, 22))  # padded to its bucket and cropped back, like every backend
    got, want = cuda_b.infer(x), ref.infer(x)
    assert got.shape == (2, 3, 52, 88)
    assert np.abs(got - want).max() <= 1e-5
    np.testing.assert_array_equal(cuda_b.infer(x), got)  # a second run of the same shape: the same result


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("gemm, chunk", [("torch", 7), ("torch", 1 << 16), ("kernel", 7)])
def test_dcn_on_tensors_matches_the_definition_with_either_gemm(name, gemm, chunk):
    """vsr's sampling kernel, then torch's matrix product (or vsr's GEMM kernel): chunks of 7 pixels cross
    image rows and end mid-image; the fused LeakyReLU; grouped convolutions fall back to vsr's GEMM."""
    n, c, h, w, co, kh, kw, attrs = CASES[name]
    geom, arrays = make_case(5, n, c, h, w, co, kh, kw, **attrs)
    launcher = open_tensor_launcher("auto", torch.device("cpu"))
    for dtype, tol in ((np.float32, 1e-5), (np.float16, 2e-3)):
        cast = [a.astype(dtype) for a in arrays]
        got = deform_conv_torch(launcher, geom, *(torch.from_numpy(a) for a in cast), negative_slope=0.1, gemm=gemm,
                                chunk_pixels=chunk)
        want = reference_dcn(*cast, geom, slope=0.1)
        assert got.dtype == torch.from_numpy(cast[0]).dtype
        assert np.abs(got.double().numpy() - want).max() <= tol * max(1.0, np.abs(want).max())


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_dcn_column_chunks_follow_the_launchers_l2(layout):
    """No chunk size given: the columns fill half the launcher's L2 (the CPU's: None, an H100's by default)."""
    geom, arrays = make_case(11, 2, 8, 20, 30, 8, 3, 3, pads=[1] * 4, offset_group=2)  # 1,200 output pixels
    launcher = open_tensor_launcher("auto", torch.device("cpu"))
    assert launcher.l2_cache_bytes is None
    x, weight, offset, mask, bias = (torch.from_numpy(a) for a in arrays)
    if layout == "nhwc":
        x, weight, offset, mask = (t.permute(0, 2, 3, 1).contiguous() for t in (x, weight, offset, mask))
    dcn = deform_conv_torch if layout == "nchw" else deform_conv_nhwc_torch
    whole = dcn(launcher, geom, x, weight, offset, mask, bias)  # 50 MiB: one chunk
    launched = []
    launcher.launch = lambda kernel, *args, base=launcher.launch: launched.append(kernel) or base(kernel, *args)
    launcher.l2_cache_bytes = 2 * 300 * geom.taps * geom.c * 4  # 300 pixels' columns in half: 256-pixel chunks
    chunked = dcn(launcher, geom, x, weight, offset, mask, bias)
    assert len(launched) == (2 * 3 if layout == "nchw" else 5)  # per image (600 px) in NCHW, across images NHWC
    assert (chunked - whole).abs().max() <= 1e-6


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.float16, 3e-3)])
def test_dcn_bridge_channels_last_reads_the_mask_logits_in_place(monkeypatch, dtype, tol):
    """DCNv2Pack's offsets and mask logits straight out of its conv_offset record: the sigmoid in the sampling
    kernel, no pass of torch's (and no copy); equal to the pack's own forward (torch's reference DCN)."""
    torch.manual_seed(0)
    pack = DCNv2Pack(16, 16, 3, 1, deformable_groups=8)
    with torch.no_grad():  # offsets of a pixel or two, logits either way of 0
        pack.conv_offset.weight.normal_(0.0, 0.05)
        pack.conv_offset.bias.normal_(0.0, 1.0)
    x, feat = torch.randn(2, 16, 9, 11), torch.randn(2, 16, 9, 11)
    with torch.no_grad():
        want = pack(x, feat).double()
        layout = Layout()
        bridge = DCNBridge(layout.model(pack.to(dtype)), open_tensor_launcher("auto", torch.device("cpu")),
                           Timeline(torch.device("cpu")), "dcn", layout=layout)
        monkeypatch.setattr(torch, "sigmoid", None)  # a pass of torch's would fail here
        got = bridge(layout.activation(x.to(dtype)), layout.activation(feat.to(dtype)))
    assert got.dtype == dtype and got.shape == want.shape
    assert (got.double() - want).abs().max() <= tol * max(1.0, float(want.abs().max()))


@pytest.mark.parametrize("gemm", ["kernel", pytest.param("fused", marks=needs_triton)])
def test_tiny_with_vsrs_own_gemm_equals_the_reference(tiny, gemm):
    """vsr's own GEMM kernel, and the fused one-kernel DCN (Triton's interpreter runs it on the CPU)."""
    _, ref = tiny
    backend = _open("edvr-tiny", CudaOptions(device="cpu", precision="fp32", dcn_gemm=gemm, output="float32"))
    x = _frames(6, (1, 3, 3, 16, 16))
    assert np.abs(backend.infer(x) - ref.infer(x)).max() <= 1e-5


def test_timings_name_each_segment_and_each_bridge_of_the_plan(tiny):
    cuda_b, _ = tiny
    cuda_b.infer(_frames(2, (1, 3, 3, 16, 16)))
    steps = cuda_b.step_stats()
    dcn = [k for k in steps if k.startswith("dcn:")]
    shuffles = [k for k in steps if k.startswith("shuffle:")]
    segments = [k for k in steps if k.startswith("segment_")]
    assert dcn == ["dcn:pcd_align.dcn_pack.l3", "dcn:pcd_align.dcn_pack.l2", "dcn:pcd_align.dcn_pack.l1",
                   "dcn:pcd_align.cas_dcnpack"]
    assert shuffles == ["shuffle:pixel_shuffle#0", "shuffle:pixel_shuffle#1"]
    assert segments == [f"segment_{i}" for i in range(7)]
    assert steps["features"].calls >= 1  # each frame's features: a program of its own, no bridge in it
    assert all(s.calls == steps["segment_0"].calls >= 1 for k, s in steps.items() if k != "features")
    assert cuda_b.timings()["run"] >= sum(cuda_b.timings()[k] for k in dcn) > 0


def _nhwc(t: torch.Tensor) -> bool:
    """Each image of ``t (N, C, H, W)`` stored (H, W, C) (the batch stride may skip, as for one frame of five)."""
    n, c, h, w = t.shape
    return t.stride(1) == 1 and t.stride(3) == c and t.stride(2) == w * c


@pytest.mark.parametrize("config, memory_format", [("edvr-tiny", "channels_last"), ("edvr-s", "channels_last"),
                                                   ("edvr-tiny", "contiguous")])
def test_channels_last_runs_every_conv_and_bridge_on_nhwc_tensors(tiny, config, memory_format):
    """edvr-tiny has TSA, edvr-s has none: both of fusion's ways of setting frames side by side stay NHWC."""
    backend = _open(config, CudaOptions(device="cpu", precision="fp16", memory_format=memory_format))
    layouts = []
    for module in backend.model.modules():
        if isinstance(module, (torch.nn.Conv2d, DCNBridge, ShuffleBridge)):
            module.register_forward_pre_hook(lambda m, args: layouts.extend(_nhwc(a) for a in args if a.dim() == 4))
    backend.infer(_frames(9, (2, backend.num_frame, 3, 16, 20)))
    assert len(layouts) > 30 and set(layouts) == {memory_format == "channels_last"}


@pytest.mark.parametrize("memory_format", ["channels_last", "contiguous"])
def test_channels_last_orders_the_upsampling_channels_once_for_contiguous_shuffles(tiny, memory_format):
    """Channels-last, the bridged model's upconv1/upconv2 give their channels sub-pixel-major (the shuffle copies
    contiguous runs); the source model keeps its own; the output is the reference's."""
    cuda_b, ref = tiny
    backend = _open("edvr-tiny", CudaOptions(device="cpu", precision="fp32", output="float32",
                                             memory_format=memory_format))
    edvr, source = backend.model.model, ref.model
    cl = memory_format == "channels_last"
    assert edvr.pixel_shuffle.subpixel_major == cl
    for name in ("upconv1", "upconv2"):
        mine, theirs = getattr(edvr, name), getattr(source, name)
        c = theirs.out_channels // 4
        order = [s * c + ch for ch in range(c) for s in range(4)] if cl else list(range(4 * c))
        assert torch.equal(mine.bias[order], theirs.bias) and torch.equal(mine.weight[order], theirs.weight)
    x = _frames(12, (1, 3, 3, 16, 20))
    assert np.abs(backend.infer(x) - ref.infer(x)).max() <= 1e-5


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_conv_last_padded_to_8_outputs_gives_the_same_3(tiny, dtype):
    """Channels-last, conv_last (64 -> 3) runs as 8 outputs (zero weights past 3), the 3 sliced after."""
    backend = _open("edvr-tiny", CudaOptions(device="cpu", precision="fp32", output="float32"))
    padded = backend.model.model.conv_last
    assert isinstance(padded, PaddedOutputConv) and padded.conv.out_channels == 8
    conv = torch.nn.Conv2d(64, 3, 3, 1, 1).to(dtype=dtype, memory_format=torch.channels_last)
    same = PaddedOutputConv(conv).to(memory_format=torch.channels_last)
    assert not same.conv.weight[3:].any() and not same.conv.bias[3:].any()
    x = torch.randn(2, 64, 12, 20).to(dtype=dtype, memory_format=torch.channels_last)
    with torch.no_grad():
        got, want = same(x), conv(x)
    assert got.shape == want.shape and torch.equal(got, want)


def test_edvr_s_on_a_small_frame_equals_the_torch_reference():
    cuda_b, ref = _open("edvr-s", CPU_FP32), _open("edvr-s", TorchOptions(device="cpu", threads=1))
    x = _frames(3, (1, 5, 3, 20, 24))
    assert np.abs(cuda_b.infer(x) - ref.infer(x)).max() <= 1e-5


def test_fp16_runs_weights_activations_and_kernels_in_half_precision(tiny):
    _, ref = tiny
    half = _open("edvr-tiny", CudaOptions(device="cpu", precision="fp16"))
    # every weight half, TSA's embeddings too: only its correlation sum runs fp32 (test_cuda_runtime.py)
    assert {p.dtype for p in half.model.parameters()} == {torch.float16}
    assert half.fp32_modules == ["model.fusion"]
    x = _frames(4, (1, 3, 3, 16, 20))
    got, want = half.infer(x), ref.infer(x)
    assert got.dtype == np.float16  # the default download
    err = np.abs(got.astype(np.float32) - want).max()
    assert 0 < err <= 5e-3  # not bit-equal (it did run in fp16), yet close


class OrtOnTensors:
    """ONNX Runtime standing in for the TensorRT engines: its runners bind the device arena's CPU tensors."""

    name = "onnxruntime"
    precision = "fp32"
    device = "torch:cpu"

    def __init__(self):
        self.inner = OrtSegmentBackend(threads=1)
        self.version = self.inner.version

    def load(self, path):
        return _TensorRunner(self.inner.load(path))


@dataclass
class _TensorRunner:
    inner: object

    def bind(self, inputs, outputs):
        assert all(isinstance(t, torch.Tensor) for t in (*inputs.values(), *outputs.values()))
        return self.inner.bind({k: t.numpy() for k, t in inputs.items()}, {k: t.numpy() for k, t in outputs.items()})


def test_plan_on_a_device_arena_with_stand_in_engines_equals_the_reference(tiny):
    _, ref = tiny
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, cfg = load_model("random", "edvr-tiny")
    backend = CudaTensorRTBackend.from_model(model, cfg, CPU_FP32, torch.device("cpu"), segment_backend=OrtOnTensors())
    x = _frames(5, (2, 3, 3, 16, 20))
    backend.prepare(16, 20, 2)
    got = backend.infer(x)
    assert np.abs(got - ref.infer(x)).max() <= 1e-4
    plan = next(iter(backend._executors.values())).plan
    bound = next(iter(next(iter(backend._executors.values()))._bound.values()))
    assert isinstance(bound.arena, torch.Tensor) and all(isinstance(t, torch.Tensor) for t in bound.tensors.values())
    # the torch runtime's cut points are the plan's: one bridge per DeformConv / DepthToSpace node
    bridges = [s.op_type for s in plan.steps if s.kind == "bridge"]
    assert sorted(bridges) == ["DeformConv"] * 4 + ["DepthToSpace"] * 2
    torch_bridges = [k for k in tiny[0].timings() if k.startswith(("dcn:", "shuffle:"))]
    assert len(torch_bridges) == len(bridges)


def test_backend_cuda_option_and_auto_without_a_gpu(monkeypatch):
    assert backend_options("cuda") == CudaOptions()
    assert backend_options("cuda", stream_features=False) == CudaOptions(stream_features=False)  # the CLI's flag
    monkeypatch.setattr(backend_options_module, "cuda_available", lambda: False)
    assert backend_options("auto") == SplitOptions()  # as on every machine without a GPU
    assert backend_options("auto", "whole") == OrtOptions()
    monkeypatch.setattr(backend_options_module, "cuda_available", lambda: True)  # a GPU and a launcher
    assert backend_options("auto") == CudaOptions()
    assert backend_options("auto", "whole") == OrtOptions()  # an explicit plan keeps ONNX Runtime
    assert backend_options("torch") == TorchOptions()


def test_auto_on_this_machine_is_what_it_was():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: auto is the CUDA runtime")
    assert not backend_options_module.cuda_available()
    assert backend_options("auto") == SplitOptions()


def test_a_gpu_without_a_kernel_launcher_keeps_auto_on_onnx_runtime(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in ("cupy", "pycuda")
                        else real(name, *a))
    assert not backend_options_module.cuda_available()
    assert backend_options("auto") == SplitOptions()


@pytest.mark.parametrize("field, value", [("precision", "int8"), ("segments", "onnx"), ("dcn_gemm", "cudnn"),
                                          ("memory_format", "nhwc")])
def test_bad_cuda_options_are_one_line_errors(field, value):
    with pytest.raises(BackendError, match=value):
        CudaOptions(**{field: value})


def test_the_fused_dcn_option_is_refused_where_it_cannot_run(monkeypatch):
    """dcn_gemm 'fused': channels-last torch segments only, and Triton installed -- else one line saying so."""
    import importlib.util

    for bad in ({"memory_format": "contiguous"}, {"segments": "tensorrt"}):
        with pytest.raises(BackendError, match="channels-last on torch segments only"):
            CudaOptions(dcn_gemm="fused", **bad)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "triton" else real(name, *a))
    with pytest.raises(BackendError, match="needs Triton") as info:
        CudaOptions(dcn_gemm="fused")
    assert "\n" not in str(info.value)


@needs_no_gpu
def test_backend_cuda_without_a_gpu_is_one_line():
    with pytest.raises(BackendError, match="needs an NVIDIA GPU") as info:
        open_backend("random", "edvr-tiny", CudaOptions())
    assert "\n" not in str(info.value)
    with pytest.raises(BackendError, match="not a device"):
        resolve_device(CudaOptions(device="gpu0"))


@needs_no_gpu
def test_cli_backend_cuda_without_a_gpu_exits_2_with_one_line(make_clip, tmp_path, capsys):
    from vsr.cli import main

    src = make_clip("c.mp4", frames=3)
    rc = main(["upscale", str(src), str(tmp_path / "o.mp4"), "--weights", "random", "--config", "edvr-tiny",
               "--backend", "cuda", "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2
    assert [line for line in err.splitlines() if line.strip()] == [
        line for line in err.splitlines() if line.startswith("vsr: error:") and "needs an NVIDIA GPU" in line]
    assert not (tmp_path / "o.mp4").exists()


@needs_no_gpu
def test_backend_cuda_without_a_gpu_is_refused_before_the_weights_are_measured(make_clip, tmp_path, capsys,
                                                                               monkeypatch):
    """Issue 40: `--backend cuda` on a machine without a GPU measured the source for the weights, then refused."""
    import importlib

    from vsr.cli import main

    pipeline_upscale = importlib.import_module("vsr.pipeline.upscale")  # the module, not the function it exports

    def measured(_source):
        raise AssertionError("the source was measured for the weights before the refusal")

    monkeypatch.setattr(pipeline_upscale, "choose_for", measured)
    src = make_clip("c.mp4", frames=3)
    rc = main(["upscale", str(src), str(tmp_path / "o.mp4"), "--backend", "cuda"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert [line for line in err.splitlines() if line.strip() and not line.startswith("\r")] == [
        line for line in err.splitlines() if line.startswith("vsr: error:") and "needs an NVIDIA GPU" in line]
    assert not (tmp_path / "o.mp4").exists()


def test_segments_are_torch_where_tensorrt_does_not_import():
    cpu = torch.device("cpu")
    assert segment_runtime(CudaOptions(device="cpu"), cpu) == "torch"
    with pytest.raises(BackendError, match="tensorrt"):
        segment_runtime(CudaOptions(device="cpu", segments="tensorrt"), cpu)


def test_tensor_launcher_runs_the_fused_kernel_on_tensors_in_place():
    launcher = open_tensor_launcher("auto", torch.device("cpu"))
    for dtype in (torch.float32, torch.float16):
        x = torch.randn(2, 12, 5, 7, generator=torch.Generator().manual_seed(0)).to(dtype)
        out = torch.empty(2, 3, 10, 14, dtype=dtype)
        got = pixel_shuffle_lrelu(launcher, x, 2, out=out, negative_slope=0.1)
        assert got is out
        want = torch.nn.functional.leaky_relu(torch.nn.functional.pixel_shuffle(x.float(), 2), 0.1).to(dtype)
        assert torch.equal(out, want)
    with pytest.raises(ValueError, match="contiguous"):
        pixel_shuffle_lrelu(launcher, x.transpose(2, 3), 2)


def test_host_launcher_refuses_device_tensors_and_unknown_launchers_are_errors():
    with pytest.raises(BackendError, match="cannot run on tensors of device cuda"):
        TensorLauncher(open_tensor_launcher("host", torch.device("cpu")).base, torch.device("cuda"))
    with pytest.raises(BackendError, match="choose from"):
        open_tensor_launcher("opencl", torch.device("cpu"))


@pytest.mark.parametrize("output", ["float32", "float16", "uint8"])
def test_vsr_upscale_through_the_cuda_runtime_emulated_on_the_cpu(make_clip, tmp_path, output):
    """The whole pipeline (decode, windows, batches, the runtime, encode) with the CUDA runtime emulated: the
    same PNG frames as the torch backend, within one level where a small difference crosses a rounding edge --
    whichever dtype the runtime downloads (the post stage takes float32, float16 and uint8 RGB)."""
    import av

    from vsr.backends import BackendRequest
    from vsr.pipeline import RunnerSettings, upscale

    src = make_clip("c.mp4", frames=3, width=20, height=16)
    frames = {}
    cuda = CudaOptions(device="cpu", precision="fp32", output=output)
    for name, options in (("cuda", cuda), ("torch", TorchOptions(device="cpu", threads=1))):
        request = BackendRequest("random", "edvr-tiny", options)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            report = upscale(src, tmp_path / name, backend=request, runner=RunnerSettings(batch=2))
        assert report.to_dict()["frames"] == 3
        frames[name] = [next(av.open(str(p)).decode(video=0)).to_ndarray().astype(int)
                        for p in sorted((tmp_path / name).glob("*.png"))]
    assert len(frames["cuda"]) == 3 and frames["cuda"][0].shape == (64, 80, 3)
    assert max(np.abs(a - b).max() for a, b in zip(frames["cuda"], frames["torch"])) <= 1


def test_auto_takes_the_faster_dcn_form_and_falls_back_to_torch(caplog):
    """dcn_gemm 'auto': the form the timer finds fastest; one that fails is left out (logged); none: torch."""
    from vsr.backends.cuda.bridges import faster_form

    ran = []

    def run(form):
        ran.append(form)
        if form == "broken":
            raise RuntimeError("no kernel image for this device")

    ms = {"torch": 9.7, "fused": 3.1}
    assert faster_form(run, ("torch", "fused"), "dcn:l1", timer=lambda fn: (fn(), ms[ran[-1]])[1]) == "fused"
    ms["fused"] = 12.0
    assert faster_form(run, ("torch", "fused"), "dcn:l1", timer=lambda fn: (fn(), ms[ran[-1]])[1]) == "torch"
    assert faster_form(run, ("torch", "broken"), "dcn:l1", timer=lambda fn: (fn(), 1.0)[1]) == "torch"
    assert "DCN form 'broken' failed (RuntimeError: no kernel image" in caplog.text

    def nothing_runs(fn):
        raise RuntimeError("out of memory")

    assert faster_form(run, ("torch", "fused"), "dcn:l1", timer=nothing_runs) == "torch"


def test_auto_is_torch_where_nothing_can_be_timed(tiny):
    """On the CPU emulation (and in a capture) 'auto' runs the two-kernel form and chooses nothing for later;
    the report's facts say which form each DCN ran."""
    backend = _open("edvr-tiny", CudaOptions(device="cpu", precision="fp32", output="float32"))
    assert backend.options.dcn_gemm == "auto"
    backend.infer(_frames(2, (1, 3, 3, 16, 16)))
    bridges = [m for m in backend.model.modules() if isinstance(m, DCNBridge)]
    assert len(bridges) == 4 and all(b.forms == {} for b in bridges)
    assert set(backend.facts()["dcn"].values()) == {"torch"}


def test_batches_queued_before_the_last_is_collected_give_the_same_outputs():
    """``submit`` queues a batch and returns before its download is collected; the next may be queued first
    (the run's infer stage does: the device never waits for the host). A third submit collects the first's
    download before its slot is written again, so nothing is overwritten whatever the caller's order."""
    from vsr.backends.base import FrameKeys

    def keys(c):  # EDVR-tiny's 3-frame windows centred on c and c + 1; the next call's need frames from c + 1
        rows = (tuple(range(c - 1, c + 2)), tuple(range(c, c + 3)))
        return FrameKeys(7, rows, (0, 0), keep_from=c + 1)

    frames = _frames(11, (12, 3, 16, 16))
    xs = [np.stack([frames[list(r)] for r in keys(c).frames]) for c in (2, 4, 6, 8)]
    want_b = _open("edvr-tiny", CPU_FP32)
    want_b.prepare(16, 16, 2)
    want = [want_b.infer_stream(x, keys(c)) for x, c in zip(xs, (2, 4, 6, 8))]
    b = _open("edvr-tiny", CPU_FP32)
    b.prepare(16, 16, 2)
    queued = [b.submit(x, keys(c)) for x, c in zip(xs, (2, 4, 6, 8))]  # none collected by the caller
    assert queued[0].finished and queued[1].finished  # collected by the 3rd and 4th submits (their slots)
    assert not queued[3].finished
    for got, ref in zip(queued, want):
        assert np.array_equal(got.result(), ref)
    assert b._owed == {}
