"""Deterministic on-disk cache of exported ONNX models (``<engine dir>/onnx/<key>.onnx``, see
:func:`vsr.files.engine_dir`).

The key is a hash of everything that makes an export valid: the weights' checksum, the architecture,
the input bucket (H, W), the opset and the torch/vsr versions.  A stale file is never used; a
matching one is never rebuilt.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

from vsr.export.onnx import OPSET, export_onnx, state_checksum
from vsr.files import engine_dir
from vsr.model.config import ModelConfig


def export_key(weights_sha: str, config: ModelConfig, height: int, width: int, opset: int = OPSET) -> str:
    from vsr import __version__

    fields = {"weights": weights_sha, "arch": config.arch_kwargs(), "h": height, "w": width, "opset": opset,
              "torch": torch.__version__, "vsr": __version__, "io": "lr(N,T,3,H,W)->hr(N,3,4H,4W)"}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:20]


def cached_export(model: torch.nn.Module, config: ModelConfig, height: int, width: int,
                  weights_sha: str | None = None) -> Path:
    """Path of an ONNX export of ``model`` for ``height x width``, exporting on first use."""
    sha = weights_sha or state_checksum(model)
    key = export_key(sha, config, height, width)
    path = engine_dir() / "onnx" / f"{config.name}-{height}x{width}-{key}.onnx"
    if not path.is_file():
        export_onnx(model, config, path, height, width)
    return path
