"""Compiling vsr's kernels with cupy's NVRTC: where CUDA's fp16 headers are found, the one-line error where they
are not, and a source text (what cupy's and pycuda's compile caches key on) that changes with every included
file's contents; on several GPUs, a launcher compiles, looks up, allocates and launches on the device it was
asked for.  cupy cannot run here (no GPU): a strict stand-in (:mod:`tests.kernels.cupy_standin`) with cupy's
calls, its compile error and a current device per process stands in for it, and says so.
"""

from __future__ import annotations

import shutil
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from vsr.errors import BackendError
from vsr.kernels.cuda import launch, sources
from vsr.kernels.cuda.launch import find_cuda_include, module_source, open_launcher


def _header(folder: Path, text: str = "// fp16\n") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "cuda_fp16.h").write_text(text)
    (folder / "cuda_fp16.hpp").write_text(text)
    return folder


@pytest.fixture
def no_cuda_env(monkeypatch):
    for var in ("CUDA_PATH", "CUDA_HOME"):
        monkeypatch.delenv(var, raising=False)


def test_headers_are_found_in_the_nvidia_wheels_and_the_toolkit_first(tmp_path, monkeypatch, no_cuda_env):
    wheel = _header(tmp_path / "site" / "nvidia" / "cu13" / "include")
    monkeypatch.setattr(sys, "path", [str(tmp_path / "site")])
    assert find_cuda_include() == wheel
    toolkit = _header(tmp_path / "toolkit" / "include")
    monkeypatch.setenv("CUDA_PATH", str(tmp_path / "toolkit"))
    assert find_cuda_include() == toolkit
    assert find_cuda_include([tmp_path / "nothing"]) is None


def test_the_source_text_changes_with_every_included_files_contents(tmp_path, monkeypatch):
    copy = tmp_path / "src"
    shutil.copytree(sources.SOURCE_DIR, copy, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    monkeypatch.setattr(sources, "SOURCE_DIR", copy)
    include = _header(tmp_path / "include")
    base = module_source(include)
    assert module_source(include) == base  # deterministic
    seen = {base}
    for path in (copy / "vsr_cuda.h", copy / "deform_conv.cu", include / "cuda_fp16.h", include / "cuda_fp16.hpp"):
        path.write_text(path.read_text() + "// edited\n")
        seen.add(module_source(include))
    assert len(seen) == 5  # each edit gave a new text, so a cache keyed on it misses


def _fake_cupy(monkeypatch, error: str | None):
    """The cupy stand-in (one GPU) whose ``get_function`` fails with ``error`` as cupy's CompileException does."""
    from tests.kernels.cupy_standin import CupyStandIn

    cupy = CupyStandIn(devices=1, compile_error=error)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    return cupy


def test_a_missing_cuda_fp16_h_is_one_line_naming_it_and_where_it_was_looked_for(tmp_path, monkeypatch,
                                                                                 no_cuda_env):
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    monkeypatch.setattr(launch, "cuda_include_candidates", lambda: [tmp_path / "none" / "include"])
    _fake_cupy(monkeypatch, 'vsr_cuda.h(9): catastrophic error: cannot open source file "cuda_fp16.h"\n'
                            '  #include <cuda_fp16.h>\n1 catastrophic error detected')
    with pytest.raises(BackendError) as info:
        open_launcher("cupy")
    message = str(info.value)
    assert "\n" not in message and "cannot find cuda_fp16.h" in message and str(tmp_path / "none") in message
    assert "nvidia-cuda-runtime" in message


def test_cupy_gets_the_found_headers_and_the_digested_source(tmp_path, monkeypatch):
    include = _header(tmp_path / "include")
    monkeypatch.setattr(launch, "cuda_include_candidates", lambda: [include])
    cupy = _fake_cupy(monkeypatch, None)
    open_launcher("cupy")
    [made] = cupy.modules
    assert f"-I{include}" in made.options and made.code == module_source(include)
    assert made.code.startswith("// vsr kernels ")
    _fake_cupy(monkeypatch, "error: identifier \"foo\" is undefined\nmore")
    with pytest.raises(BackendError, match='^kernel launcher \'cupy\': compiling vsr\'s kernels failed: error: '
                                           'identifier "foo" is undefined$'):
        open_launcher("cupy")


# -- several GPUs: a launcher bound to the device it was asked for (no GPU here: tests/kernels/cupy_standin.py) ---

@pytest.fixture
def two_gpus(tmp_path, monkeypatch):
    from tests.kernels.cupy_standin import CupyStandIn

    monkeypatch.setattr(launch, "cuda_include_candidates", lambda: [_header(tmp_path / "include")])
    cupy = CupyStandIn(devices=2)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    return cupy


def test_the_stand_in_refuses_what_a_device_refuses(two_gpus):
    from tests.kernels.cupy_standin import StandInError

    cupy = two_gpus
    handle = cupy.RawModule(code="").get_function("k")  # looked up on device 0, the current one
    with cupy.cuda.Device(1), pytest.raises(StandInError, match="INVALID_HANDLE.*stand-in"):
        handle((1, 1, 1), (1, 1, 1), ())
    with pytest.raises(StandInError, match="stream of device 1 entered while device 0"):
        with cupy.cuda.ExternalStream(7, 1):
            pass
    with pytest.raises(StandInError, match="invalid device ordinal 2"):
        with cupy.cuda.Device(2):
            pass
    assert cupy.current == 0 and cupy.__file__.startswith("<cupy stand-in")


def test_the_cupy_launcher_compiles_allocates_and_launches_on_the_device_it_was_asked_for(two_gpus):
    from vsr.kernels.cuda.ops import pixel_shuffle_lrelu

    cupy = two_gpus
    second = open_launcher("cupy", device=1)  # from a thread whose current device is 0
    assert (second.device, cupy.compiled, cupy.current) == (1, [1], 0)
    x = second.asarray(np.zeros((1, 4, 2, 2)), np.float32)
    pixel_shuffle_lrelu(second, x)  # allocates its output and launches
    assert cupy.launches == [("pixel_shuffle_lrelu_f32", 1, None)] and cupy.allocations == [1, 1]
    assert cupy.current == 0  # put back
    first = open_launcher("cupy", device=0)  # one launcher, one set of handles, per device
    with cupy.cuda.Device(1):
        pixel_shuffle_lrelu(first, x)
    assert cupy.compiled == [1, 0] and cupy.launches[-1] == ("pixel_shuffle_lrelu_f32", 0, None)
    with cupy.cuda.Device(1):  # no device named: the current one when it opens
        assert open_launcher("cupy").device == 1


def test_a_tensor_launcher_for_cuda_1_launches_there_on_torchs_stream_of_it(two_gpus, monkeypatch):
    import torch

    from vsr.backends.cuda.tensors import TensorLauncher, open_tensor_launcher

    asked = []

    def current_stream(device):  # stand-in for torch.cuda's: device 1's current stream is 0x51
        asked.append(device)
        return types.SimpleNamespace(cuda_stream=0x51)

    monkeypatch.setattr(torch.cuda, "current_stream", current_stream)
    monkeypatch.setattr(torch.cuda, "get_device_properties",  # an H100's L2, which the DCN's chunks are sized to
                        lambda device: types.SimpleNamespace(L2_cache_size=50 << 20))
    tensors = open_tensor_launcher("cupy", torch.device("cuda", 1), graphs=True)
    assert tensors.base.device == 1 and two_gpus.compiled == [1]
    args = (np.uint64(16), np.uint64(32), 1, 1, 2, 2, 2, 1.0)  # pointers as a tensor gives them
    tensors.launch("pixel_shuffle_lrelu_f32", (1, 1, 1), (256, 1, 1), *args)
    assert two_gpus.launches == [("pixel_shuffle_lrelu_f32", 1, 0x51)] and asked == [torch.device("cuda", 1)]
    with pytest.raises(BackendError, match="bound to device 1, not cuda:0"):
        TensorLauncher(tensors.base, torch.device("cuda", 0))


def test_the_host_launcher_takes_a_device_and_computes_the_same_there():
    import torch

    from vsr.backends.cuda.tensors import open_tensor_launcher
    from vsr.kernels.cuda.ops import pixel_shuffle_lrelu

    if not launch.launcher_available("host"):
        pytest.skip("no host C++ compiler")
    x = np.random.default_rng(0).standard_normal((1, 8, 3, 3)).astype(np.float32)
    on = {d: open_launcher("host", device=d) for d in (None, 1)}
    assert (on[None].device, on[1].device) == (0, 1)
    np.testing.assert_array_equal(pixel_shuffle_lrelu(on[1], x, negative_slope=0.1),
                                  pixel_shuffle_lrelu(on[None], x, negative_slope=0.1))
    assert open_tensor_launcher("host", torch.device("cpu", 1)).base.device == 1
