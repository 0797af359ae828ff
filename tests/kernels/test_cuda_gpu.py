"""On a GPU: vsr's CUDA kernels (NCHW and channels-last) through the pycuda and cupy launchers equal the float64
DCNv2 definition, torchvision's ``deform_conv2d`` (fp32: 1e-5; fp16 storage: 1e-3 of the largest output) and
torch's ``pixel_shuffle`` + ``leaky_relu`` (exact).  Skipped where no GPU launcher opens (CI, CPU-only machines).
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.test_cuda_kernels import CASES, make_case, nhwc_operands, reference_dcn
from vsr.errors import BackendError
from vsr.kernels.cuda import (deform_conv, deform_conv_nhwc, launcher_available, open_launcher,
                              pixel_shuffle_lrelu)


@pytest.fixture(scope="module", params=["pycuda", "cupy"])
def gpu(request):
    if not launcher_available(request.param):
        pytest.skip(f"{request.param} is not installed")
    try:
        return open_launcher(request.param)
    except BackendError as exc:
        pytest.skip(str(exc))


def torchvision_dcn(arrays, geom):
    torch = pytest.importorskip("torch")
    ops = pytest.importorskip("torchvision.ops")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    x, weight, offset, mask, bias = (torch.from_numpy(a).cuda() for a in arrays)
    # torchvision pads symmetrically: only cases with pad_top == pad_bottom, pad_left == pad_right compare
    out = ops.deform_conv2d(x, offset, weight, bias, stride=(geom.stride_h, geom.stride_w),
                            padding=(geom.pad_top, geom.pad_left), dilation=(geom.dilation_h, geom.dilation_w),
                            mask=mask)
    return out.cpu().numpy()


@pytest.mark.parametrize("name", ["edvr-like", "several-gemm-blocks", "stride2-dilation2"])
def test_dcn_fp32_matches_definition_and_torchvision(gpu, name):
    n, c, h, w, co, kh, kw, attrs = CASES[name]
    geom, arrays = make_case(1, n, c, h, w, co, kh, kw, **attrs)
    got = gpu.to_host(deform_conv(gpu, geom, *(gpu.asarray(a) for a in arrays)))
    assert np.abs(got - reference_dcn(*arrays, geom)).max() <= 1e-5
    assert np.abs(got - torchvision_dcn(arrays, geom)).max() <= 1e-5


@pytest.mark.parametrize("name", ["edvr-like", "conv-groups-rect-kernel"])
def test_dcn_fp16_storage_matches_definition(gpu, name):
    n, c, h, w, co, kh, kw, attrs = CASES[name]
    geom, arrays = make_case(3, n, c, h, w, co, kh, kw, **attrs)
    halves = [a.astype(np.float16) for a in arrays]
    got = gpu.to_host(deform_conv(gpu, geom, *(gpu.asarray(a) for a in halves))).astype(np.float64)
    want = reference_dcn(*halves, geom)
    assert np.abs(got - want).max() <= 1e-3 * np.abs(want).max()


@pytest.mark.parametrize("name", ["edvr-like", "conv-groups-rect-kernel"])
@pytest.mark.parametrize("dtype, tol", [(np.float32, 1e-5), (np.float16, 1e-3)])
def test_dcn_nhwc_matches_definition(gpu, name, dtype, tol):
    n, c, h, w, co, kh, kw, attrs = CASES[name]
    geom, arrays = make_case(6, n, c, h, w, co, kh, kw, **attrs)
    arrays = [a.astype(dtype) for a in arrays]
    got = gpu.to_host(deform_conv_nhwc(gpu, geom, *(gpu.asarray(a) for a in nhwc_operands(arrays)), chunk_pixels=37))
    want = reference_dcn(*arrays, geom)
    scale = 1.0 if dtype == np.float32 else np.abs(want).max()
    assert np.abs(got.astype(np.float64).transpose(0, 3, 1, 2) - want).max() <= tol * scale


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_pixel_shuffle_lrelu_matches_torch(gpu, dtype):
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(5).standard_normal((2, 64 * 4, 9, 11)).astype(dtype)
    got = gpu.to_host(pixel_shuffle_lrelu(gpu, gpu.asarray(x), 2, negative_slope=0.1))
    t = torch.from_numpy(x.astype(np.float32))
    want = torch.nn.functional.leaky_relu(torch.nn.functional.pixel_shuffle(t, 2), 0.1).numpy().astype(dtype)
    np.testing.assert_array_equal(got, want)
