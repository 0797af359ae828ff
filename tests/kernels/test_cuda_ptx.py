"""Every ``vsr/kernels/cuda/*.cu`` compiles to PTX with ``nvcc`` for sm_80 and sm_90, and each kernel's PTX
entry takes the parameters that :data:`vsr.kernels.cuda.KERNELS` declares (the launchers pass them by position).
"""

from __future__ import annotations

import re
import shutil
import subprocess

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
