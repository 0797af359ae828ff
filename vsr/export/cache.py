"""Deterministic on-disk cache of exported ONNX models (``<engine dir>/onnx/<key>.onnx``, see
:func:`vsr.files.engine_dir`).

The key is a hash of everything that makes an export what it is: the weights' checksum, the architecture,
the input bucket (H, W), the opset, the precision (fp32, or the fp16 form of :mod:`vsr.export.fp16`), the graph
form (``Shape`` values folded), the versions of torch, onnx and onnxscript (the exporter and its optimiser;
ONNX Runtime's too for fp16, whose converter makes that form) and a digest of vsr's own code that makes the
graph (:data:`GRAPH_CODE`: vsr's version number does not change with it).  A stale file is never used; a
matching one is never rebuilt.  Writing one removes the exports of the same config and size that no run used
for :data:`vsr.unused.UNUSED_DAYS` (a run marks the one it uses): each key change left its tens of MB behind.

What is read back is trusted only from a folder of this user's that no other user can write
(:func:`vsr.files.private_folder`; else one line of error), and only an entry of theirs alone whose metadata
names the weights, config and size asked for: a damaged or cut-short file, or one that is not, is exported
again with one warning line.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import json
import re
import warnings
from contextvars import ContextVar
from pathlib import Path
from typing import Callable, Iterator

import torch

from vsr.export.onnx import OPSET, export_onnx, save_atomic, state_checksum
from vsr.files import code_digest, engine_write_error, private_folder, untrusted
from vsr.model.config import ModelConfig
from vsr.unused import UNUSED_DAYS, mark_used, remove_unused


PRECISIONS = ("fp32", "fp16")
ENTRY_MODE = 0o644  # (less the umask) an entry the group could write is not trusted: never made so by a umask 002
# vsr's files whose code decides the exported graph (the model's forward, the exporter's settings, the passes)
GRAPH_CODE = ("vsr/model/edvr.py", "vsr/model/dcn.py", "vsr/export/onnx.py", "vsr/export/fold.py",
              "vsr/export/fp16.py")


# who hears that an export really starts (a run's status line), not a cached one read back: see announcing()
_ON_EXPORT: ContextVar[Callable[[], None] | None] = ContextVar("vsr_on_export", default=None)


@functools.lru_cache(maxsize=1)
def graph_code_digest() -> str:
    return code_digest(GRAPH_CODE)


@contextlib.contextmanager
def announcing(on_export: Callable[[], None] | None) -> Iterator[None]:
    """Within it, ``on_export()`` is called when an export (:func:`cached_export`, the Q/DQ form's too) really
    starts: a run says "exporting ONNX" only then, not for the cached file it reads back."""
    token = _ON_EXPORT.set(on_export)
    try:
        yield
    finally:
        _ON_EXPORT.reset(token)


def exporting() -> None:
    """An export starts now: tell the listener of :func:`announcing`, where there is one."""
    on_export = _ON_EXPORT.get()
    if on_export is not None:
        on_export()


def export_key(weights_sha: str, config: ModelConfig, height: int, width: int, opset: int = OPSET,
               precision: str = "fp32") -> str:
    import onnx

    from vsr import __version__

    fields = {"weights": weights_sha, "arch": config.arch_kwargs(), "h": height, "w": width, "opset": opset,
              "torch": torch.__version__, "vsr": __version__, "io": "lr(N,T,3,H,W)->hr(N,3,4H,4W)",
              "shapes": "folded", "precision": precision, "onnx": onnx.__version__,
              # its installed version, what its __version__ reads: importing it took ~2 s (sympy, its IR) of
              # every run's lookup of a cached export
              "onnxscript": importlib.metadata.version("onnxscript"), "code": graph_code_digest()}
    if precision == "fp16":
        import onnxruntime

        fields["onnxruntime"] = onnxruntime.__version__
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:20]


def export_folder() -> Path:
    """``<engine dir>/onnx``, made mode 0700 where missing; a folder another user owns or can write is refused."""
    from vsr.files import engine_dir

    return private_folder(engine_dir() / "onnx", "cached ONNX exports",
                          "what is read back from there decides your output", "VSR_ENGINE_DIR")


def unusable(path: Path, weights_sha: str, config: ModelConfig, height: int, width: int,
             precision: str = "fp32") -> str | None:
    """Why the cached export at ``path`` cannot be used: ``""`` where there is none, a reason where it is not
    this user's alone, cannot be read, or its metadata (written last: a cut-short file lacks it) does not name
    what was asked; None where it can be used."""
    import onnx

    from vsr.export.fp16 import KEPT_METADATA

    if not path.exists() and not path.is_symlink():
        return ""
    why = untrusted(path)
    if why is not None:
        return f"is not yours alone ({why})"
    try:
        meta = {e.key: e.value for e in onnx.load(str(path), load_external_data=False).metadata_props}
    except Exception as e:  # protobuf's DecodeError, OSError, ...: the file is damaged
        return f"cannot be read ({str(e).splitlines()[0][:120] if str(e) else type(e).__name__})"
    want = {"vsr.config": config.name, "vsr.height": str(height), "vsr.width": str(width),
            "vsr.weights_sha256": weights_sha}
    if any(meta.get(k) != v for k, v in want.items()) or (precision == "fp16") != (KEPT_METADATA in meta):
        return "is cut short or is not the export asked for (its metadata)"
    return None


def cached_export(model: torch.nn.Module, config: ModelConfig, height: int, width: int,
                  weights_sha: str | None = None, precision: str = "fp32") -> Path:
    """Path of an ONNX export of ``model`` for ``height x width`` in ``precision`` (fp32, or fp16 with float32
    I/O and TSA's attention kept fp32: :mod:`vsr.export.fp16`), exporting on first use (and again where the
    cached file cannot be used: :func:`unusable`)."""
    if precision not in PRECISIONS:
        raise ValueError(f"export precision {precision!r}: choose from {', '.join(PRECISIONS)}")
    sha = weights_sha or state_checksum(model)
    key = export_key(sha, config, height, width, precision=precision)
    tag = "" if precision == "fp32" else f"-{precision}"
    path = export_folder() / f"{config.name}-{height}x{width}{tag}-{key}.onnx"
    mark_used(path)  # first: a run that removes entries meanwhile sees this one used
    why = unusable(path, sha, config, height, width, precision)
    if why is None:
        return path
    if why:
        warnings.warn(f"the cached ONNX export {path} {why}; exporting it again", stacklevel=2)
    exporting()
    try:
        if precision == "fp32":
            export_onnx(model, config, path, height, width, mode=ENTRY_MODE)
        else:
            import onnx

            from vsr.export.fp16 import half_model

            source = cached_export(model, config, height, width, sha)
            save_atomic(half_model(onnx.load(str(source))), path, ENTRY_MODE)
    except OSError as e:
        raise engine_write_error(e, path.parent, "an ONNX export")
    # the model's exports: those of its config and size (any weights, key or precision; not its Q/DQ forms)
    model_entry = re.compile(rf"{re.escape(config.name)}-{height}x{width}(-fp16)?-[0-9a-f]{{20}}\.onnx")
    remove_unused(path.parent, model_entry.fullmatch, UNUSED_DAYS, keep=path.name)
    return path
