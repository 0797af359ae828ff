"""The job store's tables, and the step from each older schema to the current one.

Version 2 (this vsr): jobs may be ``waiting`` (their output's disk was full; ``not_before`` says when they are
offered again); a unique index lets at most one unfinished job (queued, running or waiting) own an output path,
whatever command tries (add, retry, a job file); chunks record the frames a running chunk has written so far
(``progress``, over ``progress_s`` seconds), which ``vsr jobs list`` shows while a runner works.
"""

from __future__ import annotations

import sqlite3

SCHEMA_VERSION = 2
UNFINISHED = ("queued", "running", "waiting")
JOB_STATES = (*UNFINISHED, "done", "failed", "cancelled")
ONE_OWNER_INDEX = "jobs_one_owner_per_output"

_JOBS = """
CREATE TABLE {name} (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    spec TEXT NOT NULL,
    input TEXT NOT NULL,
    output TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('queued', 'running', 'waiting', 'done', 'failed', 'cancelled')),
    error TEXT,
    join_owner TEXT,
    join_expiry REAL,
    not_before REAL,
    created REAL NOT NULL,
    updated REAL NOT NULL
)"""
_OWNER = (f"CREATE UNIQUE INDEX {ONE_OWNER_INDEX} ON jobs (output) "
          f"WHERE state IN ('queued', 'running', 'waiting')")
_CHUNKS = """
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
    progress INTEGER NOT NULL DEFAULT 0,
    progress_s REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (job, idx)
)"""


def create(db: sqlite3.Connection) -> None:
    """The tables of an empty store (inside the caller's transaction)."""
    db.execute(_JOBS.format(name="jobs"))
    db.execute(_OWNER)
    db.execute(_CHUNKS)
    db.execute("CREATE INDEX chunks_state ON chunks (state)")
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def migrate_from_1(db: sqlite3.Connection, now: float) -> list[int]:
    """A version-1 store -> version 2, inside the caller's transaction, with foreign keys off (the jobs table is
    rebuilt for its new states).  Version 1 let ``retry`` make a second unfinished job of one output: all but
    the oldest such job fail, with a message saying which job owns the output (``retry`` them once it has
    ended).  Returns the ids of the jobs failed so."""
    db.execute(_JOBS.format(name="jobs_v2"))
    db.execute("INSERT INTO jobs_v2 (id, spec, input, output, state, error, join_owner, join_expiry, created, "
               "updated) SELECT id, spec, input, output, state, error, join_owner, join_expiry, created, updated "
               "FROM jobs")
    owners = dict(db.execute("SELECT output, min(id) FROM jobs_v2 WHERE state IN ('queued', 'running') "
                             "GROUP BY output").fetchall())
    failed = []
    for job, output in db.execute("SELECT id, output FROM jobs_v2 WHERE state IN ('queued', 'running') "
                                  "ORDER BY id").fetchall():
        if owners[output] != job:
            db.execute("UPDATE jobs_v2 SET state = 'failed', error = ?, updated = ? WHERE id = ?",
                       (f"job {owners[output]} writes the same output; retry this one once it has ended", now, job))
            failed.append(job)
    db.execute("DROP TABLE jobs")
    db.execute("ALTER TABLE jobs_v2 RENAME TO jobs")
    db.execute(_OWNER)
    db.execute("ALTER TABLE chunks ADD COLUMN progress INTEGER NOT NULL DEFAULT 0")
    db.execute("ALTER TABLE chunks ADD COLUMN progress_s REAL NOT NULL DEFAULT 0")
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    return failed
