"""Worker threads for bridge kernels: one Python thread per core, each with a single-threaded BLAS.

The DCN kernel runs independent tiles (gather -> sgemm) on a few threads.  numba's gathers release the GIL
and so does numpy's ``dot``; what must not happen is each thread's sgemm fanning out to BLAS's own thread
pool (2 cores x 2 BLAS threads fight for the same cores).  OpenBLAS >= 0.3.27 offers
``openblas_set_num_threads_local``, a per-thread setting: each worker sets it to 1 for itself and leaves the
rest of the process alone.  When numpy's BLAS does not offer it (MKL, Accelerate, an older OpenBLAS), the kernel
falls back to one thread calling a multi-threaded sgemm (see :func:`thread_local_blas_available`).
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
from concurrent.futures import ThreadPoolExecutor

from vsr.machine import usable_cores


@functools.cache
def _set_local_threads():
    """``openblas_set_num_threads_local`` of the OpenBLAS numpy has loaded, or None."""
    import numpy  # noqa: F401  (makes sure numpy's BLAS is loaded before /proc/self/maps is read)

    try:
        with open("/proc/self/maps") as f:
            libs = {parts[-1] for parts in map(str.split, f) if len(parts) >= 6 and "openblas" in parts[-1].lower()}
    except OSError:
        return None
    for path in sorted(libs):
        try:
            fn = ctypes.CDLL(path).openblas_set_num_threads_local
        except (OSError, AttributeError):
            continue
        fn.argtypes = [ctypes.c_int]
        fn.restype = ctypes.c_int
        return fn
    return None


def thread_local_blas_available() -> bool:
    return _set_local_threads() is not None


_configured: int | None = None  # --threads (configure_kernel_threads)
_default: int | None = None  # the default, worked out once: reading the cgroup's files took ~150 us a kernel call


def configure_kernel_threads(threads: int | None) -> None:
    """Use ``threads`` cores for bridge kernels from now on (the worker pool and numba's parallel loops); None
    (or 0): the default, worked out again now, as a run sets up (a worker's share, a quota as they are now)."""
    global _configured, _default
    import numba

    before = default_threads()
    _configured, _default = (max(1, int(threads)) if threads else None), None
    numba.set_num_threads(min(default_threads(), numba.config.NUMBA_NUM_THREADS))
    if default_threads() != before:
        shared_workers.cache_clear()


def default_threads() -> int:
    """:func:`configure_kernel_threads`' value, else ``$VSR_KERNEL_THREADS``, else numba's thread count (which
    honours ``$NUMBA_NUM_THREADS`` and the affinity mask), or fewer where a cgroup's CPU quota or a worker's share
    is lower: worked out on the first call and by :func:`configure_kernel_threads`, not on every kernel call."""
    global _default
    if _configured:
        return _configured
    if _default is None:
        env = os.environ.get("VSR_KERNEL_THREADS")
        if env:
            _default = max(1, int(env))
        else:
            import numba

            _default = max(1, min(int(numba.config.NUMBA_NUM_THREADS), usable_cores()))
    return _default


def parallel_loop_threads() -> int:
    """Run numba's parallel loops (``prange``) called from this thread on :func:`default_threads` cores; the count.
    numba's count is per thread and a new thread (a pipeline stage's) starts at ``NUMBA_NUM_THREADS``, the affinity
    mask's, whatever a cgroup's CPU quota, a worker's share or ``--threads`` allow: so each kernel sets it where
    it runs (about 2 us a call)."""
    import numba

    threads = min(default_threads(), int(numba.config.NUMBA_NUM_THREADS))
    if numba.get_num_threads() != threads:
        numba.set_num_threads(threads)
    return threads


class KernelWorkers:
    """A small pool whose threads each use a single-threaded BLAS.  ``map_tiles(fn, n)`` calls
    ``fn(worker_index, tile_index)`` for every tile, tiles handed out dynamically."""

    def __init__(self, threads: int | None = None):
        self.threads = threads or default_threads()
        if not thread_local_blas_available():
            self.threads = 1  # one caller, multi-threaded BLAS
        self._pool = None

    def _init_worker(self) -> None:
        fn = _set_local_threads()
        if fn is not None:
            fn(1)

    def map_tiles(self, fn, n_tiles: int) -> None:
        if not thread_local_blas_available():
            for i in range(n_tiles):
                fn(0, i)
            return
        # Even with one thread the tiles run on a pool thread: there BLAS is single-threaded, in the caller's
        # thread it would fan each small sgemm out to its own threads (measured 3x slower on EDVR's L3 DCN).
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="vsr-kernel",
                                            initializer=self._init_worker)
        lock = threading.Lock()
        next_tile = [0]

        def worker(w: int) -> None:
            while True:
                with lock:
                    i = next_tile[0]
                    next_tile[0] += 1
                if i >= n_tiles:
                    return
                fn(w, i)

        for f in [self._pool.submit(worker, w) for w in range(self.threads)]:
            f.result()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None


@functools.cache
def shared_workers() -> KernelWorkers:
    """The process-wide pool every bridge kernel uses by default."""
    return KernelWorkers()
