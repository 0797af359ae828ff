"""TensorRT engines as the segment backend of a plan (TensorRT 10/11 Python API; optional dependency).

Build is separate from inference: :meth:`TensorRTSegmentBackend.load` builds an engine from a segment's ONNX
(explicit I/O from the model, one optimisation profile over the batch dimension) or deserialises the engine file
cached beside it, and creates an execution context.  :meth:`TensorRTSegmentRunner.bind` makes sure each I/O
tensor has a device buffer large enough for the engine's largest batch; the returned ``run`` sets the context's
input shapes and tensor addresses for its own binding (the one context is shared by every bound batch size),
copies the inputs in, runs ``execute_async_v3`` and copies the outputs back into the plan's host arena (bridge
kernels are CPU kernels; device-resident bridges would make these copies unnecessary).

With ``device_io`` (the CUDA runtime, ``vsr.backends.cuda.engines``) the plan's arena is device memory and the
bridges are CUDA kernels: ``bind`` takes device tensors (anything with ``data_ptr()`` and ``shape``), points the
engine's I/O at them and runs on the caller's stream (``stream()``: a ``cudaStream_t`` as an int) -- no copies,
no synchronisation, no pycuda (the caller's CUDA context is used).

Engines are cached beside the segment's ONNX, or in ``engine_dir``; the file name hashes the ONNX, the build
settings, TensorRT's version and ``cache_key`` (the device and software stack, ``vsr.backends.cuda.keys``).

The engine tests skip when ``tensorrt`` is absent (it cannot be installed on the development machine); the
binding logic is tested against a stand-in context in ``tests/plan/test_tensorrt_binding.py``.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from vsr.errors import BackendError

log = logging.getLogger(__name__)


def _import(need_pycuda: bool = True):
    try:
        import tensorrt as trt

        if not need_pycuda:
            return trt, None
        import pycuda.autoinit  # noqa: F401  (creates the CUDA context)
        import pycuda.driver as cuda
    except ImportError as e:
        raise BackendError(f"TensorRT segment backend needs tensorrt and pycuda ({e})") from None
    return trt, cuda


@dataclass(frozen=True)
class TensorRTSegmentBackend:
    """precision: fp32 | fp16; max_batch: largest N of the batch profile; workspace_mib: builder scratch;
    device_io / stream / device: see the module's docstring; engine_dir, cache_key: the engine cache."""

    precision: str = "fp32"
    max_batch: int = 8
    workspace_mib: int = 2048
    name: str = "tensorrt"
    device: str = "cpu"  # where the bridge kernels run (CPU kernels; device buffers are copied around them)
    device_io: bool = False
    stream: Callable[[], int] | None = None
    engine_dir: str | None = None
    cache_key: str = ""

    @property
    def version(self) -> str:
        trt, _ = _import(need_pycuda=False)
        return trt.__version__

    def engine_path(self, path: Path, onnx_bytes: bytes, trt_version: str) -> Path:
        """Where the engine of the segment at ``path`` is cached (a function of everything it depends on)."""
        settings = f"{self.precision}/{self.max_batch}/{trt_version}/{self.cache_key}".encode()
        tag = hashlib.sha256(onnx_bytes + settings).hexdigest()[:16]
        folder = Path(self.engine_dir) if self.engine_dir else Path(path).parent
        return folder / f"{Path(path).stem}.{tag}.engine"

    def load(self, path: Path) -> "TensorRTSegmentRunner":
        trt, cuda = _import(need_pycuda=not self.device_io)
        logger = trt.Logger(trt.Logger.WARNING)
        onnx_bytes = Path(path).read_bytes()
        engine_path = self.engine_path(Path(path), onnx_bytes, trt.__version__)
        runtime = trt.Runtime(logger)
        if engine_path.is_file():
            engine = runtime.deserialize_cuda_engine(engine_path.read_bytes())
        else:
            engine_bytes = self._build(trt, logger, onnx_bytes, path)
            engine_path.parent.mkdir(parents=True, exist_ok=True)
            tmp = engine_path.with_name(f".{engine_path.name}.partial")
            tmp.write_bytes(engine_bytes)
            tmp.replace(engine_path)
            engine = runtime.deserialize_cuda_engine(engine_bytes)
        if engine is None:
            raise BackendError(f"TensorRT could not deserialise the engine of {path}")
        if self.device_io:
            return TensorRTDeviceRunner(engine, self.stream)
        return TensorRTSegmentRunner(engine, cuda, self.max_batch)

    def _build(self, trt, logger, onnx_bytes: bytes, path: Path) -> bytes:
        builder = trt.Builder(logger)
        network = builder.create_network(0)  # explicit batch is the only mode in TensorRT 10
        parser = trt.OnnxParser(network, logger)
        if not parser.parse(onnx_bytes):
            errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
            raise BackendError(f"TensorRT cannot parse {path}: {errors[:300]}")
        config = builder.create_builder_config()
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, self.workspace_mib << 20)
        if self.precision == "fp16":
            config.set_flag(trt.BuilderFlag.FP16)
        elif self.precision != "fp32":
            raise BackendError(f"TensorRT precision {self.precision!r}: choose fp32 or fp16")
        profile = builder.create_optimization_profile()
        for i in range(network.num_inputs):
            t = network.get_input(i)
            shape = list(t.shape)
            if any(d < 0 for d in shape[1:]):
                raise BackendError(f"{path}: input {t.name} has dynamic dimensions besides the batch: {shape}")
            if shape[0] < 0:  # the batch dimension, e.g. N or 3*N: scale the profile's batch range
                lo, hi = list(shape), list(shape)
                lo[0], hi[0] = 1, self.max_batch
                profile.set_shape(t.name, lo, lo, hi)
        config.add_optimization_profile(profile)
        engine = builder.build_serialized_network(network, config)
        if engine is None:
            raise BackendError(f"TensorRT failed to build an engine for {path}")
        return bytes(engine)


class TensorRTSegmentRunner:
    """One engine and its execution context; ``bind`` may be called for several batch sizes.

    ``cuda`` is ``pycuda.driver`` (``Stream``, ``mem_alloc``, ``memcpy_htod_async``, ``memcpy_dtoh_async``).
    """

    def __init__(self, engine, cuda, max_batch: int = 1):
        self.engine = engine
        self.cuda = cuda
        self.max_batch = max_batch
        self.context = engine.create_execution_context()
        self.names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        self.stream = cuda.Stream()
        self._device: dict[str, tuple[object, int]] = {}  # name -> (allocation, bytes)

    def _device_buffer(self, name: str, arr: np.ndarray) -> None:
        """Grow ``name``'s device buffer to hold ``arr`` at the largest batch (its first dimension scaled)."""
        rows = arr.shape[0] if arr.ndim else 1
        nbytes = max(arr.nbytes // max(rows, 1) * max(rows, self.max_batch), arr.nbytes, 1)
        have = self._device.get(name)
        if have is None or have[1] < nbytes:
            self._device[name] = (self.cuda.mem_alloc(nbytes), nbytes)

    def bind(self, inputs: dict[str, np.ndarray], outputs: dict[str, np.ndarray]) -> Callable[[], None]:
        for name, arr in {**inputs, **outputs}.items():
            if name not in self.names:
                raise BackendError(f"TensorRT engine has no I/O tensor {name!r} (has {self.names})")
            self._device_buffer(name, arr)
        cuda, ctx, stream, device = self.cuda, self.context, self.stream, self._device

        def run() -> None:
            # shapes and addresses are the context's state: set them for this binding on every run, as another
            # binding (another batch size) may have run on the same context since
            for name, arr in inputs.items():
                if not ctx.set_input_shape(name, tuple(arr.shape)):
                    raise BackendError(f"TensorRT rejected shape {tuple(arr.shape)} for input {name!r}")
            for name in (*inputs, *outputs):
                ctx.set_tensor_address(name, int(device[name][0]))
            for name, arr in inputs.items():
                cuda.memcpy_htod_async(device[name][0], arr, stream)
            if not ctx.execute_async_v3(stream.handle):
                raise BackendError("TensorRT execution failed")
            for name, arr in outputs.items():
                cuda.memcpy_dtoh_async(arr, device[name][0], stream)
            stream.synchronize()

        return run


class TensorRTDeviceRunner:
    """One engine whose I/O are the caller's device tensors; ``stream()`` gives the stream to run on."""

    def __init__(self, engine, stream: Callable[[], int] | None):
        self.engine = engine
        self.stream = stream or (lambda: 0)
        self.context = engine.create_execution_context()
        self.names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]

    def bind(self, inputs: dict, outputs: dict) -> Callable[[], None]:
        for name in (*inputs, *outputs):
            if name not in self.names:
                raise BackendError(f"TensorRT engine has no I/O tensor {name!r} (has {self.names})")
        ctx, stream = self.context, self.stream
        shapes = {name: tuple(int(d) for d in t.shape) for name, t in inputs.items()}
        addresses = {name: int(t.data_ptr()) for name, t in {**inputs, **outputs}.items()}

        def run() -> None:
            # the context is shared by every binding (batch size): set its shapes and addresses on each run
            for name, shape in shapes.items():
                if not ctx.set_input_shape(name, shape):
                    raise BackendError(f"TensorRT rejected shape {shape} for input {name!r}")
            for name, address in addresses.items():
                ctx.set_tensor_address(name, address)
            if not ctx.execute_async_v3(stream()):
                raise BackendError("TensorRT execution failed")

        return run
