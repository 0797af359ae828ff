"""Inference backends.  Entry point: :func:`open_backend`.

=========  ==========================================================================
``ort``    ONNX Runtime, best providers present (TensorRT EP, CUDA EP, CPU EP)
``torch``  PyTorch eager (reference; CUDA when available)
=========  ==========================================================================

``plan="whole"`` runs the exported graph in one session; ``plan="split"`` runs the subgraph plan
(segments on ONNX Runtime, DCN and PixelShuffle on vsr's own kernels, see :mod:`vsr.plan`).
"""

from __future__ import annotations

import logging

from vsr.backends.base import Backend, TensorSpec
from vsr.errors import BackendError

log = logging.getLogger(__name__)

BACKENDS = ("auto", "ort", "torch")
PLANS = ("auto", "whole", "split")
# "auto" picks the plan measured faster on the 2-core CPU machine: split, 1.17x wall / 1.20x CPU
# over the whole graph on EDVR-M 180x320 (docs/benchmarks.md, "Subgraph plan and bridge kernels").
DEFAULT_PLAN = "split"


def open_backend(weights: str = "default", config=None, backend: str = "auto", plan: str = "auto",
                 threads: int | None = None, device: str | None = None) -> Backend:
    """Load the model from ``weights`` (path, ``"default"`` or ``"random"``) and wrap it in a backend."""
    from vsr.model import load_model

    if backend not in BACKENDS:
        raise BackendError(f"unknown backend {backend!r} (choose from {', '.join(BACKENDS)})")
    if plan not in PLANS:
        raise BackendError(f"unknown plan {plan!r} (choose from {', '.join(PLANS)})")
    model, cfg = load_model(weights, config)
    if backend == "auto":
        backend = "ort"
    if backend == "torch":
        import torch

        from vsr.backends.torch_backend import TorchBackend

        dev = device or ("cuda" if torch.cuda.is_available() else "cpu")
        return TorchBackend(model, cfg, device=dev, threads=threads)
    from vsr.backends.ort import OrtBackend, OrtOptions

    plan = DEFAULT_PLAN if plan == "auto" else plan
    if plan == "split":
        try:
            from vsr.plan.backend import SplitBackend  # noqa: F401
        except ImportError as e:
            raise BackendError(f"split plan unavailable: {e}") from None
        return SplitBackend.from_model(model, cfg, threads=threads)
    return OrtBackend(model, cfg, OrtOptions(threads=threads))


__all__ = ["open_backend", "Backend", "TensorSpec", "BACKENDS", "PLANS"]
