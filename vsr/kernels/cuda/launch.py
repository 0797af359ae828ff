"""Three launchers for one set of CUDA sources, chosen by what is importable.

* ``pycuda``: ``pycuda.compiler.SourceModule`` (nvcc at run time) on the device's primary context;
* ``cupy``: NVRTC through ``cupy.RawModule``;
* ``host``: the CPU harness (:mod:`vsr.kernels.cuda.host`), the same sources built by the host C++ compiler.

Every launcher offers ``name``, ``device`` (the GPU index it is bound to), ``asarray(a, dtype=None)`` (host
numpy -> its arrays), ``empty(shape, dtype)``, ``to_host(a)`` and ``launch(kernel, grid, block, *args)`` with
arguments as declared in :data:`vsr.kernels.cuda.sources.KERNELS`.  Nothing is imported or compiled until a
launcher is opened.

A GPU launcher is bound to one device: CUDA modules and function handles belong to the context they were loaded
in, and a handle of device 0 launched while device 1 is current fails (or, worse, runs against the wrong
memory).  So each GPU launcher compiles, looks up, allocates and launches under its own device, whatever the
calling thread's current device is; a process with workers on several GPUs opens one launcher per device.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from vsr.errors import BackendError
from vsr.kernels.cuda.host import HostLauncher, host_compiler
from vsr.kernels.cuda.sources import KERNELS, SOURCE_DIR, source_files, sources_digest

# Preference order of select_launcher(): the design's choice first, the CPU harness last.
LAUNCHER_ORDER = ("pycuda", "cupy", "host")


CUDA_HEADERS = ("cuda_fp16.h", "cuda_fp16.hpp")  # what vsr_cuda.h includes from CUDA itself


def cuda_include_candidates() -> list[Path]:
    """Folders that may hold CUDA's headers, in the order they are tried: ``$CUDA_PATH`` / ``$CUDA_HOME``, the
    toolkit cupy found, the ``nvidia-cuda-runtime`` / ``-nvrtc`` wheels (``nvidia/*/include``: cu12's
    ``cuda_runtime``, cu13's ``cu13``), then ``/usr/local/cuda``."""
    roots = [os.environ.get(v) for v in ("CUDA_PATH", "CUDA_HOME")]
    if importlib.util.find_spec("cupy") is not None:
        import cupy

        roots.append(cupy.cuda.get_cuda_path())
    out = [Path(r) / "include" for r in roots if r]
    for entry in sys.path:
        out += sorted(Path(entry).glob("nvidia/*/include")) if entry and Path(entry).is_dir() else []
    out.append(Path("/usr/local/cuda/include"))
    return list(dict.fromkeys(out))


def find_cuda_include(candidates: list[Path] | None = None) -> Path | None:
    """The first candidate folder holding ``cuda_fp16.h`` (None: none does; NVRTC may still have it built in)."""
    for folder in cuda_include_candidates() if candidates is None else candidates:
        if (folder / CUDA_HEADERS[0]).is_file():
            return folder
    return None


def module_source(cuda_include: Path | None = None) -> str:
    """The translation unit handed to NVRTC / nvcc: vsr's ``.cu`` files by ``#include``, after a comment holding
    the sha256 of every file it includes -- vsr's sources and headers and CUDA's fp16 headers from
    ``cuda_include`` -- so that a compiler cache keyed on the source text (cupy's, pycuda's) misses when any of
    their contents changes."""
    extra = []
    for name in CUDA_HEADERS if cuda_include is not None else ():
        path = cuda_include / name
        extra.append(f"{name}:" + (hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "-"))
    header = f"// vsr kernels {sources_digest(*extra)}\n"
    return header + "".join(f'#include "{name}"\n' for name in source_files())


def _one_line(exc: Exception) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return lines[0][:300] if lines else type(exc).__name__


def compile_error(exc: Exception, cuda_include: Path | None, searched: list[Path]) -> BackendError:
    """A compile failure as one line; a missing CUDA header names itself and where it was looked for."""
    text = str(exc)
    for name in CUDA_HEADERS:
        if name in text and ("cannot open" in text or "not found" in text or "No such file" in text):
            where = ", ".join(str(p) for p in searched) or "nowhere"
            return BackendError(f"kernel launcher 'cupy': NVRTC cannot find {name} (looked in {where}); install "
                                "the CUDA runtime headers (pip: nvidia-cuda-runtime for your CUDA, e.g. "
                                "nvidia-cuda-runtime-cu12) or the CUDA toolkit, or set CUDA_PATH")
    return BackendError(f"kernel launcher 'cupy': compiling vsr's kernels failed: {_one_line(exc)}")


def _scalar(kind: str, value):
    return np.int32(value) if kind == "i32" else np.float32(value)


class PyCudaLauncher:
    """Kernels compiled by pycuda (nvcc) in the primary context of ``device``; arrays are
    ``pycuda.gpuarray.GPUArray`` there.  Every call pushes that context (torch's, for the same device) and pops it
    after."""

    name = "pycuda"

    def __init__(self, cache_dir: str | None = None, device: int | None = None):
        import pycuda.driver as drv
        from pycuda import gpuarray
        from pycuda.compiler import SourceModule

        drv.init()
        self._drv = drv
        self._gpuarray = gpuarray
        self.device = 0 if device is None else int(device)
        self._context = drv.Device(self.device).retain_primary_context()
        with self._bound():
            self._module = SourceModule(module_source(find_cuda_include()), no_extern_c=True,
                                        include_dirs=[str(SOURCE_DIR)], options=["-std=c++17"], cache_dir=cache_dir)
            self._funcs = {name: self._module.get_function(name) for name in KERNELS}

    @contextmanager
    def _bound(self):
        self._context.push()
        try:
            yield
        finally:
            self._drv.Context.pop()

    def asarray(self, a, dtype=None):
        with self._bound():
            return self._gpuarray.to_gpu(np.ascontiguousarray(a, dtype=dtype))

    def empty(self, shape, dtype):
        with self._bound():
            return self._gpuarray.empty(shape, dtype)

    def to_host(self, a) -> np.ndarray:
        with self._bound():
            return a.get()

    def launch(self, kernel, grid, block, *args) -> None:
        params = KERNELS[kernel].params
        values = [a.gpudata if kind == "ptr" else _scalar(kind, a) for kind, a in zip(params, args, strict=True)]
        with self._bound():
            self._funcs[kernel](*values, grid=tuple(int(v) for v in grid), block=tuple(int(v) for v in block))


class CupyLauncher:
    """Kernels compiled by NVRTC through ``cupy.RawModule`` for ``device`` (None: the current one when opened);
    arrays are ``cupy.ndarray`` there.  cupy loads a module on the device current at its first ``get_function``
    and keeps one per device; here that is always ``device``, and every later call runs under
    ``cupy.cuda.Device(device)`` (:meth:`bound`), so the handles and the launch agree."""

    name = "cupy"

    def __init__(self, cache_dir: str | None = None, device: int | None = None):
        import cupy

        self._cupy = cupy
        self.device = cupy.cuda.runtime.getDevice() if device is None else int(device)
        options = ["-I" + str(SOURCE_DIR), "--std=c++17"]
        searched = cuda_include_candidates()
        include = find_cuda_include(searched)
        if include is not None:  # cuda_fp16.h, where NVRTC's built-in headers lack it
            options.append("-I" + str(include))
        with self.bound():
            self._module = cupy.RawModule(code=module_source(include), options=tuple(options))
            try:
                # cupy compiles on the first get_function, reading its cache folder then, for the current device
                with _cupy_cache(cache_dir):
                    self._funcs = {name: self._module.get_function(name) for name in KERNELS}
            except Exception as exc:  # cupy's CompileException and friends: one line of vsr's instead
                raise compile_error(exc, include, searched) from None

    def bound(self):
        """A context in which ``device`` is cupy's (and the CUDA runtime's) current device."""
        return self._cupy.cuda.Device(self.device)

    def asarray(self, a, dtype=None):
        with self.bound():
            return self._cupy.asarray(np.ascontiguousarray(a, dtype=dtype))

    def empty(self, shape, dtype):
        with self.bound():
            return self._cupy.empty(shape, dtype)

    def to_host(self, a) -> np.ndarray:
        with self.bound():
            return self._cupy.asnumpy(a)

    def launch(self, kernel, grid, block, *args) -> None:
        params = KERNELS[kernel].params
        values = tuple(a if kind == "ptr" else _scalar(kind, a) for kind, a in zip(params, args, strict=True))
        with self.bound():
            self._funcs[kernel](tuple(int(v) for v in grid), tuple(int(v) for v in block), values)


@contextmanager
def _cupy_cache(cache_dir: str | None):
    """cupy's kernel cache folder is ``$CUPY_CACHE_DIR``, read when it compiles: point it at ``cache_dir``."""
    if cache_dir is None:
        yield
        return
    saved = os.environ.get("CUPY_CACHE_DIR")
    os.environ["CUPY_CACHE_DIR"] = str(cache_dir)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("CUPY_CACHE_DIR", None)
        else:
            os.environ["CUPY_CACHE_DIR"] = saved


def launcher_available(kind: str) -> bool:
    """Whether ``kind``'s prerequisites are installed (an importable module, or a host C++ compiler)."""
    if kind == "host":
        return host_compiler() is not None
    if kind in ("pycuda", "cupy"):
        return importlib.util.find_spec(kind) is not None
    raise ValueError(f"unknown kernel launcher {kind!r}; choose from {', '.join(LAUNCHER_ORDER)}")


def open_launcher(kind: str, cache_dir: str | None = None, device: int | None = None):
    """The launcher ``kind`` (one of :data:`LAUNCHER_ORDER`), compiled and ready for GPU ``device`` (its index;
    None: the current device); BackendError if it cannot be.

    ``cache_dir``: where pycuda / cupy keep compiled kernels (None: their defaults; the host harness keeps its
    own cache, :func:`vsr.kernels.cuda.host.cache_dir`)."""
    if not launcher_available(kind):
        raise BackendError(f"kernel launcher {kind!r} is not available here")
    if kind == "host":
        return HostLauncher(device=device)
    try:
        return (PyCudaLauncher if kind == "pycuda" else CupyLauncher)(cache_dir, device)
    except BackendError:
        raise
    except Exception as exc:  # no device, no driver: all say "this launcher cannot run here"
        raise BackendError(f"kernel launcher {kind!r} failed to start: {_one_line(exc)}") from exc


def select_launcher(order=LAUNCHER_ORDER, cache_dir: str | None = None, device: int | None = None):
    """The first launcher of ``order`` that opens for ``device``; its ``skipped`` attribute says why earlier ones
    did not."""
    skipped = []
    for kind in order:
        if not launcher_available(kind):
            skipped.append(f"{kind}: not installed")
            continue
        try:
            launcher = open_launcher(kind, cache_dir, device)
        except BackendError as exc:
            skipped.append(str(exc))
            continue
        launcher.skipped = skipped  # the explicit record of a fallback, for the caller to report
        return launcher
    raise BackendError("no kernel launcher can run here (" + "; ".join(skipped) + ")")
