"""On a GPU: the CUDA runtime against torchvision's ``deform_conv2d`` and the torch backend, graphs and streams,
and a per-segment / per-kernel timing printout.  Skipped without CUDA (CI, the CPU development machine); run
on a GPU session with the commands in docs/benchmarks-history.md ("GPU (not yet measured ...)").

Tolerances: the bridged DCN against torchvision 1e-5 (fp32) and 1e-3 of the largest output (fp16), the issue's;
the whole model fp32 with TF32 off 1e-4 (ONNX-Runtime-like summation-order differences through ~30 layers).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from vsr.backends import CudaOptions, TorchOptions, open_backend
from vsr.backends.cuda.bridges import DCNBridge, Timeline
from vsr.backends.cuda.layout import Layout
from vsr.backends.cuda.tensors import open_tensor_launcher
from vsr.model.dcn import DCNv2Pack

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture(autouse=True)
def no_tf32():
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def _open(config, options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return open_backend("random", config, options)


def _torchvision():
    return pytest.importorskip("torchvision.ops").deform_conv2d


@pytest.mark.parametrize("layout, gemm", [("channels_last", "torch"), ("contiguous", "torch"),
                                          ("channels_last", "kernel"), ("contiguous", "kernel"),
                                          ("channels_last", "fused"), ("channels_last", "auto")])
@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.float16, 1e-3)])
def test_bridged_dcn_matches_torchvision_on_edvr_m_shapes(dtype, tol, gemm, layout):
    if gemm in ("fused", "auto"):
        pytest.importorskip("triton")
    deform_conv2d = _torchvision()
    device = torch.device("cuda")
    torch.manual_seed(0)
    pack = DCNv2Pack(64, 64, 3, padding=1, deformable_groups=8)
    torch.nn.init.normal_(pack.conv_offset.weight, std=0.05)  # offsets of a few pixels, fractions, off the frame
    pack = pack.to(device, dtype).eval()
    bridge = DCNBridge(pack, open_tensor_launcher("auto", device), Timeline(device), "dcn", gemm, Layout(layout))
    x, feat = (Layout(layout).activation(torch.randn(5, 64, 68, 120, device=device, dtype=dtype)) for _ in range(2))
    with torch.inference_mode():
        got = bridge(x, feat).float()
        offset, mask = pack.offset_mask(feat)
        want = deform_conv2d(x.float(), offset.float(), pack.weight.float(), pack.bias.float(), padding=(1, 1),
                             mask=mask.float())
    scale = 1.0 if dtype == torch.float32 else want.abs().max().item()
    assert (got - want).abs().max().item() <= tol * scale
    if gemm == "auto":  # timed at the shape's first call: one of the two forms, kept for the next calls
        assert list(bridge.forms.values()) in (["torch"], ["fused"])


@pytest.mark.parametrize("graphs", [False, True])
def test_fp32_runtime_equals_the_torch_backend(graphs):
    x = np.random.default_rng(0).random((2, 5, 3, 64, 96), dtype=np.float32)
    ref = _open("edvr-s", TorchOptions(device="cuda")).infer(x)
    got = _open("edvr-s", CudaOptions(precision="fp32", cuda_graphs=graphs, output="float32")).infer(x)
    assert np.abs(got - ref).max() <= 1e-4


def test_fp16_with_graphs_is_close_to_fp32_and_replays_identically():
    x = np.random.default_rng(1).random((1, 5, 3, 64, 96), dtype=np.float32)
    ref = _open("edvr-s", TorchOptions(device="cuda")).infer(x)
    half = _open("edvr-s", CudaOptions(precision="fp16", cuda_graphs=True))
    assert half.graphs_on and half.launcher.name == "cupy"
    a, b = half.infer(x), half.infer(x)
    np.testing.assert_array_equal(a, b)
    assert np.abs(a - ref).max() <= 2e-2


def test_kernels_follow_torch_onto_a_side_stream():
    x = np.random.default_rng(2).random((1, 3, 3, 32, 32), dtype=np.float32)
    backend = _open("edvr-tiny", CudaOptions(precision="fp32", cuda_graphs=False, output="float32"))
    want = backend.infer(x)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        got = backend.infer(x)
    np.testing.assert_array_equal(got, want)


def test_device_memory_is_measured_for_the_memory_plan():
    backend = _open("edvr-s", CudaOptions(precision="fp16"))
    mem = backend.device_memory()
    assert mem["free_mb"] > 0 and mem["bytes_per_pixel"] > 0 and mem["fixed_mb"] >= 0
    print("\ndevice memory", mem)


def test_timings_per_segment_and_kernel_print():
    backend = _open("edvr-m", CudaOptions(precision="fp16", cuda_graphs=False))
    x = np.random.default_rng(3).random((1, 5, 3, 180, 320), dtype=np.float32)
    backend.prepare(180, 320, 1)
    for _ in range(3):
        backend.infer(x)
    steps = {k: v.p50_s for k, v in backend.step_stats().items()}
    assert len(steps) == 14 and all(v > 0 for v in steps.values())  # features, 7 segments, 4 DCN, 2 shuffles
    print("\n" + "\n".join(f"{k:32s} {1e3 * v:8.2f} ms" for k, v in steps.items()))


def test_kernels_run_on_the_backends_own_stream_and_graphs_on_the_planned_batch():
    """The bridges' cupy launches follow torch's current stream, which the backend sets to its own (not the
    default); prepare() captures the planned batch's graph and a partial batch replays it (no second graph)."""
    x = np.random.default_rng(4).random((2, 3, 3, 32, 32), dtype=np.float32)
    eager = _open("edvr-tiny", CudaOptions(precision="fp16", cuda_graphs=False))
    seen = []
    launch = eager.launcher.launch
    eager.launcher.launch = lambda *a: (seen.append(torch.cuda.current_stream().cuda_stream), launch(*a))[1]
    eager.infer(x)
    assert seen and set(seen) == {eager.stream.cuda_stream} != {0}
    graphs = _open("edvr-tiny", CudaOptions(precision="fp16"))
    graphs.prepare(32, 32, 3)
    np.testing.assert_allclose(graphs.infer(x).astype(np.float32), eager.infer(x).astype(np.float32), atol=2e-3)
    assert list(graphs.graphs.runs) == [("windows", 3, 32, 32), ("features", 3, 32, 32)]


def test_uint8_output_matches_the_float_output_quantised():
    x = np.random.default_rng(5).random((1, 3, 3, 32, 32), dtype=np.float32)
    f = _open("edvr-tiny", CudaOptions(precision="fp32", output="float32")).infer(x)
    u = _open("edvr-tiny", CudaOptions(precision="fp32", output="uint8")).infer(x)
    assert u.dtype == np.uint8
    assert np.abs(u.astype(int) - np.clip(f * 255 + 0.5, 0, 255).astype(int)).max() <= 1
