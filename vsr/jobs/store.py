"""The job store: jobs and their chunks in one SQLite file (``jobs/queue.db`` by default).

Every state change is one transaction; a claim is ``BEGIN IMMEDIATE`` (one writer at a time), so several worker
processes on one machine share the file safely.  The file is in WAL mode (readers never wait for a writer).

A running chunk (or a job's join) holds a *lease*: its owner (``host:pid:token``) and an expiry that the owner's
heartbeat pushes forward.  A chunk whose lease expired, or whose owner is a process of this host that no longer
exists, goes back to the queue.  ``attempts`` counts the claims of a chunk; ``computed`` counts the runs that
computed it (a chunk found committed on disk is not computed again), so ``computed <= 1`` for every chunk is
the store's own record that no committed chunk was computed twice.

Jobs: queued -> running -> done | failed | cancelled.  Chunks: queued -> running -> done | failed.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from vsr.errors import InputError
from vsr.jobs.leases import Leases

SCHEMA_VERSION = 1
DEFAULT_STORE = Path("jobs") / "queue.db"
# How long a statement waits for another process's write before giving up (seconds).
DEFAULT_BUSY_TIMEOUT_S = 10.0
JOB_STATES = ("queued", "running", "done", "failed", "cancelled")

_SCHEMA = """
CREATE TABLE jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    spec TEXT NOT NULL,
    input TEXT NOT NULL,
    output TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('queued', 'running', 'done', 'failed', 'cancelled')),
    error TEXT,
    join_owner TEXT,
    join_expiry REAL,
    created REAL NOT NULL,
    updated REAL NOT NULL
);
CREATE TABLE chunks (
    job INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    idx INTEGER NOT NULL,
    start INTEGER NOT NULL,
    stop INTEGER NOT NULL,
    chunk TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('queued', 'running', 'done', 'failed')),
    owner TEXT,
    expiry REAL,
    heartbeat REAL,
    attempts INTEGER NOT NULL DEFAULT 0,
    computed INTEGER NOT NULL DEFAULT 0,
    report TEXT,
    PRIMARY KEY (job, idx)
);
CREATE INDEX chunks_state ON chunks (state);
"""


class StoreError(InputError):
    """The job store cannot be used: missing, unreadable, locked, corrupt, or not a vsr job store."""


@dataclass(frozen=True)
class JobRow:
    """One job as ``vsr jobs list`` shows it; ``frames_done``/``compute_s`` sum the committed chunks' reports."""

    id: int
    input: str
    output: str
    state: str
    error: str | None
    chunks_done: int
    chunks_total: int
    chunks_running: int
    frames_done: int
    frames_total: int
    compute_s: float

    @property
    def fps(self) -> float | None:
        """Frames per second of one worker, over the committed chunks."""
        return self.frames_done / self.compute_s if self.compute_s > 0 else None

    @property
    def eta_s(self) -> float | None:
        """Seconds left at :attr:`fps` per running chunk (None when done, stopped, or nothing measured yet)."""
        if self.state not in ("queued", "running") or self.fps is None:
            return None
        return (self.frames_total - self.frames_done) / self.fps / max(1, self.chunks_running)

    def to_dict(self) -> dict:
        return {"id": self.id, "input": self.input, "output": self.output, "state": self.state,
                "chunks_done": self.chunks_done, "chunks_total": self.chunks_total, "frames_done": self.frames_done,
                "frames_total": self.frames_total, "fps": self.fps, "eta_s": self.eta_s, "error": self.error}


def store_path(path: str | Path | None = None) -> Path:
    """``--store PATH``, else ``$VSR_JOBS``, else ``jobs/queue.db`` (relative to the current folder)."""
    return Path(path or os.environ.get("VSR_JOBS") or DEFAULT_STORE)


class JobStore(Leases):
    """The SQLite job store at ``path`` (created by ``create=True``; else it must exist).  The workers' side
    (claims, heartbeats, commits) is :class:`vsr.jobs.leases.Leases`."""

    def __init__(self, path: str | Path | None = None, *, create: bool = False,
                 busy_timeout_s: float | None = None):
        self.path = store_path(path)
        if busy_timeout_s is None:
            busy_timeout_s = float(os.environ.get("VSR_JOBS_BUSY_TIMEOUT", DEFAULT_BUSY_TIMEOUT_S))
        self.busy_timeout_s = busy_timeout_s
        if not create and not self.path.is_file():
            raise StoreError(f"no job store at {self.path} (vsr jobs add creates it)")
        if create:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise StoreError(f"cannot create the job store folder {self.path.parent}: {e.strerror}") from None
        with self._errors():
            self._db = sqlite3.connect(str(self.path), timeout=busy_timeout_s, isolation_level=None)
        try:
            self._db.row_factory = sqlite3.Row
            with self._errors():
                self._setup(create)
        except BaseException:
            self._db.close()
            raise

    def _setup(self, create: bool) -> None:
        db = self._db
        db.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_s * 1000)}")
        db.execute("PRAGMA foreign_keys = ON")
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version == 0:
            with self.transaction():  # two `vsr jobs add` may create the same store at once: one does
                version = db.execute("PRAGMA user_version").fetchone()[0]
                tables = db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
                if version == 0 and (tables or not create):
                    raise StoreError(f"{self.path} is an SQLite file but not a vsr job store")
                if version == 0:
                    for statement in _SCHEMA.split(";"):
                        if statement.strip():
                            db.execute(statement)
                    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                    version = SCHEMA_VERSION
        if version != SCHEMA_VERSION:
            raise StoreError(f"{self.path} is a job store of schema version {version}; this vsr reads version "
                             f"{SCHEMA_VERSION}")
        if db.execute("PRAGMA journal_mode = WAL").fetchone()[0].lower() != "wal":
            raise StoreError(f"{self.path}: the job store cannot be switched to WAL mode")

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> JobStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @contextmanager
    def _errors(self):
        """Every SQLite failure as one :class:`StoreError` line naming the store."""
        try:
            yield
        except sqlite3.DatabaseError as e:
            text = str(e)
            if "locked" in text or "busy" in text:
                text = f"it is locked by another process (waited {self.busy_timeout_s:g} s)"
            elif "not a database" in text or "malformed" in text:
                text = f"it is not a job store, or it is corrupt ({text})"
            raise StoreError(f"job store {self.path}: {text}") from None

    @contextmanager
    def transaction(self, immediate: bool = True):
        """One transaction; ``immediate`` takes the write lock at once (claims, updates)."""
        with self._errors():
            self._db.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    # -- adding and changing jobs --------------------------------------------------------------------------
    def add_jobs(self, jobs: list[tuple[object, list]]) -> list[int]:
        """``[(JobSpec, [ChunkSpec, ...]), ...]`` -> their new ids, all added in one transaction.

        An output that an unfinished job of the store already writes is refused (nothing is added).
        """
        now = time.time()
        ids = []
        with self.transaction() as db:
            for spec, chunks in jobs:
                busy = db.execute("SELECT id, state FROM jobs WHERE output = ? AND state IN ('queued', 'running')",
                                  (spec.output,)).fetchone()
                if busy is not None:
                    raise StoreError(f"{spec.output} is already the output of job {busy['id']} ({busy['state']})")
                cur = db.execute("INSERT INTO jobs (spec, input, output, state, created, updated) VALUES "
                                 "(?, ?, ?, 'queued', ?, ?)", (spec.to_json(), spec.input, spec.output, now, now))
                job = cur.lastrowid
                db.executemany("INSERT INTO chunks (job, idx, start, stop, chunk, state) VALUES (?, ?, ?, ?, ?, "
                               "'queued')", [(job, c.index, c.start, c.stop, json.dumps(c.to_dict())) for c in chunks])
                ids.append(job)
        return ids

    def _job(self, db, job: int) -> sqlite3.Row:
        row = db.execute("SELECT * FROM jobs WHERE id = ?", (job,)).fetchone()
        if row is None:
            raise InputError(f"no job {job} in {self.path}")
        return row

    def cancel(self, job: int) -> None:
        """Queued and running jobs stop being worked on (a chunk in progress finishes; nothing more starts)."""
        with self.transaction() as db:
            row = self._job(db, job)
            if row["state"] not in ("queued", "running"):
                raise InputError(f"job {job} is {row['state']}; only a queued or running job can be cancelled")
            db.execute("UPDATE jobs SET state = 'cancelled', updated = ? WHERE id = ?", (time.time(), job))

    def retry(self, job: int, committed=None) -> None:
        """A failed or cancelled job is queued again; its committed chunks stay done.

        ``committed(chunk_dict) -> bool`` (optional): whether a done chunk's file is still there; one that is not
        is queued again too.
        """
        with self.transaction() as db:
            row = self._job(db, job)
            if row["state"] not in ("failed", "cancelled"):
                raise InputError(f"job {job} is {row['state']}; only a failed or cancelled job can be retried")
            db.execute("UPDATE chunks SET state = 'queued', owner = NULL, expiry = NULL, attempts = 0 "
                       "WHERE job = ? AND state != 'done'", (job,))
            if committed is not None:
                for c in db.execute("SELECT idx, chunk FROM chunks WHERE job = ? AND state = 'done'", (job,)):
                    if not committed(json.loads(c["chunk"])):
                        db.execute("UPDATE chunks SET state = 'queued', report = NULL WHERE job = ? AND idx = ?",
                                   (job, c["idx"]))
            done = db.execute("SELECT count(*) FROM chunks WHERE job = ? AND state = 'done'", (job,)).fetchone()[0]
            db.execute("UPDATE jobs SET state = ?, error = NULL, join_owner = NULL, join_expiry = NULL, updated = ? "
                       "WHERE id = ?", ("running" if done else "queued", time.time(), job))

    # -- reading -------------------------------------------------------------------------------------------
    def jobs(self, ids: list[int] | None = None) -> list[JobRow]:
        """Every job (or those of ``ids``), oldest first, with their chunk counts and measured speed."""
        with self.transaction(immediate=False) as db:
            rows = db.execute("SELECT * FROM jobs ORDER BY id").fetchall()
            chunks = db.execute("SELECT job, state, start, stop, report FROM chunks").fetchall()
        per: dict[int, list] = {}
        for c in chunks:
            per.setdefault(c["job"], []).append(c)
        out = []
        for r in rows:
            if ids is not None and r["id"] not in ids:
                continue
            cs = per.get(r["id"], [])
            done = [c for c in cs if c["state"] == "done"]
            reports = [json.loads(c["report"]) for c in done if c["report"]]
            out.append(JobRow(r["id"], r["input"], r["output"], r["state"], r["error"], len(done), len(cs),
                              sum(c["state"] == "running" for c in cs), sum(c["stop"] - c["start"] for c in done),
                              sum(c["stop"] - c["start"] for c in cs), sum(float(x.get("wall_s", 0)) for x in reports)))
        return out

    def job(self, job: int) -> JobRow:
        rows = self.jobs([job])
        if not rows:
            raise InputError(f"no job {job} in {self.path}")
        return rows[0]

    def spec_json(self, job: int) -> str:
        with self.transaction(immediate=False) as db:
            return self._job(db, job)["spec"]

    def chunks(self, job: int) -> list[dict]:
        """The chunk rows of ``job`` as dicts (index order), reports decoded."""
        with self.transaction(immediate=False) as db:
            self._job(db, job)
            rows = db.execute("SELECT * FROM chunks WHERE job = ? ORDER BY idx", (job,)).fetchall()
        out = []
        for r in rows:
            d = dict(r)
            d["chunk"] = json.loads(d["chunk"])
            d["report"] = json.loads(d["report"]) if d["report"] else None
            out.append(d)
        return out

    def integrity_check(self) -> str:
        with self._errors():
            return self._db.execute("PRAGMA integrity_check").fetchone()[0]
