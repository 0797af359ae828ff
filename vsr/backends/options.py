"""The knobs of each backend gathered (one frozen dataclass per backend, defined in its own room and registered
there, :mod:`vsr.backends.registry`: the CUDA runtime's in :mod:`vsr.backends.cuda.options`), and
:func:`backend_options`: the options the CLI's names select.

Every backend pads frames to the shape bucket of ``buckets`` (None: ``configs/plan/buckets.toml``) and crops the
output back, so all of them give the same pixels for the same frame.
"""

from __future__ import annotations

import os
from typing import Union

from vsr.backends.cuda.options import SEGMENT_RUNTIMES, CudaOptions
from vsr.backends.ort import OrtOptions
from vsr.backends.precision import AUTO, PrecisionChoice, choose_precision
from vsr.backends.registry import choose
from vsr.backends.split import INT8_SCALES, SPLIT_PRECISIONS, SplitOptions
from vsr.backends.torch_backend import TorchOptions

PRECISIONS = ("fp16", "fp32")
# The most inference threads an option may ask for: more never help, and a count far beyond the machine fails
# deep in torch or ONNX Runtime ("can't start new thread", or the process killed while it starts them).
MAX_THREADS = max(256, os.cpu_count() or 1)


BackendOptions = Union[TorchOptions, OrtOptions, SplitOptions, CudaOptions]

__all__ = ["INT8_SCALES", "PRECISIONS", "SEGMENT_RUNTIMES", "SPLIT_PRECISIONS",
           "BackendOptions", "CudaOptions", "OrtOptions", "SplitOptions", "TorchOptions", "backend_options",
           "precision_choice"]


def precision_choice(backend: str = "auto", plan: str = "auto", precision: str = AUTO, isa: str | None = None,
                     given_by: str = "--precision") -> PrecisionChoice | None:
    """The precision ``precision`` (auto | fp32 | int8) means for the backend that ``backend`` and ``plan`` select,
    on a CPU whose int8 ISA is ``isa`` (None: this one's): :func:`vsr.backends.precision.choose_precision` where
    that backend has an int8 plan; None where it has none and ``auto`` leaves it its own precision (the CUDA
    runtime, PyTorch eager, the whole graph)."""
    if precision == AUTO and "int8" not in choose(backend, plan, "fp32").precisions:
        return None
    return choose_precision(precision, isa, given_by=given_by)


def backend_options(backend: str = "auto", plan: str = "auto", threads: int | None = None,
                    precision: str = "fp32", int8_scales: str = "runtime",
                    int8_calibration: str | None = None, stream_features: bool = True) -> BackendOptions:
    """The options the CLI names select (:func:`vsr.backends.registry.choose`): ``backend`` auto or a registered
    backend (ort | torch | cuda), ``plan`` auto or a plan one offers (whole | split); ``precision`` int8 takes
    the split plan (the only one with int8 segments); auto is :func:`precision_choice`'s (int8 on the split plan
    where this CPU's int8 ISA pays, ``configs/quant/precision.toml``; else fp32).

    ``auto`` is the CUDA runtime where torch sees a GPU; elsewhere ONNX Runtime with the split plan.
    ``stream_features`` False: every window computes its frames' features (where a backend streams them).
    """
    if precision == AUTO:
        chosen = precision_choice(backend, plan, precision)
        precision = "fp32" if chosen is None else chosen.precision
    kind = choose(backend, plan, precision)
    return kind.make(threads=threads, precision=precision, int8_scales=int8_scales,
                     int8_calibration=int8_calibration, stream_features=stream_features)
