"""Every ``vsr/kernels/cuda/*.cu`` compiles to PTX with ``nvcc`` for sm_80 and sm_90, and each kernel's PTX
entry takes the parameters that :data:`vsr.kernels.cuda.KERNELS` declares (the launchers pass them by position).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from vsr.kernels.cuda import KERNELS
from vsr.kernels.cuda.sources import SOURCE_DIR, source_files

NVCC = shutil.which("nvcc") or (shutil.which("/usr/local/cuda/bin/nvcc"))
pytestmark = pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")

_PTX_TYPE = {"ptr": ".u64", "i32": ".u32", "f32": ".f32"}


def ptx_entries(ptx: str) -> dict[str, list[str]]:
    """``{kernel: [param type, ...]}`` of every ``.entry`` in a PTX text."""
    entries = {}
    for name, params in re.findall(r"\.entry\s+(\w+)\s*\(([^)]*)\)", ptx):
        entries[name] = re.findall(r"\.param\s+(\.\w+)", params)
    return entries


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("source", source_files())
def test_compiles_to_ptx_with_the_declared_signatures(tmp_path, source, arch):
    out = tmp_path / "k.ptx"
    proc = subprocess.run([NVCC, "-ptx", f"-arch={arch}", "-std=c++17", "-I", str(SOURCE_DIR),
                           str(SOURCE_DIR / source), "-o", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "warning" not in proc.stderr.lower(), proc.stderr
    entries = ptx_entries(out.read_text())
    declared = {name: spec for name, spec in KERNELS.items() if spec.source == source}
    assert sorted(entries) == sorted(declared)
    for name, spec in declared.items():
        assert entries[name] == [_PTX_TYPE[kind] for kind in spec.params], name


# NVRTC itself (the library cupy compiles with on a GPU) needs no GPU: where a session has it -- the
# nvidia-cuda-nvrtc-cu12 and nvidia-cuda-runtime-cu12 wheels unpacked, VSR_NVRTC naming libnvrtc.so and
# VSR_CUDA_INCLUDE the folder with cuda_fp16.h -- the module cupy would build is compiled here before a GPU is lent.
NVRTC = os.environ.get("VSR_NVRTC")


@pytest.mark.skipif(not NVRTC, reason="VSR_NVRTC (a libnvrtc.so) is not set")
@pytest.mark.parametrize("arch", ["compute_80", "sm_90"])
def test_the_module_cupy_builds_compiles_with_nvrtc(arch):
    import ctypes

    from vsr.kernels.cuda.launch import module_source

    lib = ctypes.CDLL(NVRTC)
    include = os.environ.get("VSR_CUDA_INCLUDE")
    prog = ctypes.c_void_p()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), module_source(include and Path(include)).encode(), b"vsr.cu",
                                  0, None, None) == 0
    opts = [f"--gpu-architecture={arch}", "-std=c++17", f"-I{SOURCE_DIR}"] + ([f"-I{include}"] if include else [])
    rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts]))
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    assert rc == 0, log.value.decode()
    lib.nvrtcGetPTXSize(prog, ctypes.byref(size))
    ptx = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetPTX(prog, ptx)
    entries = ptx_entries(ptx.value.decode())
    assert sorted(entries) == sorted(KERNELS)
    for name, spec in KERNELS.items():
        assert entries[name] == [_PTX_TYPE[kind] for kind in spec.params], name
