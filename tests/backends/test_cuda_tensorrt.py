"""The CUDA runtime's TensorRT path end to end on the CPU emulation, with the strict stand-in for ``tensorrt``
(``tests/plan/trt_standin.py``: the real 11.x bindings' names only; its engines run their ONNX on ONNX Runtime
over the arena's memory) -- the export in the engines' precision, the plan, strongly typed builds, profiles
optimised at the planned batch, one arena per bucket, and every engine run on the backend's own stream.
"""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest
import torch

from tests.plan.trt_standin import TensorRTStandIn
from vsr.backends import CudaOptions, TorchOptions
from vsr.backends.cuda.engines import CudaTensorRTBackend, _exporter
from vsr.backends.torch_backend import TorchBackend
from vsr.export.onnx import state_checksum
from vsr.model import load_model
from vsr.plan.tensorrt import TensorRTSegmentBackend


@pytest.mark.parametrize("precision, tol", [("fp16", 5e-3), ("int8", 0.1)])  # fp32: test_cuda_backend.py
def test_tensorrt_segments_equal_the_reference_and_run_as_planned(precision, tol, monkeypatch, tmp_path):
    monkeypatch.setenv("VSR_ENGINE_DIR", str(tmp_path / "engines"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, cfg = load_model("random", "edvr-tiny")
        # exported before the stand-in is installed: torch.export looks for a real tensorrt when it sees one
        _exporter(model, cfg, state_checksum(model), precision)(16, 20)
    trt = TensorRTStandIn("11.4.0.106")
    monkeypatch.setitem(sys.modules, "tensorrt", trt)
    options = CudaOptions(device="cpu", precision=precision, output="float32", segments="tensorrt",
                          cache_dir=str(tmp_path / "cuda"))
    segments = TensorRTSegmentBackend(precision=precision, device="cuda", device_io=True,
                                      engine_dir=str(tmp_path / "trt"))
    backend = CudaTensorRTBackend.from_model(model, cfg, options, torch.device("cpu"), segment_backend=segments)
    ref = TorchBackend(model, cfg, TorchOptions(device="cpu", threads=1))
    backend.prepare(16, 20, 2)
    for n in (2, 1, 3):  # the planned batch, a partial one (padded), one and a half (two runs)
        x = np.random.default_rng(n).random((n, 3, 3, 16, 20), dtype=np.float32)
        got = backend.infer(x)
        assert got.shape == (n, 3, 64, 80) and np.abs(got - ref.infer(x)).max() <= tol
    assert len(trt._builds) == 7 and all(b["strongly_typed"] and b["flags"] == [] for b in trt._builds)
    profiles = [p for b in trt._builds for p in b["profile"].values()]
    assert [1, 3, 3, 16, 20] in [p[0] for p in profiles]  # the model input: N = 1 .. 8, optimised at 2
    assert all(p[1][0] == 2 * p[0][0] and p[2][0] == 8 * p[0][0] for p in profiles)
    assert any(p[0][0] == 3 for p in profiles)  # per-frame features: 3 frames per item
    half_inputs = {dtype for b in trt._builds for _, _, dtype in b["inputs"]}
    assert half_inputs == ({"float32", "float16"} if precision == "fp16" else {"float32"})
    (executor,) = backend._executors.values()
    segments = [(executor.plan.directory / s.file).read_bytes() for s in executor.plan.steps if s.kind == "segment"]
    assert any(b"QuantizeLinear" in seg for seg in segments) == (precision == "int8")  # the Q/DQ export's
    assert set(trt._streams) == {backend.stream_handle()} and backend.stream_handle() != 0
    assert len(executor._bound) == 1  # the planned batch's arena serves every batch size


def test_a_run_downloads_the_sinks_planes_made_on_the_device(monkeypatch, tmp_path):
    """In a run the TensorRT path downloads the sink's planes, made on the device by the torch segments' own
    conversion from the arena's output as it is (here fp32: not rounded to ``output`` first): what the post stage
    would make of that RGB on the host, bit for bit (8-bit 4:2:0, 10-bit 4:2:2), and RGB again once the run ends."""
    from tests.backends.planes_check import assert_host_planes
    from vsr.video.colour import ColourSpec
    from vsr.video.planes import PlaneFormat

    monkeypatch.setenv("VSR_ENGINE_DIR", str(tmp_path / "engines"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, cfg = load_model("random", "edvr-tiny")
        _exporter(model, cfg, state_checksum(model), "fp32")(16, 20)
    monkeypatch.setitem(sys.modules, "tensorrt", TensorRTStandIn("11.4.0.106"))
    options = CudaOptions(device="cpu", precision="fp32", output="float32", segments="tensorrt",
                          cache_dir=str(tmp_path / "cuda"))
    segments = TensorRTSegmentBackend(precision="fp32", device="cuda", device_io=True,
                                      engine_dir=str(tmp_path / "trt"))
    backend = CudaTensorRTBackend.from_model(model, cfg, options, torch.device("cpu"), segment_backend=segments)
    backend.prepare(13, 18, 2)
    x = np.random.default_rng(3).random((3, 3, 3, 13, 18), dtype=np.float32)  # a partial second chunk, padded
    rgb = backend.infer(x)
    assert rgb.dtype == np.float32 and backend.facts()["download"] == "rgb float32"
    for pix_fmt, matrix in (("yuv420p", 1), ("yuv422p10le", 9)):
        fmt = PlaneFormat.of(pix_fmt, ColourSpec(matrix, 1, 1, 1))
        backend.prepare(13, 18, 2, planes=fmt)
        assert backend.facts()["download"] == f"planes {pix_fmt}"
        assert_host_planes(backend.infer(x), rgb, fmt)
    backend.prepare(13, 18, 2, planes=None)
    assert backend.facts()["download"] == "rgb float32" and backend.infer(x).dtype == np.float32
    off = CudaTensorRTBackend.from_model(model, cfg, CudaOptions(device="cpu", segments="tensorrt",
                                                                 device_planes=False,
                                                                 cache_dir=str(tmp_path / "cuda")),
                                         torch.device("cpu"), segment_backend=segments)
    off.prepare(13, 18, 2, planes=fmt)
    assert off.facts()["download"].startswith("rgb ")  # device_planes=False: the host converts, as before
