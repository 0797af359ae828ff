"""Cache keys of the CUDA runtime: a built TensorRT engine or compiled kernel is valid only for the device and
the software stack it was built with.

:func:`runtime_key` hashes every fact of :class:`DeviceFacts` that makes such an artefact valid (vs-mlrt's
engine names, vsr's ``PlanKey``): a stale artefact is never loaded by mistake, a matching one never rebuilt.
:func:`device_facts` gathers the facts of a live device; tests give stand-in values.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import stat
from dataclasses import asdict, dataclass
from pathlib import Path

from vsr.files import engine_dir, private_folder, write_new
from vsr.kernels.cuda.sources import sources_digest
from vsr.leftovers import PARTIAL, remove_old_partials, remove_partials
from vsr.unused import UNUSED_DAYS, mark_used, remove_unused

_FOLDER = re.compile(r".+-[0-9a-f]{20}")  # a cache folder's name (cache_folder), its facts.json tells it
KEY_VERSION = 1  # bump when the meaning of a key's fields changes


@dataclass(frozen=True)
class DeviceFacts:
    """What a cached engine or kernel depends on.  ``None``: not present (no CUDA on a CPU, no TensorRT)."""

    device_name: str  # "NVIDIA H100 80GB HBM3", or the CPU's description for the CPU emulation
    capability: str | None  # "9.0"
    cuda: str | None  # the CUDA runtime torch was built with, "12.4"
    driver: str | None  # the driver's CUDA version, "12.6" (cudaDriverGetVersion)
    torch: str
    tensorrt: str | None
    kernels: str  # sha256 of vsr's .cu sources and headers (vsr.kernels.cuda.sources.sources_digest)


def runtime_key(facts: DeviceFacts, *extra: str) -> str:
    """A 20-hex-digit key of ``facts`` and ``extra`` strings (e.g. precision, shapes); deterministic across runs,
    processes and machines: canonical JSON (sorted keys) through sha256."""
    payload = json.dumps({"v": KEY_VERSION, "facts": asdict(facts), "extra": list(extra)}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:20]


def cache_folder(facts: DeviceFacts, root: str | Path | None = None, *extra: str) -> Path:
    """``<root>/<readable device>-<key>`` (root default ``<engine dir>/cuda``), created (mode 0700; one another
    user owns or can write is refused: :func:`vsr.files.private_folder`), with ``facts.json`` beside the
    artefacts so that a person can tell what each folder is for.  Making a new one removes the folders of
    ``root`` no run used for :data:`vsr.unused.UNUSED_DAYS` (an upgrade of the driver, torch or TensorRT left
    the earlier one, engines and all, for good)."""
    base = Path(root) if root else engine_dir() / "cuda"
    readable = "".join(c if c.isalnum() else "-" for c in facts.device_name.lower()).strip("-")[:40] or "device"
    # engines and compiled kernels are code: only from a folder of the user's alone (made mode 0700)
    folder = private_folder(base / f"{readable}-{runtime_key(facts, *extra)}", "compiled kernels and engines",
                            "what is loaded from there would run as you", "VSR_ENGINE_DIR")
    mark_used(folder)  # first: a run that removes folders meanwhile sees this one used
    manifest = folder / "facts.json"
    if not manifest.exists():
        remove_partials(manifest)  # (what runs killed outright left)
        remove_old_partials(manifest, ".tmp")  # (and older vsr's: .facts.json.PID.tmp)
        tmp = folder / f".facts.json{PARTIAL}{os.getpid()}"  # (a link planted there is replaced, not written through)
        write_new(tmp, (json.dumps({"facts": asdict(facts), "extra": list(extra)}, indent=2, sort_keys=True)
                        + "\n").encode())
        tmp.replace(manifest)
        remove_unused(base, _FOLDER.fullmatch, UNUSED_DAYS, keep=folder.name, belongs=_has_facts, folders=True)
    return folder


def _has_facts(fd: int) -> bool:
    """Whether the folder ``fd`` is a cache folder of :func:`cache_folder`'s: its ``facts.json``."""
    return stat.S_ISREG(os.stat("facts.json", dir_fd=fd, follow_symlinks=False).st_mode)


def _driver_version() -> str | None:
    try:
        import ctypes

        version = ctypes.c_int(0)
        ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(version))
        return f"{version.value // 1000}.{version.value % 1000 // 10}"
    except OSError:
        return None


def _tensorrt_version() -> str | None:
    import importlib.util

    if importlib.util.find_spec("tensorrt") is None:
        return None
    import tensorrt

    return tensorrt.__version__


def device_facts(device) -> DeviceFacts:
    """The facts of ``device`` (a ``torch.device``) as this process sees them."""
    import torch

    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        name, capability = props.name, f"{props.major}.{props.minor}"
        cuda, driver = torch.version.cuda, _driver_version()
    else:
        name, capability, cuda, driver = f"cpu {platform.machine()} {platform.processor()}".strip(), None, None, None
    return DeviceFacts(device_name=name, capability=capability, cuda=cuda, driver=driver, torch=torch.__version__,
                       tensorrt=_tensorrt_version(), kernels=sources_digest())
