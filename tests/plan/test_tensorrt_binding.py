"""TensorRT runner binding: each run sets its own input shapes and tensor addresses on the shared context.

TensorRT and pycuda cannot be installed on the development machine, so the engine, its execution context and
pycuda's driver are stand-ins here (``FakeEngine``, ``FakeContext``, ``FakeCuda``) that keep what TensorRT keeps:
the context's input shapes and tensor addresses are state set by the caller and read by ``execute_async_v3``.
The stand-in engine doubles its input.  The real engines are tested in test_tensorrt.py where TensorRT exists.
"""

from __future__ import annotations

import numpy as np
import pytest

from vsr.errors import BackendError
from vsr.plan.tensorrt import TensorRTSegmentRunner


class FakeCuda:
    """pycuda.driver's calls the runner makes; device memory is a dict of byte arrays keyed by address."""

    def __init__(self):
        self.memory: dict[int, np.ndarray] = {}

    class Stream:
        handle = 7

        def synchronize(self):
            pass

    def mem_alloc(self, nbytes: int) -> int:
        addr = 0x1000 * (len(self.memory) + 1)
        self.memory[addr] = np.zeros(nbytes, np.uint8)
        return addr

    def memcpy_htod_async(self, addr, arr, stream):
        raw = arr.reshape(-1).view(np.uint8)
        self.memory[addr][:raw.size] = raw

    def memcpy_dtoh_async(self, arr, addr, stream):
        raw = arr.reshape(-1).view(np.uint8)
        raw[:] = self.memory[addr][:raw.size]


class FakeContext:
    def __init__(self, cuda: FakeCuda):
        self.cuda = cuda
        self.shapes: dict[str, tuple] = {}
        self.addresses: dict[str, int] = {}
        self.runs: list[tuple] = []

    def set_input_shape(self, name, shape) -> bool:
        if shape[1:] != (4,):
            return False
        self.shapes[name] = tuple(shape)
        return True

    def set_tensor_address(self, name, addr) -> None:
        self.addresses[name] = addr

    def execute_async_v3(self, stream_handle) -> bool:
        shape = self.shapes["x"]
        n = int(np.prod(shape))
        x = self.cuda.memory[self.addresses["x"]][:4 * n].view(np.float32)
        self.cuda.memory[self.addresses["y"]][:4 * n] = (2 * x).view(np.uint8)
        self.runs.append(shape)
        return True


class FakeEngine:
    num_io_tensors = 2

    def __init__(self, cuda: FakeCuda):
        self.context = FakeContext(cuda)

    def get_tensor_name(self, i: int) -> str:
        return ("x", "y")[i]

    def create_execution_context(self) -> FakeContext:
        return self.context


def _buffers(n: int):
    x = np.arange(n * 4, dtype=np.float32).reshape(n, 4) + n
    return x, np.zeros_like(x)


def test_each_binding_runs_with_its_own_batch_shape_and_buffers():
    cuda = FakeCuda()
    runner = TensorRTSegmentRunner(FakeEngine(cuda), cuda, max_batch=4)
    x2, y2 = _buffers(2)
    x1, y1 = _buffers(1)
    run2 = runner.bind({"x": x2}, {"y": y2})
    run1 = runner.bind({"x": x1}, {"y": y1})  # bound last: the context must not keep its shape for run2
    run2()
    run1()
    run2()
    assert runner.context.runs == [(2, 4), (1, 4), (2, 4)]
    np.testing.assert_array_equal(y2, 2 * x2)
    np.testing.assert_array_equal(y1, 2 * x1)


def test_device_buffers_are_sized_for_the_largest_batch_once():
    cuda = FakeCuda()
    runner = TensorRTSegmentRunner(FakeEngine(cuda), cuda, max_batch=4)
    runner.bind({"x": _buffers(1)[0]}, {"y": _buffers(1)[1]})
    runner.bind({"x": _buffers(3)[0]}, {"y": _buffers(3)[1]})
    assert len(cuda.memory) == 2  # one per tensor, none reallocated for the larger batch
    assert all(buf.size == 4 * 4 * 4 for buf in cuda.memory.values())


def test_a_binding_larger_than_max_batch_grows_the_buffer_and_earlier_bindings_follow():
    cuda = FakeCuda()
    runner = TensorRTSegmentRunner(FakeEngine(cuda), cuda, max_batch=1)
    x1, y1 = _buffers(1)
    run1 = runner.bind({"x": x1}, {"y": y1})
    x5, y5 = _buffers(5)
    run5 = runner.bind({"x": x5}, {"y": y5})
    run1()
    run5()
    np.testing.assert_array_equal(y1, 2 * x1)
    np.testing.assert_array_equal(y5, 2 * x5)


def test_unknown_tensor_and_rejected_shape_are_backend_errors():
    cuda = FakeCuda()
    runner = TensorRTSegmentRunner(FakeEngine(cuda), cuda)
    with pytest.raises(BackendError, match="no I/O tensor 'z'"):
        runner.bind({"z": np.zeros((1, 4), np.float32)}, {})
    run = runner.bind({"x": np.zeros((1, 3), np.float32)}, {"y": np.zeros((1, 3), np.float32)})
    with pytest.raises(BackendError, match="rejected shape"):
        run()


class _DeviceTensor:
    """A device tensor as the device-I/O runner sees it: an address and a shape."""

    def __init__(self, address: int, shape: tuple):
        self.address, self.shape = address, shape

    def data_ptr(self) -> int:
        return self.address


class _RecordingContext(FakeContext):
    def execute_async_v3(self, stream_handle) -> bool:
        self.runs.append((dict(self.shapes), dict(self.addresses), stream_handle))
        return True


def test_device_io_points_the_engine_at_the_callers_tensors_on_the_callers_stream():
    from vsr.plan.tensorrt import TensorRTDeviceRunner

    cuda = FakeCuda()
    engine = FakeEngine(cuda)
    engine.context = _RecordingContext(cuda)
    streams = iter([11, 12])
    runner = TensorRTDeviceRunner(engine, stream=lambda: next(streams))
    run2 = runner.bind({"x": _DeviceTensor(0xA000, (2, 4))}, {"y": _DeviceTensor(0xB000, (2, 4))})
    run1 = runner.bind({"x": _DeviceTensor(0xC000, (1, 4))}, {"y": _DeviceTensor(0xD000, (1, 4))})
    run2()
    run1()
    assert engine.context.runs == [({"x": (2, 4)}, {"x": 0xA000, "y": 0xB000}, 11),
                                   ({"x": (1, 4)}, {"x": 0xC000, "y": 0xD000}, 12)]
    assert cuda.memory == {}  # nothing allocated, nothing copied
    with pytest.raises(BackendError, match="no I/O tensor 'z'"):
        runner.bind({"z": _DeviceTensor(1, (1, 4))}, {})


def test_engine_cache_path_depends_on_the_device_key_and_the_folder(tmp_path):
    from vsr.plan.tensorrt import TensorRTSegmentBackend

    onnx = tmp_path / "segment_0.onnx"
    a = TensorRTSegmentBackend(precision="fp16", cache_key="k1", engine_dir=str(tmp_path / "engines"))
    path = a.engine_path(onnx, b"graph", "10.6")
    assert path.parent == tmp_path / "engines" and path.name.startswith("segment_0.") and path.suffix == ".engine"
    assert path == a.engine_path(onnx, b"graph", "10.6")
    others = {TensorRTSegmentBackend(precision="fp16", cache_key="k2").engine_path(onnx, b"graph", "10.6").name,
              a.engine_path(onnx, b"graph", "10.7").name, a.engine_path(onnx, b"graph2", "10.6").name,
              TensorRTSegmentBackend(precision="fp32", cache_key="k1").engine_path(onnx, b"graph", "10.6").name}
    assert path.name not in others and len(others) == 4
