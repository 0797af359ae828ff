"""The TensorRT segment backend on the strict stand-in module (``tests/plan/trt_standin.py``): builds, profiles,
bindings and the checks of every call.

TensorRT and pycuda cannot be installed here.  The stand-in refuses every name the real 11.x (or 10.x) bindings
lack and fails where TensorRT fails; its engines run their ONNX on ONNX Runtime over the host memory at the
addresses they are given.  ``HostCuda`` is pycuda's driver over host memory (256-byte aligned allocations).
The real engines are tested in test_tensorrt.py where TensorRT exists.
"""

from __future__ import annotations

import subprocess
import sys
import types

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from tests.plan.trt_standin import TensorRTStandIn
from vsr.errors import BackendError
from vsr.plan.tensorrt import TensorRTDeviceRunner, TensorRTSegmentBackend

VERSIONS = ("10.16.1.11", "11.4.0.106")


class HostCuda:
    """pycuda.driver's calls the host runner makes, on host memory: allocations are numpy arrays."""

    def __init__(self):
        self.memory: dict[int, np.ndarray] = {}

    class Stream:
        handle = 7

        def synchronize(self):
            pass

    def mem_alloc(self, nbytes: int) -> int:
        raw = np.zeros(nbytes + 256, np.uint8)
        start = -raw.ctypes.data % 256
        buf = raw[start:start + nbytes]
        self.memory[buf.ctypes.data] = buf
        self._keep = getattr(self, "_keep", []) + [raw]
        return buf.ctypes.data

    def memcpy_htod_async(self, addr, arr, stream):
        raw = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
        self.memory[addr][:raw.size] = raw

    def memcpy_dtoh_async(self, arr, addr, stream):
        raw = arr.reshape(-1).view(np.uint8)
        raw[:] = self.memory[addr][:raw.size]


def _double(path, dims=("N", 4), dtype=TensorProto.FLOAT, extra_input=None) -> str:
    """y = 2 * x, x of ``dims`` (a symbolic first dimension); optionally a second, unused-looking input."""
    x = helper.make_tensor_value_info("x", dtype, list(dims))
    y = helper.make_tensor_value_info("y", dtype, list(dims))
    two = numpy_helper.from_array(np.array(2, helper.tensor_dtype_to_np_dtype(dtype)), "two")
    inputs, nodes = [x], [helper.make_node("Mul", ["x", "two"], ["y"], name="double")]
    if extra_input is not None:
        inputs.append(extra_input)
    model = helper.make_model(helper.make_graph(nodes, "double", inputs, [y], [two]),
                              opset_imports=[helper.make_opsetid("", 19)])
    onnx.save(model, str(path))
    return str(path)


@pytest.fixture(params=VERSIONS)
def trt(request, monkeypatch):
    standin = TensorRTStandIn(request.param)
    monkeypatch.setitem(sys.modules, "tensorrt", standin)
    return standin


@pytest.fixture
def pycuda(monkeypatch):
    cuda = HostCuda()
    pkg = types.ModuleType("pycuda")
    monkeypatch.setitem(sys.modules, "pycuda", pkg)
    monkeypatch.setitem(sys.modules, "pycuda.autoinit", types.ModuleType("pycuda.autoinit"))
    monkeypatch.setitem(sys.modules, "pycuda.driver", cuda)
    pkg.driver = cuda
    return cuda


def _buffers(n: int):
    x = np.arange(n * 4, dtype=np.float32).reshape(n, 4) + n
    return x, np.zeros_like(x)


def test_each_binding_runs_with_its_own_batch_shape_and_buffers(trt, pycuda, tmp_path):
    runner = TensorRTSegmentBackend(max_batch=4).load(_double(tmp_path / "d.onnx"))
    x2, y2 = _buffers(2)
    x1, y1 = _buffers(1)
    run2 = runner.bind({"x": x2}, {"y": y2})
    run1 = runner.bind({"x": x1}, {"y": y1})  # bound last: the context must not keep its shape for run2
    run2()
    run1()
    y2[...] = 0
    run2()
    np.testing.assert_array_equal(y2, 2 * x2)
    np.testing.assert_array_equal(y1, 2 * x1)


def test_device_buffers_are_sized_for_the_largest_batch_once(trt, pycuda, tmp_path):
    runner = TensorRTSegmentBackend(max_batch=4).load(_double(tmp_path / "d.onnx"))
    runner.bind({"x": _buffers(1)[0]}, {"y": _buffers(1)[1]})
    runner.bind({"x": _buffers(3)[0]}, {"y": _buffers(3)[1]})
    assert len(pycuda.memory) == 2  # one per tensor, none reallocated for the larger batch
    assert all(buf.size == 4 * 4 * 4 for buf in pycuda.memory.values())


def test_a_batch_beyond_the_profile_and_an_unknown_tensor_are_one_line_errors(trt, pycuda, tmp_path):
    runner = TensorRTSegmentBackend(max_batch=2).load(_double(tmp_path / "d.onnx"))
    with pytest.raises(BackendError, match="no I/O tensor 'z'"):
        runner.bind({"z": np.zeros((1, 4), np.float32)}, {})
    run = runner.bind({"x": _buffers(3)[0]}, {"y": _buffers(3)[1]})
    with pytest.raises(BackendError, match=r"rejected shape \(3, 4\) for input 'x'") as info:
        run()
    assert "\n" not in str(info.value)


def test_networks_are_strongly_typed_and_set_no_precision_flag(trt, tmp_path):
    TensorRTSegmentBackend(device_io=True, stream=lambda: 5).load(_double(tmp_path / "d.onnx"))
    assert trt._builds[-1]["strongly_typed"] is True and trt._builds[-1]["flags"] == []


def test_fp16_engines_come_from_an_fp16_onnx_and_need_no_fp16_flag(trt, tmp_path):
    """TensorRT 11 has no BuilderFlag.FP16: the old path raised AttributeError there; the precision is the
    ONNX's (strongly typed)."""
    if trt._version.startswith("11"):
        with pytest.raises(AttributeError, match="FP16"):
            trt.BuilderFlag.FP16
    else:
        assert repr(trt.BuilderFlag.FP16) == "BuilderFlag.FP16"
    half = TensorRTSegmentBackend(precision="fp16", device_io=True, stream=lambda: 5)
    with pytest.raises(BackendError, match="fp16 engines are built from vsr's fp16 export"):
        half.load(_double(tmp_path / "fp32.onnx"))
    half.load(_double(tmp_path / "fp16.onnx", dtype=TensorProto.FLOAT16))
    assert trt._builds[-1]["inputs"] == [["x", [-1, 4], "float16"]] and trt._builds[-1]["flags"] == []


def test_int8_engines_come_from_the_qdq_export(trt, tmp_path):
    be = TensorRTSegmentBackend(precision="int8", device_io=True, stream=lambda: 5)
    with pytest.raises(BackendError, match="is fp16: int8 engines are built from the Q/DQ export"):
        be.load(_double(tmp_path / "half.onnx", dtype=TensorProto.FLOAT16))
    be.load(_double(tmp_path / "plain.onnx"))  # a segment whose convs all stayed fp32
    path = _double(tmp_path / "qdq.onnx")
    model = onnx.load(path)
    scale = numpy_helper.from_array(np.array(0.05, np.float32), "s")
    zero = numpy_helper.from_array(np.array(0, np.int8), "z")
    model.graph.initializer.extend([scale, zero])
    model.graph.node[0].input[0] = "x_dq"
    model.graph.node.insert(0, helper.make_node("QuantizeLinear", ["x", "s", "z"], ["x_q"], name="q"))
    model.graph.node.insert(1, helper.make_node("DequantizeLinear", ["x_q", "s", "z"], ["x_dq"], name="dq"))
    onnx.save(model, path)
    be.load(path)
    assert trt._builds[-1]["strongly_typed"] is True and trt._builds[-1]["flags"] == []


def test_profiles_span_the_batch_in_items_scaled_by_frames_per_item(trt, tmp_path):
    """A per-frame input is (3*N, ...): batch 2 of 3-frame items is 6 rows, inside a profile built for
    N = 1..4 and optimised at the planned N = 2 (the old profile was rows 1..8 at 1)."""
    path = _double(tmp_path / "frames.onnx", dims=("3*N", 4))
    runner = TensorRTSegmentBackend(opt_batch=2, max_batch=4, device_io=True, stream=lambda: 5).load(path)
    assert trt._builds[-1]["profile"] == {"x": [[3, 4], [6, 4], [12, 4]]}
    x, y = _aligned(6, 4), _aligned(6, 4)
    x[...] = torch.arange(24.0).reshape(6, 4)
    runner.bind({"x": x}, {"y": y})()
    torch.testing.assert_close(y, 2 * x, rtol=0, atol=0)


def test_an_int64_shape_input_is_refused_before_the_build(trt, tmp_path):
    val = helper.make_tensor_value_info("val_0", TensorProto.INT64, [1])
    path = _double(tmp_path / "shape.onnx", extra_input=val)
    with pytest.raises(BackendError, match="input 'val_0' is int64; TensorRT segments take float tensors only"):
        TensorRTSegmentBackend(device_io=True, stream=lambda: 5).load(path)


def _aligned(*shape) -> torch.Tensor:
    raw = torch.zeros(int(np.prod(shape)) + 64)
    start = (-raw.data_ptr() % 256) // 4
    return raw[start:start + int(np.prod(shape))].view(*shape)


def test_device_io_points_the_engine_at_the_callers_tensors_on_the_callers_stream(trt, tmp_path):
    streams = iter([11, 12])
    runner = TensorRTSegmentBackend(max_batch=2, device_io=True, stream=lambda: next(streams)).load(
        _double(tmp_path / "d.onnx"))
    x2, y2, x1, y1 = _aligned(2, 4), _aligned(2, 4), _aligned(1, 4), _aligned(1, 4)
    x2[...] = torch.arange(8.0).reshape(2, 4)
    x1[...] = 5.0
    run2 = runner.bind({"x": x2}, {"y": y2})
    run1 = runner.bind({"x": x1}, {"y": y1})
    run2()
    run1()
    assert trt._streams == [11, 12]
    torch.testing.assert_close(y2, 2 * x2, rtol=0, atol=0)
    torch.testing.assert_close(y1, 2 * x1, rtol=0, atol=0)


def test_device_io_refuses_the_default_stream_and_misaligned_tensors(trt, tmp_path):
    path = _double(tmp_path / "d.onnx")
    with pytest.raises(BackendError, match="give the stream"):
        TensorRTSegmentBackend(device_io=True).load(path)
    run = TensorRTSegmentBackend(device_io=True, stream=lambda: 0).load(path).bind(
        {"x": _aligned(1, 4)}, {"y": _aligned(1, 4)})
    with pytest.raises(BackendError, match="legacy default stream"):
        run()
    runner = TensorRTSegmentBackend(device_io=True, stream=lambda: 5).load(path)
    off = _aligned(1, 8)[:, 1:5]
    with pytest.raises(BackendError, match=r"tensor 'x' at 0x[0-9a-f]+ is not 256-byte aligned"):
        runner.bind({"x": off}, {"y": _aligned(1, 4)})


class _Refusing:
    """An execution context whose every call fails (as TensorRT's do, returning False)."""

    def __init__(self, fail: str):
        self.fail = fail

    def set_input_shape(self, name, shape):
        return self.fail != "shape"

    def set_tensor_address(self, name, address):
        return self.fail != "address"

    def execute_async_v3(self, stream):
        return self.fail != "execute"


@pytest.mark.parametrize("fail, message", [("shape", "rejected shape \\(1, 4\\) for input 'x'"),
                                           ("address", "rejected the address 0x[0-9a-f]+ of tensor '[xy]'"),
                                           ("execute", "execution of seg failed \\(outputs y\\)")])
def test_every_refused_call_is_a_one_line_error_naming_the_tensor(fail, message):
    engine = types.SimpleNamespace(num_io_tensors=2, get_tensor_name=lambda i: "xy"[i],
                                   create_execution_context=lambda: _Refusing(fail))
    run = TensorRTDeviceRunner(engine, lambda: 9, "seg").bind({"x": _aligned(1, 4)}, {"y": _aligned(1, 4)})
    with pytest.raises(BackendError, match=message) as info:
        run()
    assert "\n" not in str(info.value)


def test_engine_cache_path_depends_on_every_build_setting(tmp_path):
    onnx_path = tmp_path / "segment_0.onnx"
    a = TensorRTSegmentBackend(precision="fp16", cache_key="k1", engine_dir=str(tmp_path / "engines"))
    path = a.engine_path(onnx_path, b"graph", "10.6")
    assert path.parent == tmp_path / "engines" and path.name.startswith("segment_0.") and path.suffix == ".engine"
    assert path == a.engine_path(onnx_path, b"graph", "10.6")
    others = {TensorRTSegmentBackend(precision="fp16", cache_key="k2").engine_path(onnx_path, b"graph", "10.6").name,
              a.engine_path(onnx_path, b"graph", "10.7").name, a.engine_path(onnx_path, b"graph2", "10.6").name,
              TensorRTSegmentBackend(precision="fp32", cache_key="k1").engine_path(onnx_path, b"graph", "10.6").name,
              TensorRTSegmentBackend(precision="fp16", cache_key="k1", opt_batch=2).engine_path(
                  onnx_path, b"graph", "10.6").name}
    assert path.name not in others and len(others) == 5


def test_a_link_planted_at_the_engines_temporary_is_not_written_through(trt, pycuda, tmp_path):
    """The engine was written to ``.NAME.partial`` through Path.write_bytes: a link planted there (another user of
    a shared engine folder) had its target overwritten with the engine."""
    import os

    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    engines = tmp_path / "engines"
    engines.mkdir()
    backend = TensorRTSegmentBackend(engine_dir=str(engines))
    onnx_path = _double(tmp_path / "d.onnx")
    final = backend.engine_path(onnx_path, open(onnx_path, "rb").read(), trt.__version__)
    for name in (f".{final.name}.partial", f".{final.name}.vsr-partial-{os.getpid()}"):  # the old name, and this one
        (engines / name).symlink_to(victim)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True).stdout
    left = engines / f".{final.name}.vsr-partial-{int(dead)}"  # what a run killed outright left
    older = engines / f".{final.name}.{int(dead)}.partial"  # what an older vsr's left (its name then)
    for p in (left, older):
        p.write_bytes(b"half an engine")
        os.utime(p, (1, 1))
    backend.load(onnx_path)
    assert not left.exists() and not older.exists()
    assert victim.read_text() == "keep me\n"
    assert final.is_file() and not final.is_symlink() and final.stat().st_size > 0


def _load(backend, onnx_path):
    import warnings

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        backend.load(onnx_path)
    return [str(w.message) for w in seen]


@pytest.mark.parametrize("damage", ["garbage", "cut", "mode 666"])
def test_a_damaged_or_shared_cached_engine_is_built_again_with_one_warning(trt, pycuda, tmp_path, damage):
    """A damaged engine file was one error (could not deserialise) on every run until the user found and removed
    it; one others could write was deserialised as it was (an engine is code: plugins' host code)."""
    import os

    engines = tmp_path / "engines"
    backend = TensorRTSegmentBackend(engine_dir=str(engines))
    onnx_path = _double(tmp_path / "d.onnx")
    assert _load(backend, onnx_path) == [] and len(trt._builds) == 1
    final = backend.engine_path(onnx_path, open(onnx_path, "rb").read(), trt.__version__)
    assert engines.stat().st_mode & 0o777 == 0o700 and not final.stat().st_mode & 0o022
    data = final.read_bytes()
    if damage == "mode 666":
        final.chmod(0o666)
    else:
        final.write_bytes(b"\x00" * 64 if damage == "garbage" else data[:8])
    said = _load(backend, onnx_path)
    assert len(said) == 1 and "building it again" in said[0] and len(trt._builds) == 2
    assert final.read_bytes() == data and not final.stat().st_mode & 0o022
    assert _load(backend, onnx_path) == [] and len(trt._builds) == 2  # used from then on
    assert not [p for p in os.listdir(engines) if "partial" in p]


def test_an_engine_folder_others_can_write_is_refused_in_one_line(trt, pycuda, tmp_path):
    from vsr.errors import InputError

    engines = tmp_path / "engines"
    engines.mkdir()
    engines.chmod(0o777)
    onnx_path = _double(tmp_path / "d.onnx")
    with pytest.raises(InputError, match=r"will not keep TensorRT engines in .*engines: other users can write to "
                                         r"it \(mode 777\); an engine loaded from there would run as you"):
        TensorRTSegmentBackend(engine_dir=str(engines)).load(onnx_path)
    assert trt._builds == []


def test_building_an_engine_removes_the_engines_no_run_used_for_a_week(trt, pycuda, tmp_path):
    """The engines of a shared ``engine_dir`` (the CUDA runtime's ``<engine dir>/cuda/<device>-<key>``) were
    never removed: each plan or TensorRT change left the earlier ones (tens of MB each) for good.  Building one
    now removes those no run used for UNUSED_DAYS; a run marks the engine it loads, so that one is kept."""
    import os
    import time

    engines = tmp_path / "engines"
    backend = TensorRTSegmentBackend(engine_dir=str(engines))

    def build(name: str, dims):
        onnx_path = _double(tmp_path / name, dims)
        backend.load(onnx_path)
        return backend.engine_path(onnx_path, open(onnx_path, "rb").read(), trt.__version__)

    def aged(path, days):
        t = time.time() - days * 86400
        os.utime(path, (t, t), follow_symlinks=False)

    old, recent, used = build("a.onnx", ("N", 4)), build("b.onnx", ("N", 5)), build("c.onnx", ("N", 6))
    other = engines / "notes.engine"
    other.write_bytes(b"mine")
    (engines / "l.0123456789abcdef.engine").symlink_to(other)
    for p, days in ((old, 8), (recent, 6), (used, 8), (other, 8), (engines / "l.0123456789abcdef.engine", 8)):
        aged(p, days)
    backend.load(str(tmp_path / "c.onnx"))  # cached: loaded, not built, and marked used
    assert len(trt._builds) == 3 and time.time() - used.stat().st_mtime < 60
    new = build("d.onnx", ("N", 7))
    assert len(trt._builds) == 4 and not old.exists()
    assert sorted(os.listdir(engines)) == sorted([p.name for p in (recent, used, new, other)] +
                                                 ["l.0123456789abcdef.engine"])  # (a link: never removed)
