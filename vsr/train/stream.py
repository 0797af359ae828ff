"""Training batches made ahead of the step, in worker processes: :class:`BatchStream`.

:meth:`vsr.train.data.PairSampler.batch_uint8` is a function of the seed and the iteration alone, so a batch can
be made in any process, by any number of them, and a resumed run still sees the batches an unbroken run saw.  The
workers are torch DataLoader workers over the iteration numbers, which hand the batches back in order:

* forked from a fork server (multiprocessing's ``forkserver``: a fresh interpreter that has imported this
  module, torch and numpy and run nothing), never from a process whose torch and OpenMP threads are running; the
  server is started once per process, so a stream's workers start in well under a second after the first;
  they ignore Ctrl-C, which stops them through the training process;
* one thread each (BLAS, OpenMP, OpenCV, torch): N workers busy N cores.  A batch's small matrix products
  (MATLAB bicubic x1/4) made it 14x slower with OpenBLAS's default threads than with one on the 2-core machine
  (docs/benchmarks.md, issue 31);
* each holds its own copy of the still images (sent once, at its start) and decodes the video segments of the
  pool epochs it meets;
* uint8 tensors in shared memory (a quarter of float32's bytes), pinned for a GPU; as many batches in flight as
  ``/dev/shm`` has room for, at most ``prefetch`` per worker; a worker that cannot allocate its batch there (the
  room taken since) sends back a one-line :class:`~vsr.errors.VsrError`, which stops the run;
* stopped and joined when the stream is left: at the end, on an error or Ctrl-C, or when a time slice ends early;
  a worker whose training process died (SIGKILL, SIGTERM) ends within a second.  A worker's
  :class:`~vsr.errors.VsrError` (bad data) is raised here as itself, on one line; a worker that dies (killed, out
  of memory) is a one-line :class:`~vsr.errors.VsrError` too.

0 workers: each batch is made in this process when the step asks for it, as before.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import multiprocessing
import multiprocessing.forkserver
import multiprocessing.resource_tracker
import os
import shutil
import signal
import sys
import threading
import time

import torch

from vsr import interrupt
from vsr.errors import VsrError, printable
from vsr.files import environment
from vsr.machine import usable_cores
from vsr.train.data import PairSampler

log = logging.getLogger(__name__)

# Read by numpy's OpenBLAS, torch's OpenMP and MKL when the fork server imports them: one thread each (the
# workers forked from it inherit them).
_ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
# Errors a worker sends back as they are (the CLI prints them on one line); anything else is a bug, which keeps
# the DataLoader's report of the worker's traceback.
_USER_ERRORS = (VsrError, OSError, MemoryError)


def default_workers() -> int:
    """All the cores this process may run on but one (the training step's)."""
    return max(0, usable_cores() - 1)


class _Batches(torch.utils.data.Dataset):
    """``dataset[i]``: the uint8 tensors of iteration ``i``, or the user error that making them raised."""

    def __init__(self, sampler: PairSampler):
        self.sampler = sampler

    def __getitem__(self, iteration: int):
        try:
            lr, hr = self.sampler.batch_uint8(iteration)
        except _USER_ERRORS as e:
            return e
        lr, hr = torch.from_numpy(lr), torch.from_numpy(hr)
        try:
            # here, not in the queue's feeder thread: there a full /dev/shm was a traceback and a batch never sent,
            # and the training process waited for it for ever
            lr.share_memory_(), hr.share_memory_()
        except (RuntimeError, OSError) as e:
            return VsrError(f"a batch worker cannot allocate shared memory for iteration {iteration}'s batch "
                            f"({_first_line(e)}): free /dev/shm, or fewer --workers (0: batches made in the "
                            "training process)")
        return lr, hr


def _first_line(e: BaseException) -> str:
    return printable(str(e).splitlines()[0] if str(e) else type(e).__name__)[:200]


TRACKER_QUIET = "ignore::UserWarning:multiprocessing.resource_tracker"  # (a -W option)


def _fork_server():
    """multiprocessing's fork server, started (once) with one thread per library and Ctrl-C held back: the server
    and the workers forked from it leave an interrupt to the training process, which stops them (a server
    interrupted while importing torch would print a traceback after ``vsr: interrupted``).  Called inside
    :func:`vsr.interrupt.deferred`: a stop that comes meanwhile is raised once the server is started."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["__main__", "vsr.train.stream"])
    main = threading.current_thread() is threading.main_thread()
    # multiprocessing's resource tracker (spawned first, with this interpreter's -W options) unlinks the batch
    # queues' semaphores that a stopped run leaves; that is its job, not a leak to warn the user of after
    # `vsr: interrupted` (a run stopped while a worker held one printed two warnings and their source lines)
    if TRACKER_QUIET not in sys.warnoptions:
        sys.warnoptions.append(TRACKER_QUIET)
    with environment(_ONE_THREAD):  # what they load reads it: one thread each
        # the tracker first: its start unblocks the signals it blocked, which would undo the hold below
        multiprocessing.resource_tracker.ensure_running()
        # Ctrl-C blocked, not ignored: the server inherits the block (it ignores Ctrl-C from then on), while a
        # Ctrl-C that comes meanwhile waits here, where ignoring it lost it (the run went on to its end)
        with interrupt.held((signal.SIGINT,)) if main else contextlib.nullcontext():
            multiprocessing.forkserver.ensure_running()  # spawns it, not waiting for its imports
    return ctx


def _worker_init(parent: int, worker_id: int) -> None:
    import cv2

    # Ctrl-C ignored, as the fork server it comes from does, and no longer blocked (held as the server started)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, (signal.SIGINT,))
    cv2.setNumThreads(1)
    torch.set_num_threads(1)
    sys.excepthook = functools.partial(_quiet_when_gone, sys.excepthook)
    threading.Thread(target=_end_with, args=(parent,), name="vsr-parent-watch", daemon=True).start()


_GONE = (BrokenPipeError, ConnectionResetError, EOFError)


def _quiet_when_gone(hook, kind, value, tb) -> None:
    """A worker's ``sys.excepthook``: silent on a broken connection to the training process.  A batch's shared
    memory reaches that process through multiprocessing's resource sharer, a thread of this worker that reports
    its errors through ``sys.excepthook``; when Ctrl-C ends the training process in the middle of a hand-over the
    send fails with a broken pipe, whose traceback the worker would print on the terminal after `vsr: interrupted`
    (the worker shares its stderr).  Any other error is reported as before."""
    if not issubclass(kind, _GONE):
        hook(kind, value, tb)


def _end_with(parent: int) -> None:
    """End this worker once the training process is gone (killed, or ended without stopping its workers).

    A worker's parent is the fork server, which outlives the training process while a worker holds its pipe, so
    the DataLoader's own check (is my parent still the one I started with?) would keep both alive for ever.
    """
    while True:
        time.sleep(1.0)
        try:
            with open(f"/proc/{parent}/stat", encoding="ascii") as f:
                alive = f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")  # a zombie is dead
        except FileNotFoundError:
            alive = False
        except OSError:  # no /proc: ask the kernel
            try:
                os.kill(parent, 0)
                alive = True
            except ProcessLookupError:
                alive = False
        if not alive:
            os._exit(0)




def batch_bytes(sampler: PairSampler) -> int:
    """Bytes of one uint8 batch: ``N * 3 * p^2 * (T + 16)`` (the LR window and the 4x HR centre frame)."""
    return sampler.batch_size * 3 * sampler.lr_patch ** 2 * (sampler.num_frame + 16)


def in_flight(workers: int, prefetch: int, batch: int, shm_free: int) -> tuple[int, int]:
    """``(workers, prefetch)`` whose batches in flight (``workers * prefetch``) take at most half of ``shm_free``
    bytes of shared memory: fewer per worker first, then fewer workers (0: none fit, make them in-process)."""
    room = shm_free // 2 // max(batch, 1)
    if room >= workers * prefetch:
        return workers, prefetch
    if room >= workers:
        return workers, room // workers
    return room, 1


class BatchStream:
    """The batches of iterations ``start, ..., end - 1`` in order: ``lr (N, T, 3, h, w)`` and ``hr (N, 3, 4h, 4w)``
    uint8 tensors, made by ``workers`` processes ahead of the step (0: in this process, when asked).

    A context manager: leaving it stops the workers.  ``wait_s``: the time ``next()`` has waited so far.
    """

    def __init__(self, sampler: PairSampler, start: int, end: int, *, workers: int = 0, pin_memory: bool = False,
                 prefetch: int = 2):
        self.sampler, self.iteration, self.end = sampler, start, end
        self.workers, self.prefetch, self.pin_memory = workers, prefetch, pin_memory
        self.asked = workers
        self.why: str | None = None  # why fewer workers than asked run (None: as asked)
        self.wait_s = 0.0
        self._it = None

    def __enter__(self) -> "BatchStream":
        if self.workers and self.end > self.iteration:
            self._start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _start(self) -> None:
        shm = shutil.disk_usage("/dev/shm").free if os.path.isdir("/dev/shm") else 1 << 40
        workers, prefetch = in_flight(self.workers, self.prefetch, batch_bytes(self.sampler), shm)
        if workers < self.workers:
            self.why = (f"/dev/shm has {shm >> 20} MiB free, a batch takes {batch_bytes(self.sampler) / 2**20:.1f} "
                        f"MiB: {workers} x {prefetch} batches in flight fit in half of it")
            log.warning("%d batch workers instead of %d: %s", workers, self.workers, self.why)
        self.workers, self.prefetch = workers, prefetch
        if not workers:
            return
        with interrupt.deferred("the batch workers' start"):
            context = _fork_server()
        loader = torch.utils.data.DataLoader(
            _Batches(self.sampler), batch_size=None, sampler=range(self.iteration, self.end), num_workers=workers,
            prefetch_factor=prefetch, pin_memory=self.pin_memory, multiprocessing_context=context,
            worker_init_fn=functools.partial(_worker_init, os.getpid()),
            # its own generator: the DataLoader draws its workers' seeds (unused here) from it, not from torch's
            # global one, whose state a checkpoint holds
            generator=torch.Generator().manual_seed(0))
        # A stop while the workers start waits for them: one cut off here was left to read its start-up data from a
        # training process gone (a traceback after `vsr: interrupted`), as __exit__ does not run when __enter__ fails
        try:
            with interrupt.deferred("the batch workers' start"):
                self._it = iter(loader)  # starts the workers
        except BaseException:
            self.close()
            raise

    def __iter__(self) -> "BatchStream":
        return self

    def __next__(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.iteration >= self.end:
            raise StopIteration
        t0 = time.perf_counter()
        try:
            item = self._from_workers() if self._it is not None else self._here()
        finally:
            self.wait_s += time.perf_counter() - t0
        if isinstance(item, BaseException):
            raise item
        self.iteration += 1
        return item

    def _here(self):
        lr, hr = self.sampler.batch_uint8(self.iteration)
        return torch.from_numpy(lr), torch.from_numpy(hr)

    def _from_workers(self):
        try:
            return next(self._it)
        except RuntimeError as e:
            if "DataLoader worker" not in str(e):
                raise
            self.close()
            raise VsrError(f"a batch worker process stopped ({printable(e)}); "
                           "fewer --workers, or --workers 0 (batches made in the training process)") from None

    def close(self) -> None:
        """Stop the workers and wait for them (a worker still making a batch is ended after 5 s)."""
        it, self._it = self._it, None
        if it is not None:
            it._shutdown_workers()
