"""The names the real TensorRT Python bindings define, read from the ``tensorrt-cu12-bindings`` wheels.

The wheels' ``tensorrt.so`` cannot be imported here (it needs TensorRT's libraries), but pybind11 registers every
class, method, property and enum value by a C string literal, so its string table lists them all.  The linker
merges a literal that ends another one into its tail (``"Logger"`` is stored as the end of ``"ILogger"``,
``"num_errors"`` of ``"get_num_errors"``), so the name set is every identifier-shaped string and each of its
tails that starts at a word boundary (after ``_`` or at a capital): a name absent from it is absent from the
bindings (``BuilderFlag.FP16`` in 11.x), while a present name may, rarely, be a tail of another.

``python -m tests.plan.trt_names --fetch`` downloads the pinned wheels into the cache folder (``.ci/run`` does);
tests read them from there and skip, saying so, where they are absent.
"""

from __future__ import annotations

import ast
import functools
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# One release of each major version vsr supports (vsr.plan.tensorrt.SUPPORTED_MAJORS), current when pinned.
BINDINGS = {"10": "10.16.1.11", "11": "11.4.0.106"}
PACKAGE = "tensorrt-cu12-bindings"
_IDENT = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")


def cache_dir() -> Path:
    return Path(os.environ.get("VSR_TRT_BINDINGS", ROOT / ".cache" / "tensorrt-bindings"))


def wheel(version: str) -> Path | None:
    """The cached wheel of ``version`` (any Python tag: the module's names are the same), or None."""
    found = sorted(cache_dir().glob(f"{PACKAGE.replace('-', '_')}-{version}-*.whl"))
    return found[0] if found else None


def fetch(dest: Path | None = None) -> list[Path]:
    """Download every pinned wheel missing from the cache (pip, no dependencies); returns their paths."""
    dest = dest or cache_dir()
    dest.mkdir(parents=True, exist_ok=True)
    for version in BINDINGS.values():
        if wheel(version) is None:
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                            "-d", str(dest), f"{PACKAGE}=={version}"], check=True)
    return [wheel(v) for v in BINDINGS.values()]


def identifiers(blob: bytes) -> frozenset[str]:
    """Identifier-shaped NUL-terminated strings of ``blob`` and their word-boundary tails (module docstring)."""
    names = set()
    for raw in blob.split(b"\0"):
        if len(raw) > 200 or not _IDENT.fullmatch(raw):
            continue
        s = raw.decode("ascii")
        names.add(s)
        for i in range(1, len(s)):
            if (s[i - 1] == "_" or s[i].isupper()) and not s[i].isdigit():
                names.add(s[i:])
    return frozenset(names)


@functools.lru_cache(maxsize=None)
def binding_names(version: str) -> frozenset[str] | None:
    """The names the bindings of ``version`` define (None: its wheel is not cached)."""
    path = wheel(version)
    if path is None:
        return None
    with zipfile.ZipFile(path) as z:
        so = [n for n in z.namelist() if re.search(r"tensorrt[^/]*\.so$", n)]
        if not so:
            raise RuntimeError(f"{path}: no tensorrt*.so inside")
        return identifiers(z.read(so[0]))


def used_by_vsr(root: Path = ROOT / "vsr") -> dict[tuple[str, ...], list[str]]:
    """Every attribute chain vsr reads off the TensorRT module (``trt.X.Y``, ``tensorrt.__version__``), with
    where it is read (``file:line``).  The module is bound to the names ``trt`` or ``tensorrt`` in vsr."""
    found: dict[tuple[str, ...], list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute):
                continue
            chain, inner = [], node
            while isinstance(inner, ast.Attribute):
                chain.append(inner.attr)
                inner = inner.value
            if isinstance(inner, ast.Name) and inner.id in ("trt", "tensorrt"):
                where = f"{path.relative_to(root.parent)}:{node.lineno}"
                found.setdefault(tuple(reversed(chain)), []).append(where)
    # keep the longest chains: trt.Logger.WARNING also covers trt.Logger
    return {c: w for c, w in found.items() if not any(o[:len(c)] == c and len(o) > len(c) for o in found)}


if __name__ == "__main__":
    if sys.argv[1:] == ["--fetch"]:
        for p in fetch():
            print(p)
    else:
        sys.exit("usage: python -m tests.plan.trt_names --fetch")
