"""Deterministic on-disk cache of exported ONNX models (``<engine dir>/onnx/<key>.onnx``, see
:func:`vsr.files.engine_dir`).

The key is a hash of everything that makes an export valid: the weights' checksum, the architecture,
the input bucket (H, W), the opset, the precision (fp32, or the fp16 form of :mod:`vsr.export.fp16`), the graph
form (``Shape`` values folded) and the torch/vsr versions.  A stale file is never used; a matching one is never
rebuilt.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

from vsr.export.onnx import OPSET, export_onnx, save_atomic, state_checksum
from vsr.files import engine_dir
from vsr.model.config import ModelConfig


PRECISIONS = ("fp32", "fp16")


def export_key(weights_sha: str, config: ModelConfig, height: int, width: int, opset: int = OPSET,
               precision: str = "fp32") -> str:
    from vsr import __version__

    fields = {"weights": weights_sha, "arch": config.arch_kwargs(), "h": height, "w": width, "opset": opset,
              "torch": torch.__version__, "vsr": __version__, "io": "lr(N,T,3,H,W)->hr(N,3,4H,4W)",
              "shapes": "folded", "precision": precision}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:20]


def cached_export(model: torch.nn.Module, config: ModelConfig, height: int, width: int,
                  weights_sha: str | None = None, precision: str = "fp32") -> Path:
    """Path of an ONNX export of ``model`` for ``height x width`` in ``precision`` (fp32, or fp16 with float32
    I/O and TSA's attention kept fp32: :mod:`vsr.export.fp16`), exporting on first use."""
    if precision not in PRECISIONS:
        raise ValueError(f"export precision {precision!r}: choose from {', '.join(PRECISIONS)}")
    sha = weights_sha or state_checksum(model)
    key = export_key(sha, config, height, width, precision=precision)
    tag = "" if precision == "fp32" else f"-{precision}"
    path = engine_dir() / "onnx" / f"{config.name}-{height}x{width}{tag}-{key}.onnx"
    if path.is_file():
        return path
    if precision == "fp32":
        return export_onnx(model, config, path, height, width)
    import onnx

    from vsr.export.fp16 import half_model

    source = cached_export(model, config, height, width, sha)
    save_atomic(half_model(onnx.load(str(source))), path)
    return path
