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

from dataclasses import dataclass, field, replace

from vsr.backends.base import Backend, FrameKeys, TensorSpec
from vsr.backends.buckets import BucketPolicy
from vsr.backends.options import (BackendOptions, CudaOptions, OrtOptions, SplitOptions, TorchOptions,
                                  backend_options, precision_choice)
from vsr.backends.precision import PrecisionChoice
from vsr.backends.registry import backend_names, kind_of, plan_names


def __getattr__(name: str):
    # the CLI's choices, read from the registry when asked for
    if name == "BACKENDS":
        return backend_names()
    if name == "PLANS":
        return plan_names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def open_backend(weights: str = "default", config=None, options: BackendOptions | None = None) -> Backend:
    """Load the model from ``weights`` (path, ``"default"`` or ``"random"``) and open the backend that
    ``options`` belong to (default: ``SplitOptions()``; :mod:`vsr.backends.registry`)."""
    from vsr.model import load_model

    options = SplitOptions() if options is None else options
    kind = kind_of(options)
    if kind.check is not None:
        kind.check(options)  # before the model loads: a bad choice is one line, at once
    model, cfg = load_model(weights, config)
    return kind.open(model, cfg, options)


@dataclass(frozen=True)
class BackendRequest:
    """A backend still to open: the model (``weights``, ``config``) and the backend's options; ``precision``: how
    ``--precision`` was decided (:func:`~vsr.backends.options.precision_choice`; None: not asked, or a backend
    without an int8 plan), for the run's report."""

    weights: str = "default"
    config: str | None = None
    options: BackendOptions = field(default_factory=SplitOptions)
    precision: PrecisionChoice | None = None

    def check(self) -> None:
        """Raise the one-line error of a backend that cannot run here (``--backend cuda`` and no GPU), before any
        slow work: the weights' measurement of the source, the model's load."""
        kind = kind_of(self.options)
        if kind.check is not None:
            kind.check(self.options)

    def open(self) -> Backend:
        # looked up at call time, so a caller (or a test) that wraps vsr.backends.open_backend is heard
        return open_backend(weights=self.weights, config=self.config, options=self.options)

    def on_device(self, device: str | None) -> "BackendRequest":
        """This request with its model on ``device`` (``cuda:1``, ...) where its backend runs on a device of
        torch's (the CUDA runtime, torch); as it is for the others (ONNX Runtime), or with None."""
        if device is None or not hasattr(self.options, "device"):
            return self
        return replace(self, options=replace(self.options, device=device))


__all__ = ["BACKENDS", "PLANS", "Backend", "BackendOptions", "BackendRequest", "BucketPolicy", "CudaOptions",
           "FrameKeys",
           "OrtOptions", "PrecisionChoice", "SplitOptions", "TensorSpec", "TorchOptions", "backend_options",
           "open_backend", "precision_choice"]
