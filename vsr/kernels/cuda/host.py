"""The CPU harness: vsr's ``.cu`` sources compiled by the host C++ compiler behind ``cpu_shim.h``, via ctypes.

Each kernel is exported as ``vsr_launch_<name>(grid[3], block[3], void** args)``; the shim runs the kernel once
per thread of the launch, in order.  It exists so that every commit tests the kernels' arithmetic on a machine
without a GPU; it is slow (one function call per CUDA thread), so keep shapes small.

The shared library is cached under ``$VSR_KERNEL_CACHE`` (default: ``kernels/`` in the user's cache folder, a
folder of theirs alone: :func:`cache_dir`), named by a hash of the sources, the compiler and its flags; it is built
under a temporary name (``.NAME.vsr-partial-PID-XXXXXXXX``) and renamed into place, so concurrent builds never see a
half-written library; those of builds killed outright are removed when that library is next built
(:mod:`vsr.leftovers`).
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np

from vsr.errors import BackendError
from vsr.files import create_new, private_file, private_folder, user_cache_dir
from vsr.kernels.cuda.sources import KERNELS, SHIM_HEADER, SOURCE_DIR, source_files, sources_digest
from vsr.leftovers import MKDTEMP, PARTIAL, remove_partials, remove_unnumbered

CXX_FLAGS = ("-O2", "-std=c++17", "-shared", "-fPIC", "-fno-fast-math", "-ffp-contract=off")


def host_compiler() -> str | None:
    """The host C++ compiler (``$CXX``, else ``g++``, else ``c++``), or None when there is none."""
    for candidate in (os.environ.get("CXX"), "g++", "c++"):
        if candidate and shutil.which(candidate):
            return shutil.which(candidate)
    return None


def harness_source() -> str:
    """The translation unit: the shim, every ``.cu`` file, and one exported launcher per kernel."""
    lines = [f'#include "{SHIM_HEADER}"']
    lines += [f'#include "{name}"' for name in source_files()]
    lines += [f'extern "C" void vsr_launch_{name}(const unsigned* g, const unsigned* b, void** a) '
              f'{{ vsr_launch_packed({name}, g, b, a); }}' for name in sorted(KERNELS)]
    return "\n".join(lines) + "\n"


def cache_dir() -> Path:
    """``$VSR_KERNEL_CACHE``, else ``kernels/`` in the user's cache folder: a folder of this user's alone, made
    mode 0700 and checked (:func:`vsr.files.private_folder`).  (It was a predictable name in /tmp, where another
    user could make the folder first and plant a library that the CPU emulation would load.)"""
    root = os.environ.get("VSR_KERNEL_CACHE")
    return Path(root) if root else user_cache_dir(("VSR_KERNEL_CACHE", "XDG_CACHE_HOME")) / "kernels"


def build_harness(compiler: str | None = None) -> Path:
    """Path of the harness shared library, compiled now unless a cached build of the same sources exists."""
    cxx = compiler or host_compiler()
    if cxx is None:
        raise BackendError("no host C++ compiler (g++ or $CXX) to build vsr's CPU kernel harness")
    source = harness_source()
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout.splitlines()[:1]
    digest = sources_digest(source, cxx, *version, *CXX_FLAGS)[:20]
    folder = private_folder(cache_dir(), "vsr's compiled CPU kernels", setting="VSR_KERNEL_CACHE")
    target = folder / f"vsr_cuda_host_{digest}.so"
    if private_file(target):
        return target
    remove_partials(target, tail="-[0-9a-f]{8}")  # (what builds killed outright left)
    remove_unnumbered(folder, re.escape(target.stem) + r"\." + MKDTEMP + r"\.so\.tmp")  # (mkstemp's names, before)
    # (the random part: two threads of one process building at once)
    tmp = folder / f".{target.name}{PARTIAL}{os.getpid()}-{os.urandom(4).hex()}"
    os.close(create_new(tmp, 0o600))
    try:
        proc = subprocess.run([cxx, *CXX_FLAGS, "-I", str(SOURCE_DIR), "-x", "c++", "-", "-o", str(tmp)],
                              input=source, capture_output=True, text=True)
        if proc.returncode != 0:
            raise BackendError(f"building the CPU kernel harness failed: {proc.stderr.strip()[-2000:]}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


_CTYPES = {"ptr": ctypes.c_void_p, "i32": ctypes.c_int32, "f32": ctypes.c_float}


class HostLauncher:
    """Launches vsr's kernels on the CPU harness; "device" arrays are C-contiguous numpy arrays.  ``device``: the
    index a caller bound it to (the CPU emulation of ``cuda:N`` is ``cpu:N``), kept and otherwise ignored -- the
    host has one memory."""

    name = "host"

    def __init__(self, compiler: str | None = None, device: int | None = None):
        self.device = 0 if device is None else int(device)
        self._lib = ctypes.CDLL(str(build_harness(compiler)))
        self._funcs = {}
        for name in KERNELS:
            fn = getattr(self._lib, f"vsr_launch_{name}")
            fn.argtypes = [ctypes.POINTER(ctypes.c_uint), ctypes.POINTER(ctypes.c_uint),
                           ctypes.POINTER(ctypes.c_void_p)]
            fn.restype = None
            self._funcs[name] = fn

    def asarray(self, a: np.ndarray, dtype=None) -> np.ndarray:
        return np.ascontiguousarray(a, dtype=dtype)

    def empty(self, shape, dtype) -> np.ndarray:
        return np.empty(shape, dtype)

    def to_host(self, a: np.ndarray) -> np.ndarray:
        return a

    def launch(self, kernel: str, grid: tuple[int, int, int], block: tuple[int, int, int], *args) -> None:
        spec = KERNELS[kernel]
        if len(args) != len(spec.params):
            raise TypeError(f"{kernel} takes {len(spec.params)} arguments, got {len(args)}")
        values = []
        for kind, arg in zip(spec.params, args):
            if kind == "ptr":
                if not (isinstance(arg, np.ndarray) and arg.flags.c_contiguous):
                    raise TypeError(f"{kernel}: pointer arguments must be C-contiguous numpy arrays")
                values.append(ctypes.c_void_p(arg.ctypes.data))
            else:
                values.append(_CTYPES[kind](arg))
        ptrs = (ctypes.c_void_p * len(values))(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in values])
        self._funcs[kernel]((ctypes.c_uint * 3)(*grid), (ctypes.c_uint * 3)(*block), ptrs)
