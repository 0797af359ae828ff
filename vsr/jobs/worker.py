"""The local worker: claim a chunk from the job store, compute it, commit it; join a job whose chunks are all done.

``run_workers(store, workers=N)`` runs N worker processes (spawned, not forked or threaded: ONNX Runtime and
numba keep per-process thread pools) that share the store with each other and with any other ``vsr jobs run``
on the machine; ``devices=[...]`` runs N per device (``vsr jobs run --devices all``: one per GPU), each with its
own backend on its device -- a spawned worker of GPU ``cuda:N`` sees that GPU alone (``CUDA_VISIBLE_DEVICES``,
:func:`gpu_alone`).  Each claim holds a lease that a heartbeat thread renews every ``lease_s / 4``; a worker killed
at any moment loses only the chunk it held, which goes back to the queue once its lease expires (at once when
its process is known to be gone).  An opened backend is kept for the next chunk of the same model and options.
A worker claims only the chunks of jobs its machine can run (:mod:`vsr.jobs.needs`: no ``--backend cuda`` job
without a GPU); the others stay queued for a worker that can.
"""

from __future__ import annotations

import errno
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from vsr import interrupt
from vsr.errors import BackendError, InputError, VsrError, printable, tell
from vsr.files import environment
from vsr.machine import share_cores, usable_cores
from vsr.jobs.chunks import discard, is_committed, join_chunks, run_chunk, tidy
from vsr.jobs.leases import MAX_ATTEMPTS, Claim, owner_id
from vsr.jobs.needs import Machine, Need, Waiting, waiting_line
from vsr.jobs.outlook import Outlook, Progress
from vsr.jobs.spec import ChunkSpec, JobSpec
from vsr.jobs.store import JobStore, StoreError, store_file_at
from vsr.video.source import SourceChanged

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkerSettings:
    """lease_s: how long a claim stays leased without a heartbeat; poll_s: the wait when nothing can be claimed;
    until_empty: stop when no job is queued, running or waiting (else poll for new jobs until stopped);
    quiet: no line per chunk and job on stderr; max_attempts: a chunk whose worker vanished this often fails its
    job; disk_wait_s: how long a job whose output's disk was full waits before it is tried again; status: where
    a worker shows what a chunk is preparing (loading the model, export, plan, warm-up) and then computing:
    called once per worker process (so a picklable factory: spawned workers get it too), it gives an object
    with ``phase(text, detail=None)`` (``detail()``: the line's text after ``text``, asked at each redraw) and
    ``close()`` (the CLI's status line); None, or ``quiet``: nothing shown; encoder_log: encoders that print to
    the terminal themselves (SVT-AV1, x265) print more than errors; device: the device this worker's backends run
    on (``cuda:1``; :meth:`vsr.backends.BackendRequest.on_device`), None: each job's own; setup: called first in
    each spawned worker process (picklable: the CLI's log and warning lines there as in its own process);
    waiting_line: an idle worker says which jobs it leaves to other machines (one worker of several says it);
    cores: the cores its threads default to (of several workers on a machine, each its share); None: all."""

    lease_s: float = 60.0
    poll_s: float = 1.0
    until_empty: bool = False
    quiet: bool = False
    max_attempts: int = MAX_ATTEMPTS
    disk_wait_s: float = 60.0
    status: Callable[[], Any] | None = None
    encoder_log: bool = False
    device: str | None = None
    setup: Callable[[], None] | None = None
    waiting_line: bool = True
    cores: int | None = None


class _Heartbeat(interrupt.Thread):
    """Renews one claim's lease on its own connection until stopped; ends this process if its parent
    (``vsr jobs run --workers N``) was killed, so no worker outlives it unseen."""

    def __init__(self, path: Path, owner: str, claim: Claim, settings: WorkerSettings, parent: int | None,
                 progress: Progress):
        super().__init__(target=self._beat, name="vsr-heartbeat", daemon=True)
        self.path, self.owner, self.claim, self.settings, self.parent = path, owner, claim, settings, parent
        self.progress = progress
        self.stopped = threading.Event()

    def _beat(self) -> None:
        store = None
        while not self.stopped.wait(self.settings.lease_s / 4):
            if self.parent is not None and os.getppid() != self.parent:
                os._exit(1)
            try:
                store = store or JobStore(self.path)
                if not store.heartbeat(self.owner, self.claim, self.settings.lease_s, self.progress.now()):
                    log.info("job %s: the lease was lost or the job was stopped", self.claim.job)
                    self.progress.stopped = True  # (its line shows no ETA: the job's other chunks do not start)
            except StoreError as e:
                log.warning("heartbeat: %s", e)
        if store is not None:
            store.close()


class _Backends:
    """The backend opened for the last chunk, kept while the next chunk asks for the same model and options."""

    def __init__(self):
        self.request = None
        self.backend = None

    def get(self, request, phase: Callable[[str], None] | None = None):
        if self.backend is None or request != self.request:
            self.backend = None  # the old one goes before the new one loads: two models need not fit at once
            if phase is not None:
                phase("loading model")
            self.backend = request.open()
            self.request = request
        return self.backend


def work(path: str | Path, settings: WorkerSettings = WorkerSettings(), *, parent: int | None = None,
         failed: list[int] | None = None) -> int:
    """One worker in this process until the queue is empty (``until_empty``) or forever; the pieces it did.

    On an interrupt (Ctrl-C, SIGTERM) the claim in progress goes back to the queue and KeyboardInterrupt is
    raised.  A claim whose input is bad fails its job with a one-line message; the worker goes on, and the job's
    id is added to ``failed``.
    """
    store = JobStore(path)
    owner = owner_id()
    backends = _Backends()
    # a job this machine cannot run (no GPU for a --backend cuda job) is left queued for a worker that can
    machine = Machine(settings.device).probe()
    status = settings.status() if settings.status is not None and not settings.quiet else None
    waiting = Waiting(machine) if settings.waiting_line and not (settings.quiet or settings.until_empty) else None
    done = 0
    try:
        while parent is None or os.getppid() == parent:  # a worker whose `vsr jobs run` was killed stops
            interrupt.check()  # a stop that a callback swallowed during the last claim: no new one
            claim = store.claim(owner, settings.lease_s, settings.max_attempts, fits=machine.fits)
            if claim is None:
                if settings.until_empty and not store.pending(fits=machine.fits):
                    return done
                line = waiting.line(store) if waiting is not None else None
                if line is not None:
                    tell(f"vsr: {printable(line)}")
                time.sleep(settings.poll_s)
                continue
            progress = Progress()
            beat = _Heartbeat(store.path, owner, claim, settings, parent, progress)
            beat.start()
            try:
                ok = _process(store, owner, claim, backends, settings, progress, status, machine.fits)
            finally:
                beat.stopped.set()
                beat.wait_through()  # before the claim is given back on an interrupt
            if not ok and failed is not None:
                failed.append(claim.job)
            done += 1
        return done
    except BaseException:
        store.release(owner)
        raise
    finally:
        if status is not None:
            status.close()
        store.close()


def _process(store: JobStore, owner: str, claim: Claim, backends: _Backends, settings: WorkerSettings,
             progress: Progress, status=None, fits=None) -> bool:
    """Work on one claim; False where it failed its job.  ``fits``: whether this machine runs a job (the other
    jobs its lines count)."""
    def say(text: str) -> None:
        if status is not None:
            status.close()  # a chunk's line replaces its status
        if not settings.quiet:
            tell(f"vsr: {printable(text)}")

    t0 = time.perf_counter()
    try:
        spec = JobSpec.from_json(claim.spec)
        _not_the_store(spec, store.path)
        if claim.is_join:
            join_chunks(spec, [ChunkSpec.from_dict(c["chunk"]) for c in store.chunks(claim.job)],
                        encoder_log=settings.encoder_log)
            store.finish_job(owner, claim)
            say(f"job {claim.job} done: {spec.output}")
            return True
        chunk = ChunkSpec.from_dict(claim.chunk)
        computed = not is_committed(spec, chunk)
        phase = None if status is None else (lambda name: status.phase(f"job {claim.job} chunk {chunk.index}: {name}"))
        outlook = Outlook(claim.job, *store.outlook(claim.job, fits), progress)

        def started() -> None:
            progress.start()
            if status is not None:
                status.phase(f"job {claim.job} chunk {chunk.index}: upscaling frames {chunk.start}:{chunk.stop}",
                             outlook.text)

        if phase is not None and computed:
            phase("choosing backend")  # the settings probe for a GPU (torch's import: seconds)
        backend = backends.get(spec.settings()[0].on_device(settings.device), phase) if computed else None
        report = run_chunk(spec, chunk, backend=backend, progress=progress.add, on_start=started, on_phase=phase,
                           encoder_log=settings.encoder_log)
        store.commit_chunk(owner, claim, report, computed)
        outlook.update(*store.outlook(claim.job, fits), chunk.stop - chunk.start)
        took = _took(time.perf_counter() - t0, report if computed else None)
        say(f"job {claim.job} chunk {chunk.index} (frames {chunk.start}:{chunk.stop}) done in {took}; "
            f"{outlook.text(chunk.stop - chunk.start)}")
        return True
    except (KeyboardInterrupt, StoreError):
        raise
    except Exception as e:
        interrupt.check()  # an error a library raised in place of the stop: the claim goes back, the job stays
        if not disk_full(e):
            _failed(store, owner, claim, e, say)
            return False
        message = (f"no space left on the output's disk ({str(e).strip()}); the job waits and is tried "
                   f"again every {settings.disk_wait_s:g} s (its committed chunks are kept)")
        store.wait(owner, claim, message, settings.disk_wait_s)
        say(f"job {claim.job} waits: {message}")
    return True


def _not_the_store(spec: JobSpec, store: Path) -> None:
    """A job an older vsr queued with the store (or a file SQLite keeps beside it) as its output, which ``add``
    refuses now: its join would replace the queue with the video.  It fails before any chunk is computed."""
    file = store_file_at(spec.output, store)
    if file is not None:
        raise InputError(f"its output, {spec.output}, is the job store's own file ({file}): add the job again "
                         "with another --out-dir or --ext")


def _took(seconds: float, report: dict | None) -> str:
    """A chunk's time, split where it was computed: the preparing (model, export, plan, warm-up: not counted by
    its report) and the upscaling, its report's wall time, the one ``vsr jobs report`` shows and its fps divides."""
    upscaling = report.get("wall_s") if isinstance(report, dict) else None
    if not isinstance(upscaling, (int, float)) or not 0 <= upscaling <= seconds:
        return f"{seconds:.1f} s"
    return (f"{seconds:.1f} s ({seconds - upscaling:.1f} s preparing: model, export, plan, warm-up; "
            f"{upscaling:.1f} s upscaling)")


def disk_full(error: BaseException) -> bool:
    """Whether ``error`` (or one it was raised from or during) is a full disk or an exceeded quota."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if getattr(error, "errno", None) in (errno.ENOSPC, errno.EDQUOT):
            return True
        error = error.__cause__ or error.__context__
    return False


def _failed(store: JobStore, owner: str, claim: Claim, e: Exception, say) -> None:
    if isinstance(e, VsrError):
        _fail(store, owner, claim, str(e), say)
    else:  # anything else a chunk raises fails its job, not the worker
        log.debug("job %s failed", claim.job, exc_info=e)
        _fail(store, owner, claim, f"{type(e).__name__}: {e}", say)
    # its chunks are of a file that is gone (no retry can use them), or there are none: the folder goes
    try:
        (discard if isinstance(e, SourceChanged) else tidy)(JobSpec.from_json(claim.spec))
    except VsrError as why:
        log.warning("job %s: its chunk folder stays: %s", claim.job, why)
    else:
        if isinstance(e, SourceChanged):  # else list counted chunks whose files were just removed
            store.drop_done(claim.job)


def _fail(store: JobStore, owner: str, claim: Claim, message: str, say) -> None:
    message = message.strip()  # kept as it is (a file name may hold a newline); shown escaped, on one line
    store.fail(owner, claim, message)
    say(f"job {claim.job} failed: {message}")


def _child(path: str, settings: WorkerSettings, parent: int) -> None:
    """A spawned worker process: :func:`work`, exit 130 on an interrupt, 1 where a job it ran failed.  Ctrl-C
    reaches it twice (from the terminal and from its parent): the second is only recorded (``once``)."""
    code, failed = 0, []
    share_cores(settings.cores)
    if settings.setup is not None:
        settings.setup()
    if settings.device is not None and not settings.quiet:
        alone = os.environ.get("CUDA_VISIBLE_DEVICES") if settings.device.startswith("cuda") else None
        where = f" (CUDA_VISIBLE_DEVICES={alone})" if alone else ""
        tell(f"vsr: worker {os.getpid()} on {settings.device}{where}")
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with interrupt.handled((signal.SIGINT, signal.SIGTERM), once=True):
            try:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, (signal.SIGINT,))  # blocked while it started (_run_each)
                work(path, settings, parent=parent, failed=failed)
                code = 1 if failed else 0
            except Exception:
                interrupt.check()  # an error a library raised in the stop's place: the stop
                raise
    except KeyboardInterrupt:
        code = 130
    except VsrError as e:
        tell(f"vsr: error: {printable(e)}")
        code = e.exit_code
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # (its reader gone: nothing to tell it)
            pass
    # an inference call an interrupt left behind must not see the native libraries torn down (see vsr.cli.entry)
    os._exit(code)


def run_workers(path: str | Path, workers: int = 1, settings: WorkerSettings = WorkerSettings(),
                devices: list[str] | None = None) -> int:
    """``workers`` worker processes on the store at ``path`` (``devices``: that many on each, with its own
    backend there), until they end; the exit code (130: interrupted; 1: a job a worker ran failed, which
    ``vsr jobs list`` shows; a script must not read a run of failed jobs as a success).

    A single worker runs in this process, several in spawned processes.  An interrupt of this process (Ctrl-C,
    SIGTERM) stops every worker; each gives its claim back.  Workers that stop (``until_empty``) with jobs left
    that this machine cannot run say so in one line: those jobs stay queued, not failed.
    """
    JobStore(path).close()  # a missing or broken store is one error line here, not one per worker
    each = [replace(settings, device=d) for d in (devices or [settings.device]) for _ in range(workers)]
    code = _run_each(path, each)
    left = left_for_others(path, {s.device for s in each}) if settings.until_empty and code != 130 else []
    if left:  # the workers stopped, these jobs stay queued: said, not failed (another machine may run them)
        tell(f"vsr: no job left that this machine can run; {printable(waiting_line(left))}")
    return code


def left_for_others(path: str | Path, devices: set[str | None]) -> list[tuple[int, Need]]:
    """The unfinished jobs of the store that no worker of ``devices`` on this machine can run, with their need."""
    machines = [Machine(d) for d in sorted(devices, key=str)]
    with JobStore(path) as store:
        jobs = store.unfinished()
    needs = [(job, [m.runs(spec) for m in machines]) for job, spec in jobs]
    return [(job, need[0]) for job, need in needs if all(n is not None for n in need)]


def _run_each(path: str | Path, each: list[WorkerSettings]) -> int:
    """A worker per settings of ``each``: one in this process, several spawned; the exit code."""
    if len(each) == 1:
        failed: list[int] = []
        work(path, each[0], failed=failed)
        return 1 if failed else 0
    ctx = multiprocessing.get_context("spawn")
    alone = [gpu_alone(s.device, os.environ.get("CUDA_VISIBLE_DEVICES")) for s in each]
    share = max(1, usable_cores() // len(each))  # N workers that each took every core ran N threads a core
    procs = [ctx.Process(target=_child, args=(str(path), replace(s, device=device, waiting_line=i == 0,
                                                                 cores=share), os.getpid()), name=f"vsr-worker-{i}")
             for i, (s, (device, _)) in enumerate(zip(each, alone))]
    # a worker starts with Ctrl-C blocked (inherited through exec) until _child handles it: an interrupt while
    # it imports must not print a traceback; SIGTERM (below) still ends it then, holding nothing.  Blocked, not
    # ignored: a Ctrl-C that comes meanwhile waits, here and in the workers (ignored, it was lost by all)
    try:
        with interrupt.held((signal.SIGINT,)):
            for p, (_, env) in zip(procs, alone):
                with environment(env):  # a spawned process starts with this process's environment
                    p.start()
        for p in procs:
            p.join()
    except KeyboardInterrupt:
        started = [p for p in procs if p.pid is not None]
        for p in started:
            if p.is_alive():
                os.kill(p.pid, signal.SIGTERM)
        for p in started:
            p.join()
        raise
    codes = [p.exitcode for p in procs]
    if 130 in codes:
        return 130
    return max((c if c > 0 else 1 for c in codes if c), default=0)  # killed by a signal: exit code < 0


def gpu_alone(device: str | None, visible: str | None) -> tuple[str | None, dict[str, str]]:
    """A spawned worker's device and what its environment adds: for GPU ``cuda:N``, ``cuda:0`` in a process that
    sees that GPU alone (``CUDA_VISIBLE_DEVICES``: the N-th of ``visible``, this process's own setting, or N).

    Then nothing of the worker lands on another worker's GPU: not a library's context or pinned memory made on the
    current device (device 0 unless set), not TensorRT's pycuda context, not NVENC.  Other devices as they are."""
    if device is None or device.split(":")[0] != "cuda":
        return device, {}
    index = int(device.split(":")[1]) if ":" in device else 0
    ids = [v.strip() for v in visible.split(",") if v.strip()] if visible else None
    if ids is not None and index >= len(ids):
        raise BackendError(f"{device}: CUDA_VISIBLE_DEVICES={visible} shows {len(ids)} GPUs")
    return "cuda:0", {"CUDA_VISIBLE_DEVICES": ids[index] if ids is not None else str(index)}


