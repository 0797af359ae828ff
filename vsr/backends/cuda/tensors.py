"""vsr's CUDA kernels on torch tensors, in place, on torch's current stream.

:class:`TensorLauncher` gives :mod:`vsr.kernels.cuda.ops` the launcher interface over torch tensors: ``empty``
allocates with torch (so a CUDA graph capture draws from its private pool) and ``launch`` hands the base
launcher each tensor's memory without a copy:

==========  ==========================================================================================
``cupy``    the data pointer (``np.uint64``) on ``cupy.cuda.ExternalStream(torch's current stream)``, under
            the launcher's device: the kernels queue behind torch's work on the same stream, and a CUDA graph
            capture records them
``pycuda``  the data pointer, launched on the legacy default stream, which is torch's stream unless a caller
            set another; pycuda cannot wrap a foreign stream, so no graph capture with it
``host``    the CPU harness on ``tensor.numpy()`` views of CPU tensors (the CPU emulation: tests and CI)
==========  ==========================================================================================

The base launcher is opened for the tensors' device (``cuda:1`` -> device 1): its kernels are compiled, looked up
and launched there, not on whichever device the opening thread had current.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from vsr.errors import BackendError
from vsr.kernels.cuda.launch import LAUNCHER_ORDER, open_launcher, select_launcher

def torch_dtype(dtype) -> torch.dtype:
    """The torch dtype of a torch or numpy dtype (or its name)."""
    if isinstance(dtype, torch.dtype):
        return dtype
    return torch.from_numpy(np.empty(0, np.dtype(dtype))).dtype


@dataclass(frozen=True)
class _DevicePointer:
    gpudata: np.uintp  # what PyCudaLauncher passes for a "ptr" argument


def _host_view(t: torch.Tensor) -> np.ndarray:
    return t.detach().numpy()


def _cupy_pointer(t: torch.Tensor) -> np.uint64:
    return np.uint64(t.data_ptr())


def _pycuda_pointer(t: torch.Tensor) -> _DevicePointer:
    return _DevicePointer(np.uintp(t.data_ptr()))


_POINTERS = {"host": _host_view, "cupy": _cupy_pointer, "pycuda": _pycuda_pointer}


class TensorLauncher:
    """``base`` (a launcher of :mod:`vsr.kernels.cuda.launch`) over torch tensors on ``device``.

    ``graph_safe``: whether its launches may be captured into a CUDA graph (cupy only); ``l2_cache_bytes``: the
    device's L2 cache (None on the CPU).
    """

    def __init__(self, base, device: torch.device):
        if (device.type == "cuda") == (base.name == "host"):
            raise BackendError(f"kernel launcher {base.name!r} cannot run on tensors of device {device}")
        device = _indexed(device)
        if device.type == "cuda" and base.device != device.index:
            raise BackendError(f"kernel launcher {base.name!r} is bound to device {base.device}, not {device}")
        self.base = base
        self.device = device
        self.name = base.name
        self.graph_safe = base.name == "cupy"
        self._pointer = _POINTERS[base.name]
        self._streams: dict[int, object] = {}
        # the L2 cache the DCN's column chunks are sized to (vsr.kernels.cuda.ops.chunk_for); None: its default
        self.l2_cache_bytes = (torch.cuda.get_device_properties(device).L2_cache_size or None
                               if device.type == "cuda" else None)

    def empty(self, shape, dtype) -> torch.Tensor:
        return torch.empty(tuple(int(v) for v in shape), dtype=torch_dtype(dtype), device=self.device)

    def launch(self, kernel: str, grid, block, *args) -> None:
        values = []
        for a in args:
            if isinstance(a, torch.Tensor):
                if a.device != self.device or not a.is_contiguous():
                    raise ValueError(f"{kernel}: tensors must be contiguous on {self.device}, got {a.device}")
                a = self._pointer(a)
            values.append(a)
        if self.name == "cupy":
            with self.base.bound(), self._stream():  # the device first: cupy checks a stream's against it
                self.base.launch(kernel, grid, block, *values)
            return
        if self.name == "pycuda" and torch.cuda.current_stream(self.device).cuda_stream != 0:
            raise BackendError("the pycuda launcher runs on the default stream only; torch is on another")
        self.base.launch(kernel, grid, block, *values)

    def _stream(self):
        import cupy

        handle = torch.cuda.current_stream(self.device).cuda_stream
        stream = self._streams.get(handle)
        if stream is None:
            stream = self._streams[handle] = cupy.cuda.ExternalStream(handle, self.device.index)
        return stream


def _indexed(device: torch.device) -> torch.device:
    """``cuda`` -> ``cuda:<current>`` (tensors say "cuda:0", never "cuda"); other devices as they are."""
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def open_tensor_launcher(kind: str, device: torch.device, graphs: bool = False,
                         cache_dir: str | None = None) -> TensorLauncher:
    """The launcher ``kind`` for tensors on ``device``; a BackendError (one line) when it cannot run there.

    "auto": the host harness on the CPU; on a GPU the first of pycuda, cupy that opens (the design's order), or
    of cupy, pycuda when ``graphs`` (only cupy's launches can be captured).  ``cache_dir``: compiled kernels.
    """
    device = _indexed(device)
    if kind == "auto":
        gpu = ("cupy", "pycuda") if graphs else ("pycuda", "cupy")
        base = select_launcher(("host",) if device.type == "cpu" else gpu, cache_dir, device.index)
    elif kind in LAUNCHER_ORDER:
        base = open_launcher(kind, cache_dir, device.index)
    else:
        raise BackendError(f"kernel launcher {kind!r}: choose from auto, {', '.join(LAUNCHER_ORDER)}")
    return TensorLauncher(base, device)


def kernel_cache_dir(device: torch.device, root: str | None = None) -> str | None:
    """Where compiled kernels for ``device`` are kept: a folder keyed by the device and the software stack
    (:func:`vsr.backends.cuda.keys.cache_folder`); None on the CPU (the host harness keys its own cache)."""
    if device.type != "cuda":
        return None
    from vsr.backends.cuda.keys import cache_folder, device_facts

    return str(cache_folder(device_facts(device), root, "kernels"))
