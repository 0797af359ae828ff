"""The CUDA runtime: EDVR's segments on an NVIDIA GPU, bridged by vsr's CUDA kernels (:mod:`vsr.kernels.cuda`).

* :mod:`~vsr.backends.cuda.bridges` -- the segments: the torch model with its DCN and PixelShuffle modules on
  vsr's kernels;
* :mod:`~vsr.backends.cuda.runtime` -- :class:`CudaTorchBackend`: fp16/fp32, CUDA graphs, each frame's features
  once;
* :mod:`~vsr.backends.cuda.layout` -- where its tensors are channels-last (decided there, once);
* :mod:`~vsr.backends.cuda.graphs` -- its CUDA graphs in one pool, and their memory counted;
* :mod:`~vsr.backends.cuda.feature_store` -- each frame's features kept on the device;
* :mod:`~vsr.backends.cuda.transfer` -- host <-> device copies; :mod:`~vsr.backends.cuda.planes` -- what is
  downloaded (the sink's planes), made on the device;
* :mod:`~vsr.backends.cuda.memory` -- what a run takes on the device, measured for the memory plan;
* :mod:`~vsr.backends.cuda.engines` -- :class:`CudaTensorRTBackend`: the split plan's segments as TensorRT
  engines on device buffers, the same bridges between them;
* :mod:`~vsr.backends.cuda.tensors` -- the kernels on torch tensors, on torch's stream;
* :mod:`~vsr.backends.cuda.dcn` -- the DCN: vsr's sampling kernel, then torch's matrix product (NCHW or NHWC);
* :mod:`~vsr.backends.cuda.keys` -- cache keys from the device and the software versions.

* :mod:`~vsr.backends.cuda.options` -- :class:`CudaOptions` and whether the runtime can run here.

Entry point: :func:`vsr.backends.open_backend` with :class:`vsr.backends.CudaOptions`.  This module registers the
runtime (:mod:`vsr.backends.registry`, the last line) and imports nothing heavy: torch waits for a call.
"""

from __future__ import annotations

import importlib.util
import logging

from vsr.backends.cuda import options as _options
from vsr.backends.cuda.options import CudaOptions
from vsr.backends.registry import BackendKind, register
from vsr.errors import BackendError

log = logging.getLogger(__name__)


def resolve_device(options: CudaOptions):
    """The ``torch.device`` of ``options``; a BackendError (one line) when it is a GPU torch does not see."""
    import torch

    name = options.device or "cuda"
    try:
        device = torch.device(name)
    except RuntimeError:
        raise BackendError(f"CUDA backend: {name!r} is not a device (cuda, cuda:1, or cpu to emulate)") from None
    if device.type == "cpu":
        return torch.device("cpu")  # "cpu:1" (a worker's device name) is the one CPU: tensors say "cpu"
    if device.type != "cuda":
        raise BackendError(f"CUDA backend: {name!r} is not a CUDA device")
    if not torch.cuda.is_available():
        raise BackendError("--backend cuda needs an NVIDIA GPU, and torch sees none here "
                           f"(torch {torch.__version__}); use --backend auto")
    if (device.index or 0) >= torch.cuda.device_count():
        raise BackendError(f"CUDA backend: no device {name} (torch sees {torch.cuda.device_count()})")
    return device if device.index is not None else torch.device("cuda", torch.cuda.current_device())


def device_list(text: str) -> list[str]:
    """``--devices``: ``all`` (every GPU torch sees), GPU indices ``0,1``, or device names (``cuda:1``; ``cpu`` or
    ``cpu:N``: the CPU emulation, for tests) -> torch device names, one per worker; a BackendError (one line) for
    a GPU that is not there."""
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if text.strip() == "all":
        if not count:
            raise BackendError("--devices all: torch sees no GPU here")
        return [f"cuda:{i}" for i in range(count)]
    names = [f"cuda:{t}" if t.isdigit() else t for t in (t.strip() for t in text.split(","))]
    for name in names:
        try:
            device = torch.device(name)
        except RuntimeError:
            raise BackendError(f"--devices: {name!r} is not a device (all, 0,1, cuda:1, or cpu to emulate)") from None
        if device.type == "cuda" and (device.index or 0) >= count:
            raise BackendError(f"--devices: no GPU {name} (torch sees {count})")
        if device.type not in ("cuda", "cpu"):
            raise BackendError(f"--devices: {name!r} is not a CUDA device")
    return names


def check_device(options: CudaOptions) -> None:
    """Raise the one-line BackendError of :func:`resolve_device` before anything heavy is loaded."""
    resolve_device(options)


def segment_runtime(options: CudaOptions, device) -> str:
    """"tensorrt" or "torch": what runs the segments (``auto``: TensorRT where it imports, on a GPU)."""
    has_trt = importlib.util.find_spec("tensorrt") is not None
    if options.segments == "tensorrt":
        if not has_trt or device.type != "cuda":
            raise BackendError("CUDA segments 'tensorrt' need the tensorrt package and a GPU")
        return "tensorrt"
    if options.segments == "auto" and has_trt and device.type == "cuda":
        return "tensorrt"
    return "torch"


def open_cuda_backend(model, config, options: CudaOptions):
    """The CUDA runtime for ``model`` on ``options.device`` (see the module's docstring)."""
    device = resolve_device(options)
    if segment_runtime(options, device) == "tensorrt":
        from vsr.backends.cuda.engines import CudaTensorRTBackend

        return CudaTensorRTBackend.from_model(model, config, options, device)
    from vsr.backends.cuda.runtime import CudaTorchBackend

    return CudaTorchBackend(model, config, options, device)


def _available() -> str | None:
    # looked up at call time: tests stand in a GPU there
    return None if _options.cuda_available() else "no CUDA GPU with a kernel launcher (cupy or pycuda) here"


def _make(threads: int | None = None, stream_features: bool = True, **_others) -> CudaOptions:
    return CudaOptions(stream_features=stream_features)


__all__ = ["CudaOptions", "check_device", "device_list", "open_cuda_backend", "resolve_device", "segment_runtime"]

# auto's first choice where it runs: a GPU is far faster than any CPU plan
register(BackendKind("cuda", "cuda", None, CudaOptions, open_cuda_backend, _make, available=_available,
                     check=check_device, auto=0))
