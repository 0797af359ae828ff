"""What a Celery broker's jobs are doing, for ``vsr jobs list --broker`` and ``vsr jobs report --broker``
(:mod:`vsr.jobs.distributed`): the job records in its Redis (:mod:`vsr.jobs.records`), and the jobs this machine
sent that the broker no longer knows (:mod:`vsr.jobs.ledger`)."""

from __future__ import annotations

import json

import redis

from vsr.errors import BrokerError, VsrError
from vsr.jobs import ledger
from vsr.jobs.chunks import is_committed
from vsr.jobs.needs import job_need
from vsr.jobs.records import connect as _connect, key as _key, safe_url, scrub
from vsr.jobs.rows import ended_early
from vsr.jobs.spec import ChunkSpec, JobSpec


def status(broker: str) -> list[dict]:
    """One row per job, oldest first: id, input, output, state (queued, running, waiting, done, failed,
    cancelled; ``interrupted``: running, but no chunk of it is, its workers stopped; ``lost``: sent from this
    machine, unknown to the broker), chunks_done, chunks_total, frames_done, frames_total, fps (frames done per
    wall second since its first chunk started, all workers together), eta_s, error, workers (names of the
    workers that finished its chunks), running (chunk index -> worker and pid).  A record vsr cannot read is one
    :class:`BrokerError`."""
    db = _connect(broker)
    rows = []
    for job_id in _read(broker, "vsr:jobs", lambda: db.lrange("vsr:jobs", 0, -1)):
        row = _read(broker, _key(job_id), lambda: _status_row(db, job_id))
        if row is not None:
            rows.append(row)
    return rows + _read(broker, "vsr:jobs", lambda: lost_rows(db, broker, {r["id"]: r["state"] for r in rows}))


def _status_row(db: redis.Redis, job_id: str) -> dict | None:
    job = db.hgetall(_key(job_id))
    if not job:
        return None
    done = [json.loads(v) for v in db.hgetall(_key(job_id, "done")).values()]
    spec = JobSpec.from_json(job["spec"])
    chunks = [ChunkSpec.from_dict(c) for c in json.loads(job["chunks"])]
    total, frames_total = int(job["total"]), sum(c.stop - c.start for c in chunks)
    frames = sum(int(d["frames"]) for d in done)
    running = {int(k): v for k, v in db.hgetall(_key(job_id, "running")).items()}
    state = job["state"]
    if state == "running" and not running:  # its workers were stopped (its chunks went back to the queue)
        state = "interrupted"
    fps = eta = None
    if done and job.get("started"):
        wall = max(float(d["finished"]) for d in done) - float(job["started"])
        fps = frames / wall if wall > 0 else None
        eta = (frames_total - frames) / fps if fps and state == "running" else None
    return {"id": job_id, "input": spec.input, "output": spec.output, "state": state,
            "chunks_done": len(done), "chunks_total": total, "frames_done": frames, "frames_total": frames_total,
            "fps": fps, "eta_s": eta, "error": job.get("error") or None,
            "ended_early": ended_early([d.get("report") for d in done]),
            "needs": _needs(state, spec), "workers": sorted({str(d["worker"]) for d in done}), "running": running}


def lost_rows(db: redis.Redis, broker: str, known: dict[str, str]) -> list[dict]:
    """The jobs this machine sent to ``broker`` that it no longer knows (``known``: id -> state of those it
    does), as rows of state ``lost``; this machine's record of a job seen done, or joined, goes."""
    rows = []
    for entry in ledger.entries(broker):
        job_id = entry["id"]
        if known.get(job_id) == "done" or (job_id not in known and ledger.joined(entry)):
            ledger.drop(job_id)
        elif job_id not in known and not db.exists(_key(job_id)):  # (a record not yet listed: being submitted)
            try:
                rows.append(_lost_row(entry))
            except (VsrError, KeyError, ValueError, TypeError):  # not a record vsr wrote: nothing to show of it
                continue
    return rows


def _lost_row(entry: dict) -> dict:
    spec = JobSpec.from_json(entry["spec"])
    chunks = [ChunkSpec.from_dict(c) for c in entry["chunks"]]
    try:
        committed = [c for c in chunks if is_committed(spec, c)]
    except VsrError:  # a chunk folder that is not vsr's: the retry says why
        committed = []
    return {"id": entry["id"], "input": spec.input, "output": spec.output, "state": "lost",
            "chunks_done": len(committed), "chunks_total": len(chunks),
            "frames_done": sum(c.stop - c.start for c in committed),
            "frames_total": sum(c.stop - c.start for c in chunks), "fps": None, "eta_s": None,
            "error": f"the broker has no record of it (its Redis restarted without its data on disk?); `vsr jobs "
                     f"retry {entry['id']} --broker ...` on this machine sends it again, its committed chunks kept",
            "ended_early": None, "needs": _needs("lost", spec), "workers": [], "running": {}}


def _needs(state: str, spec: JobSpec) -> str | None:
    """What a job no worker runs asks of its worker's machine beyond a CPU (``a GPU (backend cuda)``), else
    None."""
    need = job_need(spec.to_dict()) if state in ("queued", "interrupted", "lost") else None
    return None if need is None else need.text()


def _read(broker: str, key: str, read):
    """``read()``, with a record vsr did not write (another type at the key, a field missing or malformed) as
    one :class:`BrokerError` naming the key, and a broker that went away as another."""
    try:
        return read()
    except redis.ResponseError as err:
        raise BrokerError(f"the broker {safe_url(broker)} holds something else at {key} "
                          f"({scrub(str(err), broker)}): not a vsr job record") from None
    except (redis.RedisError, OSError) as err:
        raise BrokerError(f"the broker {safe_url(broker)} failed: {scrub(str(err), broker)}") from None
    except (KeyError, ValueError, TypeError, AttributeError, VsrError) as err:
        what = f"no {err}" if isinstance(err, KeyError) else " ".join(str(err).split())[:120]
        raise BrokerError(f"the job record {key} on {safe_url(broker)} is malformed ({what})") from None


def chunk_reports(broker: str, job_id: str) -> list[dict]:
    """The run reports (``vsr-run-report/2``) of ``job_id``'s finished chunks, in chunk order."""
    db = _connect(broker)
    if db.hget(_key(job_id), "state") is None:
        raise BrokerError(f"no job {job_id!r} on {safe_url(broker)}")

    def reports() -> list[dict]:
        done = {int(k): json.loads(v) for k, v in db.hgetall(_key(job_id, "done")).items()}
        return [done[i]["report"] for i in sorted(done)]

    return _read(broker, _key(job_id, "done"), reports)
