"""Inference backends.  Entry point: :func:`open_backend` with one options object per backend.

================  ==================================================================================
``SplitOptions``  ONNX Runtime segments bridged by vsr's own DCN / PixelShuffle kernels (default;
                  the subgraph plan, see :mod:`vsr.plan`)
``OrtOptions``    the whole exported graph in one ONNX Runtime session (TensorRT EP, CUDA EP, CPU EP)
``TorchOptions``  PyTorch eager (reference; CUDA when available)
``CudaOptions``   NVIDIA GPU: torch (fp16, CUDA graphs) or TensorRT segments bridged by vsr's CUDA kernels
                  (:mod:`vsr.backends.cuda`); chosen by ``auto`` where torch sees a GPU
================  ==================================================================================

Every backend pads frames to the same shape buckets (:class:`~vsr.backends.buckets.BucketPolicy`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vsr.backends.base import Backend, TensorSpec
from vsr.backends.buckets import BucketPolicy
from vsr.backends.options import (BACKENDS, PLANS, BackendOptions, CudaOptions, OrtOptions, SplitOptions,
                                  TorchOptions, backend_options)
from vsr.errors import BackendError


def open_backend(weights: str = "default", config=None, options: BackendOptions | None = None) -> Backend:
    """Load the model from ``weights`` (path, ``"default"`` or ``"random"``) and wrap it in the backend that
    ``options`` names (default: ``SplitOptions()``)."""
    from vsr.model import load_model

    options = SplitOptions() if options is None else options
    if not isinstance(options, (TorchOptions, OrtOptions, SplitOptions, CudaOptions)):
        raise BackendError(f"open_backend takes TorchOptions, OrtOptions, SplitOptions or CudaOptions, not {options!r}")
    if isinstance(options, CudaOptions):
        from vsr.backends.cuda import check_device

        check_device(options)  # before the model loads: no GPU is one line, at once
    model, cfg = load_model(weights, config)
    if isinstance(options, CudaOptions):
        from vsr.backends.cuda import open_cuda_backend

        return open_cuda_backend(model, cfg, options)
    if isinstance(options, TorchOptions):
        from vsr.backends.torch_backend import TorchBackend

        return TorchBackend(model, cfg, options)
    if isinstance(options, OrtOptions):
        from vsr.backends.ort import OrtBackend

        return OrtBackend(model, cfg, options)
    from vsr.backends.split import SplitBackend, StreamingSplitBackend

    return (StreamingSplitBackend if options.stream_features else SplitBackend).from_model(model, cfg, options)


@dataclass(frozen=True)
class BackendRequest:
    """A backend still to open: the model (``weights``, ``config``) and the backend's options."""

    weights: str = "default"
    config: str | None = None
    options: BackendOptions = field(default_factory=SplitOptions)

    def open(self) -> Backend:
        # looked up at call time, so a caller (or a test) that wraps vsr.backends.open_backend is heard
        return open_backend(weights=self.weights, config=self.config, options=self.options)


__all__ = ["BACKENDS", "PLANS", "Backend", "BackendOptions", "BackendRequest", "BucketPolicy", "CudaOptions",
           "OrtOptions", "SplitOptions", "TensorSpec", "TorchOptions", "backend_options", "open_backend"]
