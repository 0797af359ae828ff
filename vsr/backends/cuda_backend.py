"""The CUDA runtime's registration: how to open it and whether it runs here; the runtime itself is
:mod:`vsr.backends.cuda`.  Its options, :class:`~vsr.backends.options.CudaOptions`, stay in ``options`` for now:
the runtime's package imports them from there, and their own file would make an import cycle through it."""

from __future__ import annotations

from vsr.backends import options as _options
from vsr.backends.options import CudaOptions
from vsr.backends.registry import BackendKind, register

def _open(model, config, options: CudaOptions):
    from vsr.backends.cuda import open_cuda_backend

    return open_cuda_backend(model, config, options)


def _check(options: CudaOptions) -> None:
    from vsr.backends.cuda import check_device

    check_device(options)  # before the model loads: no GPU is one line, at once


def _available() -> str | None:
    # looked up at call time: tests stand in a GPU there
    return None if _options.cuda_available() else "no CUDA GPU with a kernel launcher (cupy or pycuda) here"


def _make(threads: int | None = None, stream_features: bool = True, **_others) -> CudaOptions:
    return CudaOptions(stream_features=stream_features)


# auto's first choice where it runs: a GPU is far faster than any CPU plan
register(BackendKind("cuda", "cuda", None, CudaOptions, _open, _make, available=_available, check=_check, auto=0))
