"""Jobs beyond one machine: chunks as Celery tasks on a Redis broker, run by workers on any number of hosts.

    submit(specs, broker, chunk_frames) -> job ids    plan the chunks here, record each job, send one task per chunk
    run_worker(broker, concurrency=1)                 a Celery worker in this process, until stopped
    status(broker) -> [job row]                       what every submitted job is doing (``vsr jobs list``)
    cancel(broker, job_id), retry(broker, job_id)     stop a job; queue a failed or cancelled one again
    chunk_reports(broker, job_id) -> [run report]     the per-stage timing of each finished chunk

Paths: a spec carries absolute paths, so the submitting machine and every worker must reach the inputs and the
output folders at the *same* absolute path (one shared file system: NFS, SMB, a bind mount at the same place).
Chunks are written beside the output (``.vsr-chunks/``) by whichever worker runs them, and the worker that records
the last chunk joins them into the output.

Delivery: a chunk is acknowledged only after it returned (``acks_late``).  A worker child that dies mid-chunk
hands its chunk back at once (``reject_on_worker_lost``); a whole worker that vanishes (host lost, ``kill -9``
of the main process) hands it back when Redis' visibility timeout runs out (the other workers look every 10 s).
That timeout must exceed the longest chunk, or Redis gives a chunk still running to a second worker: it is
``VISIBILITY_TIMEOUT_S`` unless the workers' ``VSR_CELERY_VISIBILITY_S`` environment variable or the
``visibility_timeout_s`` argument says otherwise.  A redelivered chunk that was committed is not computed again
(:func:`vsr.jobs.chunks.run_chunk` is idempotent); a chunk delivered ``MAX_ATTEMPTS`` times without finishing
fails its job.  A worker's record writes wait about 2 minutes for a Redis that went away (restarted) and then hand
their chunk back: a Redis that keeps its data on disk (``appendonly yes``) loses no job; one that keeps nothing
forgets every job and queued chunk when it restarts (:func:`forgets` says so; the machine that added a job keeps
it, :mod:`vsr.jobs.ledger`, and ``retry`` sends a job the broker forgot again).  A chunk whose worker process is
stopped by SIGTERM (its worker's cold shutdown: a second Ctrl-C) does not count as a delivery.  The worker
processes of one ``run_worker`` share its machine's cores: each one's threads default to its share.

Queues: a job's chunks go to the queue of what it needs of a worker's machine (:func:`vsr.jobs.needs.queue_of`:
``vsr``, or ``vsr.gpu``, ``vsr.cuda``, ``vsr.tensorrt``); a worker consumes those its machine can run, so a GPU
job waits for a worker with a GPU rather than failing on the first CPU-only worker that takes it.

Job records live in the broker's Redis, next to Celery's own keys: ``vsr:jobs`` (job ids, oldest first),
``vsr:job:<id>`` (spec, output, chunks, state, error, times), ``vsr:job:<id>:done`` (chunk index -> worker, time,
run report), ``vsr:job:<id>:running`` (chunk index -> worker and pid), ``vsr:job:<id>:attempts`` (chunk index ->
deliveries), ``vsr:job:<id>:kept`` (chunk index -> the generation of a chunk a retry left to its worker) and
``vsr:output:<path>`` (the job that owns an output: at most one unfinished job does, taken atomically by submit
and retry, :mod:`vsr.jobs.records`).  Messages are JSON only.  A chunk or join that finds its output's disk full
leaves its job ``waiting`` and is sent again after :data:`DISK_WAIT_S`.

Trust: whoever can write to the broker can make the workers read and write any path their user may (a job
names its files by absolute path); the broker is for trusted users only.  Messages name the broker with its
password masked (:func:`vsr.jobs.records.safe_url`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import time
import uuid

from vsr import interrupt
from vsr.backends import Backend
from vsr.errors import BrokerError, VsrError, tell
from vsr.machine import share_cores, usable_cores
from vsr.jobs import broker_rows, ledger
from vsr.jobs.chunks import discard, is_committed, join_chunks, run_chunk, tidy
from vsr.jobs.chunking import plan_job
from vsr.jobs.needs import Machine, job_need, queue_name, queue_of, worker_queues
from vsr.jobs.records import CONNECT_TIMEOUT_S, connect as _connect, give_output, key as _key, records as _records
from vsr.jobs.records import persistence, safe_url, scrub, take_output
from vsr.jobs.spec import ChunkSpec, JobSpec
from vsr.jobs.worker import disk_full
from vsr.video.source import SourceChanged

try:
    import redis
    from billiard.process import current_process
    from celery import Celery
    from celery.exceptions import Reject
except ImportError as err:  # the optional `jobs` extra; callers import this module only for --broker
    raise BrokerError(f"--broker needs Celery and redis ({err.name} is missing): pip install 'vsr[jobs]'") from err

VISIBILITY_TIMEOUT_S = 6 * 3600  # a few hundred 480p frames of EDVR on a CPU take well under this
QUEUE = "vsr"                    # not Celery's default queue: a Redis shared with other Celery apps stays apart
CHUNK_TASK = "vsr.jobs.chunk"
MAX_ATTEMPTS = 3  # a chunk whose process dies this often (out of memory?) fails its job instead of looping
DISK_WAIT_S = 60  # a chunk or join that found its output's disk full is sent again after this

status, chunk_reports = broker_rows.status, broker_rows.chunk_reports  # (this module's API, kept there)

# one opened backend per worker process, reused by the chunks of every job with the same model and options
_BACKENDS: dict[str, Backend] = {}


def make_app(broker: str, *, visibility_timeout_s: float | None = None) -> Celery:
    """A Celery app on ``broker`` (``redis://HOST:PORT/N``) with the chunk task; Redis is the result backend too."""
    if visibility_timeout_s is None:
        visibility_timeout_s = float(os.environ.get("VSR_CELERY_VISIBILITY_S", VISIBILITY_TIMEOUT_S))
    app = Celery("vsr", broker=broker, backend=broker, set_as_current=False)
    app.conf.update(
        task_serializer="json", result_serializer="json", accept_content=["json"], result_accept_content=["json"],
        task_acks_late=True, task_reject_on_worker_lost=True, worker_prefetch_multiplier=1,
        task_default_queue=QUEUE, result_expires=7 * 24 * 3600,
        # every worker looks for chunks past their visibility timeout every 10 s (kombu's default: ~100 s)
        broker_transport_options={"visibility_timeout": visibility_timeout_s, "unacked_restore_interval": 10,
                                  "unacked_restore_throttle": 1, "socket_connect_timeout": CONNECT_TIMEOUT_S},
        broker_connection_timeout=CONNECT_TIMEOUT_S, broker_connection_retry_on_startup=False,
        redis_socket_connect_timeout=CONNECT_TIMEOUT_S,
        task_publish_retry_policy={"max_retries": 2, "interval_start": 0, "interval_step": 0.5},
    )
    app.task(name=CHUNK_TASK, bind=True, acks_late=True, reject_on_worker_lost=True)(_chunk_task)
    return app


def submit(specs: list[JobSpec], broker: str, chunk_frames: int, *,
           visibility_timeout_s: float | None = None) -> list[str]:
    """Queue ``specs`` on ``broker``; one id per job.  Every input is probed before anything is sent, so a bad
    one is a :class:`~vsr.errors.VsrError` and nothing is queued."""
    _connect(broker)
    return submit_planned([plan_job(spec, chunk_frames) for spec in specs], broker,
                          visibility_timeout_s=visibility_timeout_s)


def submit_planned(jobs: list[tuple[JobSpec, list[ChunkSpec]]], broker: str, *,
                   visibility_timeout_s: float | None = None) -> list[str]:
    """Queue planned jobs (:func:`vsr.jobs.chunking.plan_job`) on ``broker``; one id per job.  Each job takes its
    output first (:func:`vsr.jobs.records.take_output`): an output another unfinished job owns is refused and
    nothing is sent."""
    db = _connect(broker)
    ids = [uuid.uuid4().hex for _ in jobs]
    taken: list[tuple[str, str]] = []
    try:
        for job_id, (spec, chunks) in zip(ids, jobs):
            _record(db, job_id, spec, chunks, time.time())
            take_output(db, job_id, spec.output)
            taken.append((job_id, spec.output))
        for job_id, (spec, chunks) in zip(ids, jobs):  # what a Redis that forgets them cannot take from this machine
            ledger.keep(broker, job_id, spec.to_json(), [c.to_dict() for c in chunks], spec.output)
    except BaseException:
        with contextlib.suppress(redis.RedisError, OSError):
            for job_id, output in taken:
                give_output(db, job_id, output)
            db.delete(*(_key(i) for i in ids))
        for job_id in ids:
            ledger.drop(job_id)
        raise
    app = make_app(broker, visibility_timeout_s=visibility_timeout_s)
    sent = []
    try:
        for job_id, (spec, chunks) in zip(ids, jobs):
            db.rpush("vsr:jobs", job_id)
            _send(app, job_id, spec, chunks, 0)
            sent.append(job_id)
    except (redis.RedisError, OSError) as err:
        with contextlib.suppress(redis.RedisError, OSError):  # `retry` can send what is missing
            for job_id in ids[len(sent):]:
                _fail(db, job_id, f"the broker failed while its chunks were sent: {scrub(str(err), broker)}")
        raise BrokerError(f"the broker {safe_url(broker)} failed while jobs were sent ({len(sent)} queued): "
                          f"{scrub(str(err), broker)}") from None
    finally:
        app.close()
    return ids


def _record(db: redis.Redis, job_id: str, spec: JobSpec, chunks: list[ChunkSpec], submitted: float) -> None:
    db.hset(_key(job_id), mapping={
        "spec": spec.to_json(), "output": spec.output, "chunks": json.dumps([c.to_dict() for c in chunks]),
        "total": len(chunks), "state": "queued", "error": "", "submitted": submitted, "generation": 0})


def forgets(broker: str) -> str | None:
    """What a restart of ``broker``'s Redis would forget (:func:`vsr.jobs.records.persistence`), or None."""
    return persistence(_connect(broker), broker)


def cancel(broker: str, job_id: str) -> str:
    """Stop ``job_id``: its chunks still queued are dropped when a worker takes them; running ones finish.  A job
    the broker forgot (``lost``) is forgotten here too (this machine's record of it goes).  The job's state
    before."""
    db = _connect(broker)
    if db.hget(_key(job_id), "state") is None and ledger.find(broker, job_id) is not None:
        ledger.drop(job_id)
        return "lost"
    state = _state(db, broker, job_id)
    if state in ("done", "cancelled"):
        raise BrokerError(f"job {job_id} is {state} already")
    db.hset(_key(job_id), mapping={"state": "cancelled", "finished": time.time()})
    return state


def retry(broker: str, job_id: str) -> int:
    """Queue a failed or cancelled ``job_id`` again: the chunks not done are sent anew (the join, if all are);
    how many messages were sent.  Refused while another unfinished job owns its output.  A job this machine sent
    that the broker forgot (:mod:`vsr.jobs.ledger`) is recorded and sent again whole, under its id."""
    db = _connect(broker)
    entry = ledger.find(broker, job_id) if db.hget(_key(job_id), "state") is None else None
    if entry is not None:
        return _send_again(db, broker, entry)
    state = _state(db, broker, job_id)
    if state not in ("failed", "cancelled"):
        raise BrokerError(f"job {job_id} is {state}: only a failed or cancelled job is retried")
    job = db.hgetall(_key(job_id))
    spec = JobSpec.from_json(job["spec"])
    # the output and the new state in one step: no other job can take the output between them
    take_output(db, job_id, spec.output, allowed=("failed", "cancelled"), state="queued")
    chunks = [ChunkSpec.from_dict(c) for c in json.loads(job["chunks"])]
    done = {int(i) for i in db.hkeys(_key(job_id, "done"))}
    running = {int(i) for i in db.hkeys(_key(job_id, "running"))} - done
    # the messages of earlier attempts still queued carry an older generation: workers drop them; but a chunk
    # still in progress (cancel lets it finish) stays its worker's, its message (and a redelivery of it) valid:
    # sent again, a second worker would compute it beside the first
    kept = _key(job_id, "kept")
    for index in running:
        db.hsetnx(kept, str(index), int(job.get("generation") or 0))
    stale = [i for i in db.hkeys(kept) if int(i) not in running]
    if stale:
        db.hdel(kept, *stale)
    generation = db.hincrby(_key(job_id), "generation")
    db.delete(_key(job_id, "attempts"))
    app = make_app(broker)
    again = [c for c in chunks if c.index not in done | running] or ([] if running else chunks[-1:])
    try:
        _send(app, job_id, spec, again, generation)
    finally:
        app.close()
    return len(again)


def _send_again(db: redis.Redis, broker: str, entry: dict) -> int:
    """A lost job's record and chunks, from this machine's: every chunk is sent (a committed one is found on
    disk by its worker, not computed again: the broker forgot which are done)."""
    job_id, spec = entry["id"], JobSpec.from_json(entry["spec"])
    chunks = [ChunkSpec.from_dict(c) for c in entry["chunks"]]
    if not db.hsetnx(_key(job_id), "state", "queued"):
        raise BrokerError(f"job {job_id} is on {safe_url(broker)} again (another retry?): see vsr jobs list")
    try:
        _record(db, job_id, spec, chunks, entry["submitted"])
        take_output(db, job_id, spec.output)
    except BaseException:
        db.delete(_key(job_id))
        raise
    db.rpush("vsr:jobs", job_id)
    app = make_app(broker)
    try:
        _send(app, job_id, spec, chunks, 0)
    except (redis.RedisError, OSError) as err:
        _fail(db, job_id, f"the broker failed while its chunks were sent: {scrub(str(err), broker)}")
        raise BrokerError(f"the broker {safe_url(broker)} failed while job {job_id} was sent: "
                          f"{scrub(str(err), broker)}") from None
    finally:
        app.close()
    return len(chunks)


def _send(app: Celery, job_id: str, spec: JobSpec, chunks: list[ChunkSpec], generation: int) -> None:
    queue = queue_name(QUEUE, queue_of(job_need(spec.to_dict())))  # a GPU job waits for a worker with a GPU
    for chunk in chunks:
        app.send_task(CHUNK_TASK, args=[job_id, spec.to_json(), chunk.to_dict(), generation], queue=queue)


def _state(db: redis.Redis, broker: str, job_id: str) -> str:
    state = db.hget(_key(job_id), "state")
    if state is None:
        raise BrokerError(f"no job {job_id!r} on {safe_url(broker)}")
    return state


def run_worker(broker: str, concurrency: int = 1, *, visibility_timeout_s: float | None = None,
               loglevel: str = "INFO") -> None:
    """Work on ``broker``'s chunks with ``concurrency`` processes, until stopped (Ctrl-C, SIGTERM)."""
    if concurrency < 1:
        raise BrokerError(f"a worker needs at least 1 process, not {concurrency}")
    forgets_jobs = persistence(_connect(broker), broker)
    if forgets_jobs:  # said where the operator looks: a worker's log
        tell(f"vsr: {forgets_jobs}")
    queues, left = worker_queues(QUEUE, Machine(forks=True))  # (its pool's children are forked)
    if left:  # their jobs stay queued for the workers of machines that have what they need
        tell(f"vsr: this worker leaves the jobs of {', '.join(left)} to workers that can run them")
    app = make_app(broker, visibility_timeout_s=visibility_timeout_s)
    share_cores(max(1, usable_cores() // concurrency))  # the pool's forked children inherit it: each its share
    # prefork even for 1 process: a child that dies mid-chunk is seen by the parent, which hands the chunk back
    app.worker_main(["worker", "--pool=prefork", f"--concurrency={concurrency}", f"--queues={','.join(queues)}",
                     f"--hostname=vsr-{os.getpid()}@{socket.gethostname()}", f"--loglevel={loglevel}",
                     "--without-gossip", "--without-mingle"])


def _chunk_task(task, job_id: str, spec_json: str, chunk_dict: dict, generation: int = 0) -> dict | None:
    """The Celery task: compute one chunk (or find it committed), record it, join the job after its last chunk.
    A broker that stays away longer than the records' retries hands the chunk back to the queue: a failed task
    would be acknowledged, its chunk lost and its job left running forever."""
    try:
        return _chunk(task, job_id, spec_json, chunk_dict, generation)
    except (redis.ConnectionError, redis.TimeoutError) as err:
        raise Reject(f"the broker failed: {err}", requeue=True) from None
    except KeyboardInterrupt:  # stopped (SIGTERM: the worker's cold shutdown, a double Ctrl-C; or systemd's stop)
        if current_process().name == "MainProcess":  # (the task called in a process of the caller's own)
            raise
        # a pool process dies of the signal as it did before: its worker hands the chunk back
        # (reject_on_worker_lost), and a message its worker did not acknowledge stays the broker's
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        raise


def _chunk(task, job_id: str, spec_json: str, chunk_dict: dict, generation: int) -> dict | None:
    db = _records(task.app.conf.broker_url)
    job = _key(job_id)
    state, current = db.hmget(job, "state", "generation")
    index = str(chunk_dict.get("index"))
    if int(current or 0) != generation and db.hget(_key(job_id, "kept"), index) != str(generation):
        return None  # a message from before a retry, of a chunk the retry sent again
    if state in ("done", "failed", "cancelled", None):
        # a job joined already (a message delivered again after its chunk's commit: the chunk folder is gone,
        # the chunk would be computed anew and left there), a failed or cancelled job, a job whose records were
        # cleared; this message's worker lost on the chunk left its mark, which would keep a retry from sending it
        db.hdel(_key(job_id, "running"), index)
        return None
    spec, chunk = JobSpec.from_json(spec_json), ChunkSpec.from_dict(chunk_dict)
    worker = task.request.hostname or socket.gethostname()
    if db.hincrby(_key(job_id, "attempts"), str(chunk.index)) > MAX_ATTEMPTS and not is_committed(spec, chunk):
        _fail(db, job_id, f"chunk {chunk.index} was started {MAX_ATTEMPTS} times and its worker process was lost "
                          f"each time (out of memory?)")
        db.hdel(_key(job_id, "running"), index)  # the lost workers' mark: a retry sends the chunk again
        return None
    db.hset(_key(job_id, "running"), str(chunk.index), f"{worker} pid {os.getpid()}")
    db.hsetnx(job, "started", time.time())
    if db.hget(job, "state") in ("queued", "waiting"):
        db.hset(job, mapping={"state": "running", "error": ""})
    try:
        report = _compute(db, job_id, spec, chunk)
        # the first record of a chunk stays: a redelivery after a commit computed nothing
        db.hsetnx(_key(job_id, "done"), str(chunk.index),
                  json.dumps({"worker": worker, "finished": time.time(), "frames": chunk.stop - chunk.start,
                              "report": report}))
        total = db.hget(job, "total")  # None: the records are gone (a Redis that keeps nothing on disk restarted)
        if total is not None and db.hlen(_key(job_id, "done")) == int(total):
            _join(db, task.request.id, job_id, spec)
    except Exception as err:
        if isinstance(err, (redis.ConnectionError, redis.TimeoutError)):
            raise  # the broker's failure, not the job's
        if disk_full(err):  # the job waits; this task comes back (its chunk, or its join) after DISK_WAIT_S
            db.hset(job, mapping={"state": "waiting", "error": f"no space left on the output's disk ({err}); "
                                                                f"tried again every {DISK_WAIT_S} s"})
            db.hincrby(_key(job_id, "attempts"), str(chunk.index), -1)
            raise task.retry(countdown=DISK_WAIT_S, max_retries=None) from None
        _fail(db, job_id, str(err) if isinstance(err, VsrError) else f"{type(err).__name__}: {err}")
        with contextlib.suppress(VsrError):  # its chunks are of a file that is gone; or there are none
            (discard if isinstance(err, SourceChanged) else tidy)(spec)
        if isinstance(err, VsrError):
            return None
        raise  # recorded for `vsr jobs list`; Celery logs the traceback in the worker's log
    finally:
        db.hdel(_key(job_id, "running"), str(chunk.index))
    return {"job": job_id, "chunk": chunk.index, "worker": worker}


def _compute(db: redis.Redis, job_id: str, spec: JobSpec, chunk: ChunkSpec) -> dict:
    """:func:`run_chunk`; the chunk's worker process stopped by SIGTERM (the pool's cold shutdown on a second
    Ctrl-C sends it) unwinds as from Ctrl-C, removing its partial chunk, and its delivery is not counted: a user's
    stop is not a lost worker, and three of them failed the job as one."""
    try:
        with interrupt.handled((signal.SIGTERM,), once=True):
            return run_chunk(spec, chunk, backend=_backend_for(spec))
    except KeyboardInterrupt:
        db.hincrby(_key(job_id, "attempts"), str(chunk.index), -1)
        raise


def _join(db: redis.Redis, task_id: str, job_id: str, spec: JobSpec) -> None:
    """Join the committed chunks into the output, once: two last chunks finishing together race for a lock, and
    a redelivered task (same id) takes its own lock back after its process died mid-join."""
    lock = f"vsr:join:{spec.key}"
    if not db.set(lock, task_id, nx=True, ex=3600) and db.get(lock) != task_id:
        return
    try:
        if db.hget(_key(job_id), "state") == "done":
            return
        chunks = [ChunkSpec.from_dict(c) for c in json.loads(db.hget(_key(job_id), "chunks"))]
        join_chunks(spec, chunks)
        db.hset(_key(job_id), mapping={"state": "done", "finished": time.time()})
    except VsrError as err:
        if disk_full(err):
            raise
        _fail(db, job_id, str(err))
    finally:
        if db.get(lock) == task_id:
            db.delete(lock)


def _fail(db: redis.Redis, job_id: str, message: str) -> None:
    if db.hget(_key(job_id), "state") not in (None, "failed", "cancelled"):  # (None: no record to fail)
        db.hset(_key(job_id), mapping={"state": "failed", "error": message, "finished": time.time()})


def _backend_for(spec: JobSpec) -> Backend:
    """The process's opened backend for ``spec``'s model and options; another model replaces it (memory)."""
    request = spec.settings()[0]
    key = repr(request)
    if key not in _BACKENDS:
        _BACKENDS.clear()
        _BACKENDS[key] = request.open()
    return _BACKENDS[key]
