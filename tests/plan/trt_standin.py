"""A stand-in for the ``tensorrt`` module (TensorRT cannot be installed on the development machine or in CI).

As strict as the real bindings where vsr meets them:

* **names**: every public attribute of the module and of every object it hands out is checked against the names
  of the real bindings of the emulated version (:mod:`tests.plan.trt_names`, read from the wheel's string table;
  where that wheel is not cached, the stand-in's own names less those the tables showed gone in 11.x:
  ``BuilderFlag.FP16``, ``NetworkDefinitionCreationFlag.EXPLICIT_BATCH``).  A missing name is an AttributeError,
  as on the real module;
* **build**: ``build_serialized_network`` returns None (TensorRT logs why; here into ``trt._log``) for a dynamic
  input without a profile, a profile whose shapes are not min <= opt <= max, an int32/int64 input (a shape tensor)
  without ``set_shape_input`` values, or the FP16 flag on a strongly typed network (10.x refuses it);
* **run**: ``set_input_shape`` returns False outside the profile, ``set_tensor_address`` for an address that is
  not 256-byte aligned, ``execute_async_v3`` while an input shape or an address is unset.

The engine runs its ONNX on ONNX Runtime, reading and writing the host memory at the addresses it was given:
with CPU tensors (the CUDA runtime's emulation, ``CudaOptions(device="cpu")``) the whole TensorRT path computes
for real.  Use as ``sys.modules["tensorrt"] = TensorRTStandIn("11.4.0.106")`` (``monkeypatch.setitem``).
"""

from __future__ import annotations

import ctypes
import importlib.machinery
import json

import numpy as np

from tests.plan.trt_names import binding_names

GONE_IN_11 = frozenset({"FP16", "EXPLICIT_BATCH"})  # seen absent from the 11.4 bindings' string table
_FLOAT_TYPES = ("float32", "float16")
_MAGIC = b"vsr-trt-standin\n"


class _Strict:
    """Refuses any public attribute the real bindings of ``self._trt`` do not define."""

    _trt: "TensorRTStandIn"

    def __getattribute__(self, name: str):
        if not name.startswith("_"):
            trt = object.__getattribute__(self, "_trt")
            if name not in trt._allowed:
                raise AttributeError(f"tensorrt {trt._version} has no attribute {name!r} (not in its bindings)")
        return object.__getattribute__(self, name)


class _Enum(_Strict):
    def __init__(self, trt, name: str, members: tuple[str, ...]):
        self._trt, self._name = trt, name
        for i, m in enumerate(members):
            if m in trt._allowed:
                object.__setattr__(self, m, _Value(name, m, i))


class _Value(int):
    def __new__(cls, enum: str, name: str, value: int):
        v = super().__new__(cls, value)
        v._label = f"{enum}.{name}"
        return v

    def __repr__(self) -> str:
        return self._label


class _Logger(_Strict):
    def __init__(self, trt, severity=None):
        self._trt, self._severity = trt, severity


class _LoggerClass(_Strict):
    """``trt.Logger``: callable, with the severities as attributes."""

    def __init__(self, trt):
        self._trt = trt
        for m in ("INTERNAL_ERROR", "ERROR", "WARNING", "INFO", "VERBOSE"):
            object.__setattr__(self, m, _Value("Logger.Severity", m, 0))

    def __call__(self, severity=None):
        return _Logger(self._trt, severity)


class _Tensor(_Strict):
    def __init__(self, trt, name: str, shape: tuple, dtype: str):
        self._trt, self.name, self.shape, self._dtype = trt, name, shape, dtype


class _Network(_Strict):
    def __init__(self, trt, flags: int):
        self._trt, self._flags, self._inputs, self._onnx = trt, flags, [], None

    @property
    def num_inputs(self) -> int:
        return len(self._inputs)

    def get_input(self, i: int) -> _Tensor:
        return self._inputs[i]

    def get_flag(self, flag) -> bool:
        return bool(self._flags >> int(flag) & 1)


class _Parser(_Strict):
    def __init__(self, trt, network: _Network, logger):
        self._trt, self._network, self._errors = trt, network, []

    def parse(self, model: bytes) -> bool:
        import onnx
        from onnx import helper

        try:
            proto = onnx.load_model_from_string(bytes(model))
            onnx.checker.check_model(proto)
        except Exception as e:  # the real parser reports a failure through its errors
            self._errors.append(str(e).splitlines()[0])
            return False
        inits = {t.name for t in proto.graph.initializer}
        for vi in proto.graph.input:
            if vi.name in inits:
                continue
            t = vi.type.tensor_type
            shape = tuple(-1 if d.HasField("dim_param") else int(d.dim_value) for d in t.shape.dim)
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(t.elem_type)).name
            self._network._inputs.append(_Tensor(self._trt, vi.name, shape, dtype))
        self._network._onnx = bytes(model)
        return True

    @property
    def num_errors(self) -> int:
        return len(self._errors)

    def get_error(self, i: int) -> str:
        return self._errors[i]


class _Profile(_Strict):
    def __init__(self, trt):
        self._trt, self._shapes, self._values = trt, {}, {}

    def set_shape(self, name: str, min, opt, max) -> None:
        self._shapes[name] = tuple(tuple(int(d) for d in s) for s in (min, opt, max))

    def set_shape_input(self, name: str, min, opt, max) -> None:
        self._values[name] = (tuple(min), tuple(opt), tuple(max))


class _Config(_Strict):
    def __init__(self, trt):
        self._trt, self._flags, self._pools, self._profiles = trt, set(), {}, []

    def set_memory_pool_limit(self, pool, size: int) -> None:
        self._pools[int(pool)] = int(size)

    def set_flag(self, flag) -> None:
        self._flags.add(repr(flag))

    def add_optimization_profile(self, profile: _Profile) -> int:
        for lo, opt, hi in profile._shapes.values():
            if len({len(lo), len(opt), len(hi)}) != 1 or not all(a <= b <= c for a, b, c in zip(lo, opt, hi)):
                return -1
        self._profiles.append(profile)
        return len(self._profiles) - 1


class _Builder(_Strict):
    def __init__(self, trt, logger):
        self._trt = trt

    def create_network(self, flags: int = 0) -> _Network:
        return _Network(self._trt, int(flags))

    def create_builder_config(self) -> _Config:
        return _Config(self._trt)

    def create_optimization_profile(self) -> _Profile:
        return _Profile(self._trt)

    def build_serialized_network(self, network: _Network, config: _Config):
        trt = self._trt
        error = _build_error(trt, network, config)
        if error:
            trt._log.append(error)
            return None
        profile = config._profiles[0] if config._profiles else _Profile(trt)
        header = {"profile": {k: [list(s) for s in v] for k, v in profile._shapes.items()},
                  "inputs": [[t.name, list(t.shape), t._dtype] for t in network._inputs],
                  "strongly_typed": network.get_flag(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED),
                  "flags": sorted(config._flags)}
        trt._builds.append(header)
        return _MAGIC + json.dumps(header).encode() + b"\n" + network._onnx


def _build_error(trt, network: _Network, config: _Config) -> str | None:
    profile = config._profiles[0] if config._profiles else None
    strongly = network.get_flag(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    if strongly and any(f.endswith(("FP16", "INT8", "BF16")) for f in config._flags):
        return "precision builder flags are not allowed with a strongly typed network"
    for t in network._inputs:
        if t._dtype not in _FLOAT_TYPES:
            if profile is None or t.name not in profile._values:
                return f"optimization profile is missing values for shape input {t.name}"
        elif -1 in t.shape:
            shapes = profile._shapes.get(t.name) if profile else None
            if shapes is None:
                return f"input {t.name} has dynamic dimensions but no optimization profile"
            if any(len(s) != len(t.shape) or any(d != -1 and d != v for d, v in zip(t.shape, s)) for s in shapes):
                return f"profile shapes {shapes} do not match input {t.name} {t.shape}"
    return None


class _Engine(_Strict):
    def __init__(self, trt, header: dict, onnx_bytes: bytes):
        import onnxruntime as ort

        self._trt, self._header = trt, header
        self._session = ort.InferenceSession(onnx_bytes, providers=["CPUExecutionProvider"])
        self._inputs = {name: (tuple(shape), dtype) for name, shape, dtype in header["inputs"]}
        self._outputs = [o.name for o in self._session.get_outputs()]

    @property
    def num_io_tensors(self) -> int:
        return len(self._inputs) + len(self._outputs)

    def get_tensor_name(self, i: int) -> str:
        return [*self._inputs, *self._outputs][i]

    def get_tensor_mode(self, name: str):
        return self._trt.TensorIOMode.INPUT if name in self._inputs else self._trt.TensorIOMode.OUTPUT

    def get_tensor_profile_shape(self, name: str, profile: int):
        return self._header["profile"][name]

    def create_execution_context(self) -> "_Context":
        return _Context(self._trt, self)


def _host_array(address: int, shape: tuple, dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    return np.frombuffer((ctypes.c_char * nbytes).from_address(address), dtype).reshape(shape)


class _Context(_Strict):
    def __init__(self, trt, engine: _Engine):
        self._trt, self._engine, self._shapes, self._addresses = trt, engine, {}, {}

    def set_input_shape(self, name: str, shape) -> bool:
        spec = self._engine._inputs.get(name)
        shape = tuple(int(d) for d in shape)
        if spec is None or len(shape) != len(spec[0]):
            return False
        if any(d != -1 and d != v for d, v in zip(spec[0], shape)):
            return False
        lo, _, hi = self._engine._header["profile"].get(name, (spec[0], spec[0], spec[0]))
        if not all(a <= v <= b for a, v, b in zip(lo, shape, hi)):
            return False
        self._shapes[name] = shape
        return True

    def set_tensor_address(self, name: str, address: int) -> bool:
        if name not in self._engine._inputs and name not in self._engine._outputs or int(address) % 256:
            return False
        self._addresses[name] = int(address)
        return True

    def execute_async_v3(self, stream_handle: int) -> bool:
        e = self._engine
        if set(self._shapes) != set(e._inputs) or set(self._addresses) != {*e._inputs, *e._outputs}:
            return False
        feeds = {n: _host_array(self._addresses[n], self._shapes[n], e._inputs[n][1]) for n in e._inputs}
        self._trt._streams.append(int(stream_handle))
        for name, value in zip(e._outputs, e._session.run(None, feeds)):
            np.copyto(_host_array(self._addresses[name], value.shape, value.dtype), value)
        return True


class _Runtime(_Strict):
    def __init__(self, trt, logger):
        self._trt = trt

    def deserialize_cuda_engine(self, data: bytes):
        data = bytes(data)
        if not data.startswith(_MAGIC):
            return None
        header, _, onnx_bytes = data[len(_MAGIC):].partition(b"\n")
        return _Engine(self._trt, json.loads(header), onnx_bytes)


class TensorRTStandIn(_Strict):
    """The ``tensorrt`` module of ``version`` (see the module docstring).  ``_builds``: the header of every
    engine built (profile, inputs, strongly typed, flags); ``_streams``: the stream of every execution;
    ``_log``: why builds failed."""

    def __init__(self, version: str = "11.4.0.106"):
        self._trt, self._version = self, version
        major = version.split(".")[0]
        table = binding_names(version)
        own = {"Logger", "Runtime", "Builder", "OnnxParser", "BuilderFlag", "NetworkDefinitionCreationFlag",
               "MemoryPoolType", "TensorIOMode", "__version__", "WARNING", "INFO", "ERROR", "VERBOSE",
               "INTERNAL_ERROR", "FP16", "BF16", "TF32", "INT8", "STRONGLY_TYPED", "EXPLICIT_BATCH", "WORKSPACE",
               "INPUT", "OUTPUT", "NONE", "name", "shape", "num_inputs", "get_input", "get_flag", "parse",
               "num_errors", "get_error", "set_shape", "set_shape_input", "set_memory_pool_limit", "set_flag",
               "add_optimization_profile", "create_network", "create_builder_config",
               "create_optimization_profile", "build_serialized_network", "num_io_tensors", "get_tensor_name",
               "get_tensor_mode", "get_tensor_profile_shape", "create_execution_context", "set_input_shape",
               "set_tensor_address", "execute_async_v3", "deserialize_cuda_engine"}
        self._from_wheel = table is not None
        self._allowed = table if table is not None else frozenset(own - (GONE_IN_11 if major == "11" else set()))
        self._builds, self._streams, self._log = [], [], []
        self.__spec__ = importlib.machinery.ModuleSpec("tensorrt", None)  # importlib.util.find_spec finds it
        self.__version__ = version
        self.Logger = _LoggerClass(self)
        self.BuilderFlag = _Enum(self, "BuilderFlag", ("FP16", "BF16", "INT8", "TF32"))
        self.NetworkDefinitionCreationFlag = _Enum(self, "NetworkDefinitionCreationFlag",
                                                   ("EXPLICIT_BATCH", "STRONGLY_TYPED"))
        self.MemoryPoolType = _Enum(self, "MemoryPoolType", ("WORKSPACE",))
        self.TensorIOMode = _Enum(self, "TensorIOMode", ("NONE", "INPUT", "OUTPUT"))

    def __setattr__(self, name, value):
        object.__setattr__(self, name, value)

    def Runtime(self, logger) -> _Runtime:  # noqa: N802 (the real module's class names)
        return _Runtime(self, logger)

    def Builder(self, logger) -> _Builder:  # noqa: N802
        return _Builder(self, logger)

    def OnnxParser(self, network, logger) -> _Parser:  # noqa: N802
        return _Parser(self, network, logger)
