"""The knobs of each backend, one frozen dataclass per backend (what :func:`vsr.backends.open_backend` takes).

Every backend pads frames to the shape bucket of ``buckets`` (None: ``configs/plan/buckets.toml``) and crops the
output back, so all of them give the same pixels for the same frame.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Union

from vsr.backends.buckets import BucketPolicy
from vsr.errors import BackendError

BACKENDS = ("auto", "ort", "torch", "cuda")
PRECISIONS = ("fp16", "fp32")
CUDA_PRECISIONS = ("fp16", "fp32", "int8")  # int8: TensorRT segments built from the Q/DQ export
CUDA_OUTPUTS = ("float16", "uint8", "float32")
SEGMENT_RUNTIMES = ("auto", "torch", "tensorrt")
PLANS = ("auto", "whole", "split")
SPLIT_PRECISIONS = ("fp32", "int8")
INT8_SCALES = ("runtime", "static", "exact")


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
    cache_dir: plan cache root (default ``<engine dir>/plans``, see :func:`vsr.files.engine_dir`);
    precision: "fp32" | "int8" (segments' convs in int8, :mod:`vsr.quant`);
    int8_scales: activation scales of int8 segments, "runtime" (follow the frames) | "static" (calibration);
    int8_calibration: folder of PNG frames that calibrates int8 plans (None: synthetic frames).
    """

    threads: int | None = None
    bridge_ops: tuple[str, ...] | None = None
    fuse_activations: bool = True
    cache_dir: str | None = None
    buckets: BucketPolicy | None = None
    precision: str = "fp32"
    int8_scales: str = "runtime"
    int8_calibration: str | None = None

    def __post_init__(self):
        if self.precision not in SPLIT_PRECISIONS:
            raise BackendError(f"unknown precision {self.precision!r} (choose from {', '.join(SPLIT_PRECISIONS)})")
        if self.int8_scales not in INT8_SCALES:
            raise BackendError(f"unknown int8 scales {self.int8_scales!r} (choose from {', '.join(INT8_SCALES)})")


@dataclass(frozen=True)
class CudaOptions:
    """EDVR on an NVIDIA GPU: the model's segments on torch (or TensorRT engines), bridged by vsr's CUDA kernels.

    device: "cuda", "cuda:1", ... (None: "cuda"); "cpu" is the explicit CPU emulation (tests, CI): the same
    runtime with the kernels on the CPU harness;  precision: fp16 | fp32;  cuda_graphs: capture the whole
    bridged model once per input shape and replay it (needs the cupy launcher; ignored on the CPU);
    launcher: "auto" | "cupy" | "pycuda" | "host" (see :mod:`vsr.kernels.cuda.launch`);  segments: "auto"
    (TensorRT engines when ``tensorrt`` imports, else torch) | "torch" | "tensorrt";  dcn_gemm: the DCN's
    matrix product on "torch" (cuBLAS) after vsr's sampling kernel, or vsr's own "kernel";  cache_dir: engine
    and kernel caches (default ``<engine dir>/cuda``);  output: the dtype ``infer`` downloads, "float16" (enough
    for 10-bit output), "uint8" (RGB quantised on the device: a quarter of float32's bytes) or "float32";
    precision "int8" takes TensorRT segments (the Q/DQ export).  Tuning: fp16 and cuda_graphs on; a larger
    --batch.
    """

    device: str | None = None
    precision: str = "fp16"
    cuda_graphs: bool = True
    launcher: str = "auto"
    segments: str = "auto"
    dcn_gemm: str = "torch"
    cache_dir: str | None = None
    buckets: BucketPolicy | None = None
    output: str = "float16"

    def __post_init__(self):
        if self.precision not in CUDA_PRECISIONS:
            raise BackendError(f"CUDA precision {self.precision!r}: choose from {', '.join(CUDA_PRECISIONS)}")
        if self.precision == "int8" and self.segments != "tensorrt":
            raise BackendError("CUDA precision int8 runs on TensorRT segments only (segments='tensorrt')")
        if self.output not in CUDA_OUTPUTS:
            raise BackendError(f"CUDA output {self.output!r}: choose from {', '.join(CUDA_OUTPUTS)}")
        if self.segments not in SEGMENT_RUNTIMES:
            raise BackendError(f"CUDA segments {self.segments!r}: choose from {', '.join(SEGMENT_RUNTIMES)}")
        if self.dcn_gemm not in ("torch", "kernel"):
            raise BackendError(f"CUDA dcn_gemm {self.dcn_gemm!r}: choose torch or kernel")


BackendOptions = Union[TorchOptions, OrtOptions, SplitOptions, CudaOptions]


def cuda_available() -> bool:
    """Whether the CUDA runtime can run here: torch sees a CUDA GPU and a GPU kernel launcher (cupy or pycuda)
    is installed.  A GPU without a launcher is logged: ``auto`` then stays on ONNX Runtime."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    if not torch.cuda.is_available():
        return False
    if all(importlib.util.find_spec(m) is None for m in ("cupy", "pycuda")):
        logging.getLogger(__name__).info("a CUDA GPU but neither cupy nor pycuda: backend auto is ONNX Runtime")
        return False
    return True


def backend_options(backend: str = "auto", plan: str = "auto", threads: int | None = None,
                    precision: str = "fp32", int8_scales: str = "runtime",
                    int8_calibration: str | None = None) -> BackendOptions:
    """The options the CLI names select: ``backend`` auto | ort | torch | cuda, ``plan`` auto | whole | split;
    ``precision`` int8 takes the split plan (the only one with int8 segments).

    ``auto`` is the CUDA runtime where torch sees a GPU; elsewhere ONNX Runtime with the split plan, measured
    faster than the whole graph on the 2-core CPU machine (1.17x wall, 1.20x CPU on EDVR-M 180x320;
    docs/benchmarks.md, "Subgraph plan and bridge kernels").
    """
    if backend not in BACKENDS:
        raise BackendError(f"unknown backend {backend!r} (choose from {', '.join(BACKENDS)})")
    if plan not in PLANS:
        raise BackendError(f"unknown plan {plan!r} (choose from {', '.join(PLANS)})")
    if precision != "fp32" and (backend in ("torch", "cuda") or plan == "whole"):
        raise BackendError(f"precision {precision} runs on the split plan only (not --backend {backend} "
                           f"--plan {plan})")
    if backend == "torch":
        return TorchOptions(threads=threads)
    if backend == "cuda" or (backend == "auto" and plan == "auto" and precision == "fp32" and cuda_available()):
        return CudaOptions()
    if plan == "whole":
        return OrtOptions(threads=threads)
    return SplitOptions(threads=threads, precision=precision, int8_scales=int8_scales,
                        int8_calibration=int8_calibration)
