"""TensorRT engines as the segment backend of a plan (TensorRT 10.x and 11.x Python API; optional dependency).

Build is separate from inference: :meth:`TensorRTSegmentBackend.load` builds an engine from a segment's ONNX or
deserialises the engine file cached beside it, and creates an execution context.

* **Strongly typed networks** on 10 and 11 (11 has no other kind: its ``BuilderFlag`` lost ``FP16``/``INT8``): an
  engine's precision is its ONNX file's.  fp16 engines come from vsr's fp16 export (:mod:`vsr.export.fp16`, TSA's
  correlation kept fp32 by name), int8 engines from the Q/DQ export (:mod:`vsr.quant.qdq`), fp32 from the plain
  one; a segment whose types contradict the asked precision is refused before the build.
* **Float inputs only**: a segment that takes an int64 tensor would make TensorRT take it as a shape tensor,
  whose values no profile here sets; vsr's exports fold those values per bucket (:mod:`vsr.export.fold`).
* **Profiles scaled by frames per item**: a segment input's first dimension is an expression of the batch ``N``
  (``3*N`` for EDVR-tiny's per-frame features, ``N`` after the fusion); the profile spans ``N = 1 ..
  max_batch``, optimised at ``opt_batch`` (the planned batch).
* **Every call checked**: ``set_input_shape``, ``set_tensor_address`` and ``execute_async_v3`` return False on a
  refusal (TensorRT logs why); each becomes a one-line :class:`~vsr.errors.BackendError` naming the tensor.
  Addresses must be 256-byte aligned (the plan's arena is, :mod:`vsr.plan.arena`).

With ``device_io`` (the CUDA runtime, ``vsr.backends.cuda.engines``) the plan's arena is device memory and the
bridges are CUDA kernels: ``bind`` takes device tensors (anything with ``data_ptr()`` and ``shape``), points the
engine's I/O at them and runs on ``stream()`` -- the runtime's own stream, shared with its bridge kernels; the
legacy default stream (0) is refused.  Without it (CPU bridges) each run copies through pycuda device buffers.

Engines are cached beside the segment's ONNX, or in ``engine_dir``; the file name hashes the ONNX, the build
settings, TensorRT's version and ``cache_key`` (the device and software stack, ``vsr.backends.cuda.keys``).
Building one removes the engines of its folder that no run used for :data:`vsr.unused.UNUSED_DAYS` (a run marks
the engine it loads); those beside the segment also go with their plan folder (:class:`vsr.plan.plan.PlanCache`).

TensorRT cannot be installed on the development machine: ``tests/plan/trt_standin.py`` is a stand-in module
that refuses every name the real 11.x bindings lack (their wheel's string table), on which the build and the
binding logic run; ``tests/plan/test_tensorrt_contract.py`` checks every ``trt.`` name used here against the
real 10.x and 11.x bindings.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from vsr.errors import BackendError
from vsr.files import private_folder, untrusted, write_new
from vsr.plan.partition import eval_dim
from vsr.leftovers import PARTIAL, remove_old_partials, remove_partials
from vsr.unused import UNUSED_DAYS, mark_used, remove_unused

log = logging.getLogger(__name__)

SUPPORTED_MAJORS = (10, 11)
PRECISIONS = ("fp32", "fp16", "int8")
ENGINE_FORMAT = 2  # 2: strongly typed, profiles over N scaled by frames per item (1: FP16 flag, batch 1..8)
ALIGNMENT = 256  # bytes: what set_tensor_address requires
_FLOAT_INPUTS = ("float32", "float16")
_ENGINE = re.compile(r".+\.[0-9a-f]{16}\.engine")  # an engine's name (TensorRTSegmentBackend.engine_path)


def _import(need_pycuda: bool = True):
    try:
        import tensorrt as trt

        if need_pycuda:
            import pycuda.autoinit  # noqa: F401  (creates the CUDA context)
            import pycuda.driver as cuda
        else:
            cuda = None
    except ImportError as e:
        raise BackendError(f"TensorRT segment backend needs tensorrt{' and pycuda' * need_pycuda} ({e})") from None
    major = int(str(trt.__version__).split(".")[0])
    if major not in SUPPORTED_MAJORS:
        raise BackendError(f"TensorRT {trt.__version__}: vsr supports {' and '.join(map(str, SUPPORTED_MAJORS))}.x")
    return trt, cuda


@dataclass(frozen=True)
class SegmentInput:
    """A segment's declared input: its name, dimensions (ints, or expressions of ``N``) and numpy dtype."""

    name: str
    dims: tuple
    dtype: str


def segment_inputs(onnx_bytes: bytes) -> list[SegmentInput]:
    """The graph inputs of a segment's ONNX (initializers excluded), as the partition wrote them."""
    import onnx
    from onnx import helper

    model = onnx.load_model_from_string(onnx_bytes)
    inits = {t.name for t in model.graph.initializer}
    out = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        t = vi.type.tensor_type
        dims = tuple(d.dim_param if d.HasField("dim_param") else int(d.dim_value) for d in t.shape.dim)
        out.append(SegmentInput(vi.name, dims, np.dtype(helper.tensor_dtype_to_np_dtype(t.elem_type)).name))
    return out


def profile_shapes(inputs: list[SegmentInput], opt_batch: int, max_batch: int, where: str = "segment"
                   ) -> dict[str, tuple[tuple, tuple, tuple]]:
    """``{input: (min, opt, max)}`` for the inputs whose first dimension depends on ``N``: ``N = 1``,
    ``opt_batch`` and ``max_batch`` items.  BackendError for a non-float input or any other dynamic dimension."""
    if not 1 <= opt_batch <= max_batch:
        raise BackendError(f"TensorRT profile: need 1 <= opt_batch ({opt_batch}) <= max_batch ({max_batch})")
    shapes = {}
    for inp in inputs:
        if inp.dtype not in _FLOAT_INPUTS:
            raise BackendError(f"{where}: input {inp.name!r} is {inp.dtype}; TensorRT segments take float tensors "
                               "only (an int64 input is a shape tensor: export with vsr, which folds them)")
        if any(isinstance(d, str) for d in inp.dims[1:]):
            raise BackendError(f"{where}: input {inp.name!r} has dynamic dimensions besides the batch: {inp.dims}")
        if inp.dims and isinstance(inp.dims[0], str):
            shapes[inp.name] = tuple(tuple(eval_dim(d, {"N": n}) for d in inp.dims)
                                     for n in (1, opt_batch, max_batch))
    return shapes


def check_precision(onnx_bytes: bytes, precision: str, where: str = "segment") -> None:
    """A strongly typed engine has its ONNX's types: refuse a segment that is not in ``precision`` (an int8
    plan's segment may be all fp32: the convs of lowest SQNR stay fp32, ``vsr.quant``)."""
    import onnx

    if precision not in PRECISIONS:
        raise BackendError(f"TensorRT precision {precision!r}: choose from {', '.join(PRECISIONS)}")
    model = onnx.load_model_from_string(onnx_bytes)
    half = any(t.data_type == onnx.TensorProto.FLOAT16 for t in model.graph.initializer) or any(
        n.op_type == "Cast" and any(a.name == "to" and a.i == onnx.TensorProto.FLOAT16 for a in n.attribute)
        for n in model.graph.node)
    qdq = any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in model.graph.node)
    if precision == "fp16" and not half:
        raise BackendError(f"{where} is fp32: fp16 engines are built from vsr's fp16 export (strongly typed "
                           "networks take their precision from the ONNX)")
    if precision == "int8" and half:  # a segment of the Q/DQ export may have no Q/DQ (its convs kept fp32)
        raise BackendError(f"{where} is fp16: int8 engines are built from the Q/DQ export of the fp32 model")
    if precision == "fp32" and (half or qdq):
        raise BackendError(f"{where} is not fp32 ({'fp16' if half else 'Q/DQ'} nodes): ask for that precision")


@dataclass(frozen=True)
class TensorRTSegmentBackend:
    """precision: fp32 | fp16 | int8 (the segments' own, see the module's docstring); opt_batch / max_batch: the
    profile's optimum and largest N (items, not frames); workspace_mib: builder scratch; device_io / stream /
    device: see the module's docstring; engine_dir, cache_key: the engine cache."""

    precision: str = "fp32"
    max_batch: int = 8
    opt_batch: int = 1
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
        settings = (f"{ENGINE_FORMAT}/{self.precision}/{self.opt_batch}/{self.max_batch}/{trt_version}/"
                    f"{self.cache_key}").encode()
        tag = hashlib.sha256(onnx_bytes + settings).hexdigest()[:16]
        folder = Path(self.engine_dir) if self.engine_dir else Path(path).parent
        return folder / f"{Path(path).stem}.{tag}.engine"

    def load(self, path: Path) -> "TensorRTSegmentRunner | TensorRTDeviceRunner":
        trt, cuda = _import(need_pycuda=not self.device_io)
        logger = trt.Logger(trt.Logger.WARNING)
        onnx_bytes = Path(path).read_bytes()
        engine_path = self.engine_path(Path(path), onnx_bytes, trt.__version__)
        # an engine is code (it can carry plugins' host code): read back only from a folder of the user's alone
        private_folder(engine_path.parent, "TensorRT engines", "an engine loaded from there would run as you")
        runtime = trt.Runtime(logger)
        mark_used(engine_path)  # first: a run that removes engines meanwhile sees this one used
        engine = self._cached(runtime, engine_path)
        if engine is None:
            engine_bytes = self._build(trt, logger, onnx_bytes, path)
            # (created by vsr: a link planted at the name is replaced, never written through; never group-writable,
            # or it would not be trusted)
            remove_partials(engine_path)  # (what runs killed outright left)
            remove_old_partials(engine_path, ".partial", unnumbered="")  # (older vsr's: .E.PID.partial, .E.partial)
            tmp = engine_path.with_name(f".{engine_path.name}{PARTIAL}{os.getpid()}")
            write_new(tmp, engine_bytes, 0o644)
            tmp.replace(engine_path)
            # each key change (a plan, TensorRT, the driver) left the earlier engines, tens of MB each, for good
            remove_unused(engine_path.parent, _ENGINE.fullmatch, UNUSED_DAYS, keep=engine_path.name)
            engine = runtime.deserialize_cuda_engine(engine_bytes)
        if engine is None:
            raise BackendError(f"TensorRT could not deserialise the engine of {path}")
        if self.device_io:
            return TensorRTDeviceRunner(engine, self.stream, Path(path).stem)
        return TensorRTSegmentRunner(engine, cuda, self.max_batch)

    @staticmethod
    def _cached(runtime, engine_path: Path):
        """The engine cached at ``engine_path``, or None: none there, or one that is not the user's alone or
        cannot be deserialised (damaged, cut short), which is built again after one warning line."""
        if not os.path.lexists(engine_path):
            return None
        why = untrusted(engine_path) or (None if engine_path.is_file() else "not a file")
        engine = None
        if why is None:
            try:
                engine = runtime.deserialize_cuda_engine(engine_path.read_bytes())
            except Exception as e:  # TensorRT's own errors: the engine is damaged
                log.info("TensorRT: %s", e)
            if engine is None:
                why = "cannot be deserialised (damaged or cut short)"
        else:
            why = f"is not yours alone ({why})"
        if engine is None:
            warnings.warn(f"the cached TensorRT engine {engine_path} {why}; building it again", stacklevel=3)
        return engine

    def _build(self, trt, logger, onnx_bytes: bytes, path: Path) -> bytes:
        where = Path(path).name
        check_precision(onnx_bytes, self.precision, where)
        shapes = profile_shapes(segment_inputs(onnx_bytes), self.opt_batch, self.max_batch, where)
        builder = trt.Builder(logger)
        network = builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED))
        parser = trt.OnnxParser(network, logger)
        if not parser.parse(onnx_bytes):
            errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
            raise BackendError(f"TensorRT cannot parse {where}: {errors[:300]}")
        config = builder.create_builder_config()
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, self.workspace_mib << 20)
        profile = builder.create_optimization_profile()
        for i in range(network.num_inputs):
            name = network.get_input(i).name
            if name in shapes:
                profile.set_shape(name, *shapes[name])
        if config.add_optimization_profile(profile) < 0:
            raise BackendError(f"TensorRT refused the optimisation profile of {where}: {shapes}")
        engine = builder.build_serialized_network(network, config)
        if engine is None:
            raise BackendError(f"TensorRT failed to build an engine for {where} (its log says why)")
        return bytes(engine)


def _set_shape(ctx, name: str, shape: tuple) -> None:
    if not ctx.set_input_shape(name, shape):
        raise BackendError(f"TensorRT rejected shape {shape} for input {name!r} (outside the engine's profile)")


def _set_address(ctx, name: str, address: int) -> None:
    if address % ALIGNMENT:
        raise BackendError(f"TensorRT tensor {name!r} at {address:#x} is not {ALIGNMENT}-byte aligned")
    if not ctx.set_tensor_address(name, address):
        raise BackendError(f"TensorRT rejected the address {address:#x} of tensor {name!r}")


def _check_names(names: list[str], bound) -> None:
    for name in bound:
        if name not in names:
            raise BackendError(f"TensorRT engine has no I/O tensor {name!r} (has {names})")


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
        _check_names(self.names, {**inputs, **outputs})
        for name, arr in {**inputs, **outputs}.items():
            self._device_buffer(name, arr)
        cuda, ctx, stream, device = self.cuda, self.context, self.stream, self._device

        def run() -> None:
            # shapes and addresses are the context's state: set them for this binding on every run, as another
            # binding (another batch size) may have run on the same context since
            for name, arr in inputs.items():
                _set_shape(ctx, name, tuple(arr.shape))
            for name in (*inputs, *outputs):
                _set_address(ctx, name, int(device[name][0]))
            for name, arr in inputs.items():
                cuda.memcpy_htod_async(device[name][0], arr, stream)
            if not ctx.execute_async_v3(stream.handle):
                raise BackendError(f"TensorRT execution failed (inputs {', '.join(inputs)})")
            for name, arr in outputs.items():
                cuda.memcpy_dtoh_async(arr, device[name][0], stream)
            stream.synchronize()

        return run


class TensorRTDeviceRunner:
    """One engine whose I/O are the caller's device tensors; ``stream()`` gives the stream to run on."""

    def __init__(self, engine, stream: Callable[[], int] | None, label: str = "segment"):
        if stream is None:
            raise BackendError("TensorRT device runner: give the stream to run on (the runtime's own, not 0)")
        self.engine = engine
        self.stream = stream
        self.label = label
        self.context = engine.create_execution_context()
        self.names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]

    def bind(self, inputs: dict, outputs: dict) -> Callable[[], None]:
        _check_names(self.names, {**inputs, **outputs})
        ctx, stream, label = self.context, self.stream, self.label
        shapes = {name: tuple(int(d) for d in t.shape) for name, t in inputs.items()}
        addresses = {name: int(t.data_ptr()) for name, t in {**inputs, **outputs}.items()}
        for name, address in addresses.items():
            if address % ALIGNMENT:
                raise BackendError(f"TensorRT tensor {name!r} at {address:#x} is not {ALIGNMENT}-byte aligned")

        def run() -> None:
            # the context is shared by every binding (batch size): set its shapes and addresses on each run
            for name, shape in shapes.items():
                _set_shape(ctx, name, shape)
            for name, address in addresses.items():
                _set_address(ctx, name, address)
            handle = int(stream())
            if handle == 0:
                raise BackendError(f"TensorRT {label}: refusing the legacy default stream (0): run on the "
                                   "runtime's own stream")
            if not ctx.execute_async_v3(handle):
                raise BackendError(f"TensorRT execution of {label} failed (outputs {', '.join(outputs)})")

        return run
