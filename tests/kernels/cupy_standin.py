"""A stand-in for the ``cupy`` module on a machine with several GPUs (no GPU here, nor in CI); it says so in its
``__file__`` and in every error it raises.

It has the calls vsr's cupy launcher makes and is as strict as a real multi-GPU process where they meet:

* a current device per process (``cuda.runtime.getDevice``), changed by ``with cuda.Device(d):`` and put back
  after; a device the machine does not have is cudaErrorInvalidDevice, as on the real runtime;
* ``RawModule.get_function`` loads the module on the device current at that moment (cupy keeps one per device)
  and returns a handle of that device; calling a handle while another device is current raises, as the driver
  does (CUDA_ERROR_INVALID_HANDLE: a function belongs to the context it was loaded in);
* ``cuda.ExternalStream(ptr, device_id)`` entered while another device is current raises (the stricter choice:
  work queued on a stream of another device is never what vsr means);
* ``asarray`` / ``empty`` record the device they allocate on;
* ``compile_error``: the text every ``get_function`` fails with, as cupy's CompileException (NVRTC's log).

Every launch is recorded as ``(kernel, device, stream)`` in ``launches``; ``compiled`` lists the devices the module
was loaded on, ``modules`` every RawModule made.
Use as ``monkeypatch.setitem(sys.modules, "cupy", CupyStandIn(devices=2))``.
"""

from __future__ import annotations

import importlib.machinery
import types

import numpy as np

TAG = "cupy stand-in of tests/kernels/cupy_standin.py"


class StandInError(RuntimeError):
    """What the real cupy raises as CUDARuntimeError / CUDADriverError; the message names the stand-in."""


class CompileException(Exception):
    """cupy's compile error: NVRTC's log as its text."""


class CupyStandIn(types.ModuleType):
    def __init__(self, devices: int = 2, compile_error: str | None = None):
        super().__init__("cupy")
        self.__file__ = f"<{TAG}>"
        self.__spec__ = importlib.machinery.ModuleSpec("cupy", None)
        self.count = devices
        self.current = 0
        self.launches: list[tuple[str, int, int | None]] = []
        self.compiled: list[int] = []
        self.allocations: list[int] = []
        self.modules: list[_RawModule] = []
        self.compile_error = compile_error
        self._stream: list[_ExternalStream] = []
        cupy = self
        self.cuda = types.SimpleNamespace(
            Device=lambda d=None: _Device(cupy, cupy.current if d is None else d),
            ExternalStream=lambda ptr, device_id=-1: _ExternalStream(cupy, ptr, device_id),
            runtime=types.SimpleNamespace(getDevice=lambda: cupy.current, setDevice=self._set,
                                          getDeviceCount=lambda: cupy.count),
            get_cuda_path=lambda: None)
        self.RawModule = lambda code, options=(): _RawModule(cupy, code, options)

    def _set(self, d: int) -> None:
        if not 0 <= int(d) < self.count:
            raise StandInError(f"cudaErrorInvalidDevice: invalid device ordinal {d} ({TAG}: {self.count} GPUs)")
        self.current = int(d)

    def stream_now(self) -> int | None:
        return self._stream[-1].ptr if self._stream else None

    def asarray(self, a):
        self.allocations.append(self.current)
        return np.array(a)

    def empty(self, shape, dtype):
        self.allocations.append(self.current)
        return np.empty(shape, dtype)

    @staticmethod
    def asnumpy(a):
        return np.asarray(a)


class _Device:
    def __init__(self, cupy: CupyStandIn, d: int):
        self._cupy, self.id, self._saved = cupy, int(d), []

    def __enter__(self):
        self._saved.append(self._cupy.current)
        self._cupy._set(self.id)
        return self

    def __exit__(self, *exc):
        self._cupy.current = self._saved.pop()


class _ExternalStream:
    def __init__(self, cupy: CupyStandIn, ptr: int, device_id: int):
        self._cupy, self.ptr, self.device_id = cupy, int(ptr), int(device_id)

    def __enter__(self):
        if self.device_id != -1 and self.device_id != self._cupy.current:
            raise StandInError(f"stream of device {self.device_id} entered while device {self._cupy.current} is "
                               f"current ({TAG})")
        self._cupy._stream.append(self)
        return self

    def __exit__(self, *exc):
        self._cupy._stream.pop()


class _RawModule:
    def __init__(self, cupy: CupyStandIn, code: str, options):
        self._cupy, self.code, self.options, self._loaded = cupy, code, tuple(options), set()
        cupy.modules.append(self)

    def get_function(self, name: str) -> "_Function":
        device = self._cupy.current
        if self._cupy.compile_error:
            raise CompileException(self._cupy.compile_error)
        if device not in self._loaded:  # cupy loads (and compiles for) the module once per device
            self._loaded.add(device)
            self._cupy.compiled.append(device)
        return _Function(self._cupy, name, device)


class _Function:
    def __init__(self, cupy: CupyStandIn, name: str, device: int):
        self._cupy, self.name, self.device = cupy, name, device

    def __call__(self, grid, block, args) -> None:
        if self._cupy.current != self.device:
            raise StandInError(f"CUDA_ERROR_INVALID_HANDLE: {self.name} was loaded on device {self.device}, launched "
                               f"while device {self._cupy.current} is current ({TAG})")
        if len(grid) != 3 or len(block) != 3 or not isinstance(args, tuple):
            raise StandInError(f"{self.name}: grid and block are 3-tuples, args a tuple ({TAG})")
        self._cupy.launches.append((self.name, self.device, self._cupy.stream_now()))
