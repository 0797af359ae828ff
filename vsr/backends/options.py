"""The knobs of each backend, one frozen dataclass per backend (what :func:`vsr.backends.open_backend` takes).

Every backend pads frames to the shape bucket of ``buckets`` (None: ``configs/plan/buckets.toml``) and crops the
output back, so all of them give the same pixels for the same frame.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from vsr.backends.buckets import BucketPolicy
from vsr.errors import BackendError

BACKENDS = ("auto", "ort", "torch")
PLANS = ("auto", "whole", "split")


@dataclass(frozen=True)
class TorchOptions:
    """PyTorch eager (the reference).  device: "cpu", "cuda", ... (None: CUDA when available); threads: torch's
    intra-op threads (None: torch's default)."""

    device: str | None = None
    threads: int | None = None
    buckets: BucketPolicy | None = None


@dataclass(frozen=True)
class OrtOptions:
    """The whole exported graph in one ONNX Runtime session per bucket.

    threads: intra-op threads (default: all cores); providers: explicit list or the best available (TensorRT EP,
    CUDA EP, CPU EP); io_binding: bind inputs/outputs to preallocated buffers (saves a copy per run).
    """

    threads: int | None = None
    providers: tuple[str, ...] | None = None
    io_binding: bool = True
    buckets: BucketPolicy | None = None


@dataclass(frozen=True)
class SplitOptions:
    """The subgraph plan: ONNX Runtime segments bridged by vsr's own kernels (the default).

    threads: cores for ONNX Runtime segments and vsr's kernels (default: all);
    bridge_ops: op types cut out of the graph and run on vsr's kernels (None: DCN and PixelShuffle,
    ``vsr.plan.partition.DEFAULT_BRIDGE_OPS``);
    fuse_activations: let a kernel apply the LeakyReLU after it;
    cache_dir: plan cache root (default ``<engine dir>/plans``, see :func:`vsr.files.engine_dir`).
    """

    threads: int | None = None
    bridge_ops: tuple[str, ...] | None = None
    fuse_activations: bool = True
    cache_dir: str | None = None
    buckets: BucketPolicy | None = None


BackendOptions = Union[TorchOptions, OrtOptions, SplitOptions]


def backend_options(backend: str = "auto", plan: str = "auto", threads: int | None = None) -> BackendOptions:
    """The options the CLI names select: ``backend`` auto | ort | torch, ``plan`` auto | whole | split.

    ``auto`` is ONNX Runtime with the split plan, measured faster than the whole graph on the 2-core CPU machine
    (1.17x wall, 1.20x CPU on EDVR-M 180x320; docs/benchmarks.md, "Subgraph plan and bridge kernels").
    """
    if backend not in BACKENDS:
        raise BackendError(f"unknown backend {backend!r} (choose from {', '.join(BACKENDS)})")
    if plan not in PLANS:
        raise BackendError(f"unknown plan {plan!r} (choose from {', '.join(PLANS)})")
    if backend == "torch":
        return TorchOptions(threads=threads)
    if plan == "whole":
        return OrtOptions(threads=threads)
    return SplitOptions(threads=threads)
