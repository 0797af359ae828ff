"""The CUDA runtime's options (:class:`CudaOptions`) and whether it can run here (:func:`cuda_available`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from vsr.backends.buckets import BucketPolicy
from vsr.errors import BackendError

CUDA_PRECISIONS = ("fp16", "fp32", "int8")  # int8: TensorRT segments built from the Q/DQ export
CUDA_OUTPUTS = ("float16", "uint8", "float32")
SEGMENT_RUNTIMES = ("auto", "torch", "tensorrt")
CUDA_MEMORY_FORMATS = ("channels_last", "contiguous")  # what vsr.backends.cuda.layout.Layout stores
DCN_GEMMS = ("auto", "torch", "kernel", "fused")  # the DCN's forms (vsr.backends.cuda.bridges.DCNBridge)


@dataclass(frozen=True)
class CudaOptions:
    """EDVR on an NVIDIA GPU: the model's segments on torch (or TensorRT engines), bridged by vsr's CUDA kernels
    (registered by :mod:`vsr.backends.cuda`).

    device: "cuda", "cuda:1", ... (None: "cuda"); "cpu" is the explicit CPU emulation (tests, CI): the same
    runtime with the kernels on the CPU harness;  precision: fp16 | fp32;  cuda_graphs: capture the whole
    bridged model once per input shape and replay it (needs the cupy launcher; ignored on the CPU);
    launcher: "auto" | "cupy" | "pycuda" | "host" (see :mod:`vsr.kernels.cuda.launch`);  segments: "auto"
    (TensorRT engines when ``tensorrt`` imports, else torch) | "torch" | "tensorrt";  dcn_gemm: the DCN's
    matrix product on "torch" (cuBLAS) after vsr's sampling kernel, vsr's own "kernel", or "fused": sampling
    and product in one Triton kernel, no column buffer (:mod:`vsr.kernels.cuda.fused_dcn`; channels-last, torch
    segments); "auto" (default): per DCN and input shape the faster of "torch" and "fused", timed on the GPU at
    the shape's first call (a run's warm-up), "torch" where that cannot be (the CPU emulation, no Triton, TensorRT
    segments);  cache_dir: engine
    and kernel caches (default ``<engine dir>/cuda``);  output: the dtype of the model's RGB output, "float16"
    (enough for 10-bit output), "uint8" (RGB quantised on the device: a quarter of float32's bytes) or "float32";
    device_planes: where the runner asks (``prepare(..., planes=)``), that RGB is converted into the sink's planes on
    the device and those are downloaded (a 4K 8-bit 4:2:0 frame: 12.4 MB), else the RGB is (torch segments only);
    precision "int8" takes TensorRT segments (the Q/DQ export);  memory_format: the torch segments' layout,
    "channels_last" (NHWC: cuDNN's fast kernels and vsr's NHWC bridges) or "contiguous" (NCHW, for comparisons;
    :mod:`vsr.backends.cuda.layout`);  stream_features: each frame's features computed once and kept on the GPU
    for the windows that share the frame (False: every window computes its frames' features, the CLI's
    ``--per-window-features``).  Tuning: fp16, cuda_graphs, device_planes and stream_features on; a larger
    --batch.
    """

    device: str | None = None
    precision: str = "fp16"
    cuda_graphs: bool = True
    launcher: str = "auto"
    segments: str = "auto"
    dcn_gemm: str = "auto"
    cache_dir: str | None = None
    buckets: BucketPolicy | None = None
    output: str = "float16"
    memory_format: str = "channels_last"
    stream_features: bool = True
    device_planes: bool = True

    def __post_init__(self):
        if self.precision not in CUDA_PRECISIONS:
            raise BackendError(f"CUDA precision {self.precision!r}: choose from {', '.join(CUDA_PRECISIONS)}")
        if self.precision == "int8" and self.segments != "tensorrt":
            raise BackendError("CUDA precision int8 runs on TensorRT segments only (segments='tensorrt')")
        if self.output not in CUDA_OUTPUTS:
            raise BackendError(f"CUDA output {self.output!r}: choose from {', '.join(CUDA_OUTPUTS)}")
        if self.segments not in SEGMENT_RUNTIMES:
            raise BackendError(f"CUDA segments {self.segments!r}: choose from {', '.join(SEGMENT_RUNTIMES)}")
        if self.dcn_gemm not in DCN_GEMMS:
            raise BackendError(f"CUDA dcn_gemm {self.dcn_gemm!r}: choose from {', '.join(DCN_GEMMS)}")
        if self.memory_format not in CUDA_MEMORY_FORMATS:
            raise BackendError(f"CUDA memory_format {self.memory_format!r}: choose from "
                               f"{', '.join(CUDA_MEMORY_FORMATS)}")
        if self.dcn_gemm == "fused":
            from vsr.kernels.cuda.fused_dcn import available

            why = available()
            if why is not None:
                raise BackendError(why)
            if self.memory_format != "channels_last" or self.segments == "tensorrt":
                raise BackendError("CUDA dcn_gemm 'fused' runs channels-last on torch segments only")

    @property
    def on_gpu(self) -> bool:
        """Whether the model runs on an NVIDIA GPU (not the CPU emulation): what a run asks of its options."""
        return (self.device or "cuda").startswith("cuda")


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
