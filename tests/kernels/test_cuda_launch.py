"""Compiling vsr's kernels with cupy's NVRTC: where CUDA's fp16 headers are found, the one-line error where they
are not, and a source text (what cupy's and pycuda's compile caches key on) that changes with every included
file's contents.  cupy cannot run here (no GPU): a stand-in module with cupy's calls and its compile error
stands in for it, and says so.
"""

from __future__ import annotations

import importlib.machinery
import shutil
import sys
import types
from pathlib import Path

import pytest

from vsr.errors import BackendError
from vsr.kernels.cuda import launch, sources
from vsr.kernels.cuda.launch import find_cuda_include, module_source, open_launcher


def _header(folder: Path, text: str = "// fp16\n") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "cuda_fp16.h").write_text(text)
    (folder / "cuda_fp16.hpp").write_text(text)
    return folder


@pytest.fixture
def no_cuda_env(monkeypatch):
    for var in ("CUDA_PATH", "CUDA_HOME"):
        monkeypatch.delenv(var, raising=False)


def test_headers_are_found_in_the_nvidia_wheels_and_the_toolkit_first(tmp_path, monkeypatch, no_cuda_env):
    wheel = _header(tmp_path / "site" / "nvidia" / "cu13" / "include")
    monkeypatch.setattr(sys, "path", [str(tmp_path / "site")])
    assert find_cuda_include() == wheel
    toolkit = _header(tmp_path / "toolkit" / "include")
    monkeypatch.setenv("CUDA_PATH", str(tmp_path / "toolkit"))
    assert find_cuda_include() == toolkit
    assert find_cuda_include([tmp_path / "nothing"]) is None


def test_the_source_text_changes_with_every_included_files_contents(tmp_path, monkeypatch):
    copy = tmp_path / "src"
    shutil.copytree(sources.SOURCE_DIR, copy, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    monkeypatch.setattr(sources, "SOURCE_DIR", copy)
    include = _header(tmp_path / "include")
    base = module_source(include)
    assert module_source(include) == base  # deterministic
    seen = {base}
    for path in (copy / "vsr_cuda.h", copy / "deform_conv.cu", include / "cuda_fp16.h", include / "cuda_fp16.hpp"):
        path.write_text(path.read_text() + "// edited\n")
        seen.add(module_source(include))
    assert len(seen) == 5  # each edit gave a new text, so a cache keyed on it misses


class _CompileError(Exception):
    pass


def _fake_cupy(monkeypatch, error: str | None):
    """cupy's calls the launcher makes; ``get_function`` fails with ``error`` as cupy's CompileException does."""
    made = {}

    class RawModule:
        def __init__(self, code, options=()):
            made.update(code=code, options=options)

        def get_function(self, name):
            if error:
                raise _CompileError(error)
            return object()

    cupy = types.ModuleType("cupy")
    cupy.__spec__ = importlib.machinery.ModuleSpec("cupy", None)
    cupy.RawModule = RawModule
    cupy.cuda = types.SimpleNamespace(get_cuda_path=lambda: None)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    return made


def test_a_missing_cuda_fp16_h_is_one_line_naming_it_and_where_it_was_looked_for(tmp_path, monkeypatch,
                                                                                 no_cuda_env):
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    monkeypatch.setattr(launch, "cuda_include_candidates", lambda: [tmp_path / "none" / "include"])
    _fake_cupy(monkeypatch, 'vsr_cuda.h(9): catastrophic error: cannot open source file "cuda_fp16.h"\n'
                            '  #include <cuda_fp16.h>\n1 catastrophic error detected')
    with pytest.raises(BackendError) as info:
        open_launcher("cupy")
    message = str(info.value)
    assert "\n" not in message and "cannot find cuda_fp16.h" in message and str(tmp_path / "none") in message
    assert "nvidia-cuda-runtime" in message


def test_cupy_gets_the_found_headers_and_the_digested_source(tmp_path, monkeypatch):
    include = _header(tmp_path / "include")
    monkeypatch.setattr(launch, "cuda_include_candidates", lambda: [include])
    made = _fake_cupy(monkeypatch, None)
    open_launcher("cupy")
    assert f"-I{include}" in made["options"] and made["code"] == module_source(include)
    assert made["code"].startswith("// vsr kernels ")
    _fake_cupy(monkeypatch, "error: identifier \"foo\" is undefined\nmore")
    with pytest.raises(BackendError, match='^kernel launcher \'cupy\': compiling vsr\'s kernels failed: error: '
                                           'identifier "foo" is undefined$'):
        open_launcher("cupy")
