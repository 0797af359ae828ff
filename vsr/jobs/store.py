"""The job store: jobs and their chunks in one SQLite file (``$XDG_DATA_HOME/vsr/jobs.db`` by default).

Every state change is one transaction; a claim is ``BEGIN IMMEDIATE`` (one writer at a time), so several worker
processes on one machine share the file safely.  The file is in WAL mode (readers never wait for a writer).

A running chunk (or a job's join) holds a *lease*: its owner (``host:pid:token``) and an expiry that the owner's
heartbeat pushes forward.  A chunk whose lease expired, or whose owner is a process of this host that no longer
exists, goes back to the queue.  ``attempts`` counts the claims of a chunk; ``computed`` counts the runs that
computed it (a chunk found committed on disk is not computed again), so ``computed <= 1`` for every chunk is
the store's own record that no committed chunk was computed twice.

Jobs: queued -> running -> done | failed | cancelled, and running -> waiting -> running while the output's disk
is full.  Chunks: queued -> running -> done | failed.  At most one unfinished job owns an output path: a unique
index of the store, so ``add``, ``retry`` and job files cannot get around it (:mod:`vsr.jobs.schema`).
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from vsr.errors import InputError
from vsr.files import special_kind, user_data_dir
from vsr.jobs import schema
from vsr.jobs.leases import Leases, lost
from vsr.jobs.rows import JobRow, decode_report, job_row
from vsr.jobs.schema import JOB_STATES, ONE_OWNER_INDEX, SCHEMA_VERSION, UNFINISHED

__all__ = ["JOB_STATES", "SCHEMA_VERSION", "JobRow", "JobStore", "StoreError", "default_store", "store_file_at",
           "store_files", "store_path"]

STORE_NAME = "jobs.db"
# How long a statement waits for another process's write before giving up (seconds).
DEFAULT_BUSY_TIMEOUT_S = 10.0
# Where vsr kept the store before schema 2 (relative to the current folder): named when no store is found.
OLD_DEFAULT = Path("jobs") / "queue.db"


# what a job's row (JobRow) reads of its chunks
_CHUNK_COLUMNS = "job, state, start, stop, report, owner, expiry, progress, progress_s"


class StoreError(InputError):
    """The job store cannot be used: missing, unreadable, locked, corrupt, or not a vsr job store."""


def default_store() -> Path:
    """The store when none is named: ``jobs.db`` in the user's data folder (:func:`vsr.files.user_data_dir`)."""
    return user_data_dir(("VSR_JOBS_STORE", "XDG_DATA_HOME")) / STORE_NAME


def store_path(path: str | os.PathLike | None = None) -> Path:
    """``--store PATH``, else ``$VSR_JOBS_STORE`` (``$VSR_JOBS``, its older name), else :func:`default_store`."""
    for given, name in ((path, "--store"), (os.environ.get("VSR_JOBS_STORE"), "VSR_JOBS_STORE"),
                        (os.environ.get("VSR_JOBS"), "VSR_JOBS")):
        if given is not None:
            if not os.fspath(given):
                raise StoreError(f"{name} is empty: it names the job store's file")
            return Path(given)
    return default_store()


def store_files(path: str | os.PathLike) -> tuple[Path, ...]:
    """The store's file and the files SQLite keeps beside it (write-ahead log, shared memory, rollback journal):
    no output of vsr may be one of them, as a page or a video written there would replace the queue itself."""
    path = Path(path)
    return (path, *(path.with_name(path.name + suffix) for suffix in ("-wal", "-shm", "-journal")))


def store_file_at(output: str | os.PathLike, store: str | os.PathLike) -> Path | None:
    """The file of ``store`` (:func:`store_files`) that ``output`` names, by any spelling or link; else None."""
    out = Path(output)
    for file in store_files(store):
        if out.resolve() == file.resolve() or (out.exists() and file.exists() and out.samefile(file)):
            return file
    return None


def _uri(path: Path, **query: str) -> str:
    return "file:" + quote(str(path.absolute())) + "?" + "&".join(f"{k}={v}" for k, v in query.items())


def _remove_if_empty(path: Path) -> None:
    """The file of a store whose creation failed (a full disk, Ctrl-C), removed while SQLite has written nothing
    into it: left, the empty file was "an SQLite file but not a vsr job store" to every later command."""
    try:
        if os.lstat(path).st_size == 0:
            os.unlink(path)
    except OSError:
        pass


class JobStore(Leases):
    """The SQLite job store at ``path`` (created by ``create=True``; else it must exist).  ``write=False``: the
    store is only read (``list``, ``report``), so one on a read-only file system or without write permission
    opens too.  The workers' side (claims, heartbeats, commits) is :class:`vsr.jobs.leases.Leases`."""

    def __init__(self, path: str | Path | None = None, *, create: bool = False, write: bool = True,
                 busy_timeout_s: float | None = None):
        self.path = store_path(path)
        if busy_timeout_s is None:
            busy_timeout_s = float(os.environ.get("VSR_JOBS_BUSY_TIMEOUT", DEFAULT_BUSY_TIMEOUT_S))
        self.busy_timeout_s = busy_timeout_s
        if self.path.exists() and not self.path.is_file():  # (it said "no job store at /dev/null: add creates it")
            kind = "a folder" if self.path.is_dir() else special_kind(self.path.stat().st_mode) or "not a file"
            raise StoreError(f"{self.path} is {kind}: a job store is a file (--store names it)")
        if not create and not self.path.is_file():
            hint = f"; an older vsr kept it in {OLD_DEFAULT}: pass --store {OLD_DEFAULT}" \
                if path is None and OLD_DEFAULT.is_file() else ""
            raise StoreError(f"no job store at {self.path} (vsr jobs add creates it{hint})")
        if create and self.path.is_symlink() and not self.path.exists():  # (SQLite created it at the target)
            raise StoreError(f"{self.path} is a broken symbolic link (to {os.readlink(self.path)}): vsr does not "
                             "create a job store through a link; name the file itself")
        if create:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise StoreError(f"cannot create the job store folder {self.path.parent}: {e.strerror}") from None
        new = create and not os.path.lexists(self.path)
        self._db = self._connect(write)
        try:
            self._db.row_factory = sqlite3.Row
            with self._errors():
                self._setup(create, write)
        except BaseException:
            self._db.close()
            if new:
                _remove_if_empty(self.path)
            raise

    def _connect(self, write: bool) -> sqlite3.Connection:
        """A connection: read-write, or for ``write=False`` read-only, and where even that cannot open its WAL
        index (a read-only file system), immutable (nothing can change the file there)."""
        uris = [None] if write else [_uri(self.path, mode="ro"), _uri(self.path, immutable="1")]
        for i, uri in enumerate(uris):
            try:
                if uri is None:
                    return sqlite3.connect(str(self.path), timeout=self.busy_timeout_s, isolation_level=None)
                db = sqlite3.connect(uri, uri=True, timeout=self.busy_timeout_s, isolation_level=None)
                db.execute("PRAGMA user_version").fetchone()  # a read-only open fails here, not at connect
                return db
            except sqlite3.DatabaseError as e:
                if i == len(uris) - 1 or "locked" in str(e) or "busy" in str(e):  # immutable would read past a lock
                    with self._errors():
                        raise e
        raise AssertionError("unreachable")

    def _setup(self, create: bool, write: bool) -> None:
        db = self._db
        db.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_s * 1000)}")
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version == 0 and write:
            with self.transaction():  # two `vsr jobs add` may create the same store at once: one does
                version = db.execute("PRAGMA user_version").fetchone()[0]
                tables = db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
                if version == 0 and (tables or not create):
                    raise StoreError(f"{self.path} is an SQLite file but not a vsr job store")
                if version == 0:
                    schema.create(db)
                    version = SCHEMA_VERSION
        if version == 1 and write:  # foreign keys are still off: the jobs table is rebuilt, its chunks stay
            with self.transaction():
                if db.execute("PRAGMA user_version").fetchone()[0] == 1:
                    schema.migrate_from_1(db, time.time())
            version = SCHEMA_VERSION
        if version == 0:
            raise StoreError(f"{self.path} is an SQLite file but not a vsr job store")
        if version != SCHEMA_VERSION:
            raise StoreError(f"{self.path} is a job store of schema version {version}; this vsr reads version "
                             f"{SCHEMA_VERSION}" + ("" if write else " (and cannot update it: it is read-only)"))
        db.execute("PRAGMA foreign_keys = ON")
        if write and db.execute("PRAGMA journal_mode = WAL").fetchone()[0].lower() != "wal":
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
            elif "readonly" in text or "unable to open" in text:
                text = f"it cannot be written here ({text}); vsr jobs list and report only read it"
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
                try:
                    cur = db.execute("INSERT INTO jobs (spec, input, output, state, created, updated) VALUES "
                                     "(?, ?, ?, 'queued', ?, ?)", (spec.to_json(), spec.input, spec.output, now, now))
                except sqlite3.IntegrityError as e:
                    raise self._owned(db, e, spec.output, f"{spec.output} is already the output of") from None
                job = cur.lastrowid
                db.executemany("INSERT INTO chunks (job, idx, start, stop, chunk, state) VALUES (?, ?, ?, ?, ?, "
                               "'queued')", [(job, c.index, c.start, c.stop, json.dumps(c.to_dict())) for c in chunks])
                ids.append(job)
        return ids

    def _owned(self, db, error: sqlite3.IntegrityError, output: str, what: str) -> Exception:
        """The one-output-one-owner index refused a job: an error naming the job that owns ``output``."""
        if ONE_OWNER_INDEX not in str(error) and "jobs.output" not in str(error):
            return StoreError(f"job store {self.path}: {error}")
        row = db.execute(f"SELECT id, state FROM jobs WHERE output = ? AND state IN {UNFINISHED}",
                         (output,)).fetchone()
        owner = f"job {row['id']} ({row['state']})" if row is not None else "another unfinished job"
        return StoreError(f"{what} {owner}: one unfinished job per output (--overwrite does not change that)")

    def _job(self, db, job: int) -> sqlite3.Row:
        row = db.execute("SELECT * FROM jobs WHERE id = ?", (job,)).fetchone()
        if row is None:
            raise InputError(f"no job {job} in {self.path}")
        return row

    def cancel(self, job: int) -> None:
        """Unfinished jobs stop being worked on (a chunk in progress finishes; nothing more starts).  Refused
        while a worker joins the job's chunks into its output: every frame is computed, and the join ends with
        the output in place (a cancelled job would then hold a finished output that its retry computes again)."""
        with self.transaction() as db:
            row = self._job(db, job)
            if row["state"] not in UNFINISHED:
                raise InputError(f"job {job} is {row['state']}; only a queued, running or waiting job can be "
                                 "cancelled")
            if row["join_owner"] is not None and not lost(row["join_owner"], row["join_expiry"], time.time()):
                raise InputError(f"job {job} is being joined into {row['output']} (every chunk is done): it can "
                                 "no longer be cancelled; remove the output once it is written if it is not wanted")
            db.execute("UPDATE jobs SET state = 'cancelled', updated = ? WHERE id = ?", (time.time(), job))

    def retry(self, job: int, committed=None) -> None:
        """A failed or cancelled job is queued again; its committed chunks stay done.  Refused while another
        unfinished job owns its output.

        ``committed(chunk_dict) -> bool`` (optional): whether a done chunk's file is still there; one that is not
        is queued again too.
        """
        with self.transaction() as db:
            row = self._job(db, job)
            if row["state"] not in ("failed", "cancelled"):
                raise InputError(f"job {job} is {row['state']}; only a failed or cancelled job can be retried")
            now = time.time()
            # a chunk a live worker still computes (a cancelled job's chunk in progress) stays its own: queued
            # again, a second worker would compute it beside the first
            for c in db.execute("SELECT idx, state, owner, expiry FROM chunks WHERE job = ? AND state != 'done'",
                                (job,)).fetchall():
                if c["state"] != "running" or lost(c["owner"], c["expiry"], now):
                    db.execute("UPDATE chunks SET state = 'queued', owner = NULL, expiry = NULL, attempts = 0, "
                               "progress = 0, progress_s = 0 WHERE job = ? AND idx = ?", (job, c["idx"]))
            if committed is not None:
                for c in db.execute("SELECT idx, chunk FROM chunks WHERE job = ? AND state = 'done'", (job,)):
                    if not committed(json.loads(c["chunk"])):
                        db.execute("UPDATE chunks SET state = 'queued', report = NULL WHERE job = ? AND idx = ?",
                                   (job, c["idx"]))
            try:
                db.execute("UPDATE jobs SET state = 'queued', error = NULL, not_before = NULL, updated = ? WHERE "
                           "id = ?", (now, job))
                if row["join_owner"] is not None and lost(row["join_owner"], row["join_expiry"], now):
                    db.execute("UPDATE jobs SET join_owner = NULL, join_expiry = NULL WHERE id = ?", (job,))
            except sqlite3.IntegrityError as e:
                raise self._owned(db, e, row["output"], f"job {job} cannot be retried: its output "
                                                        f"{row['output']} is now the output of") from None

    # -- reading -------------------------------------------------------------------------------------------
    def jobs(self, ids: list[int] | None = None) -> list[JobRow]:
        """Every job (or those of ``ids``), oldest first, with their chunk counts, progress and speed."""
        with self.transaction(immediate=False) as db:
            rows = db.execute("SELECT * FROM jobs ORDER BY id").fetchall()
            chunks = db.execute(f"SELECT {_CHUNK_COLUMNS} FROM chunks").fetchall()
        per: dict[int, list] = {}
        for c in chunks:
            per.setdefault(c["job"], []).append(c)
        now = time.time()
        return [job_row(r, per.get(r["id"], []), now) for r in rows if ids is None or r["id"] in ids]

    def outlook(self, job: int, fits=None) -> tuple[JobRow, int]:
        """``job``'s row and how many other jobs are unfinished (queued, running, waiting), of those this machine
        runs where ``fits(job, spec)`` says which (:meth:`vsr.jobs.needs.Machine.fits`: a GPU job left to other
        machines is none of this worker's): what a worker says while it computes a chunk of ``job``.  Reads that
        job's chunks only."""
        with self.transaction(immediate=False) as db:
            row = self._job(db, job)
            chunks = db.execute(f"SELECT {_CHUNK_COLUMNS} FROM chunks WHERE job = ?", (job,)).fetchall()
            others = [r[0] for r in db.execute("SELECT id FROM jobs WHERE id != ? AND state IN (?, ?, ?)",
                                               (job, *UNFINISHED))]
        # a job's spec is read once, the first time `fits` asks (it keeps its answer per job): not every chunk
        count = sum(1 for o in others if fits is None or fits(o, lambda o=o: self._spec_or_none(o)))
        return job_row(row, chunks, time.time()), count

    def _spec_or_none(self, job: int) -> str:
        with self.transaction(immediate=False) as db:
            row = db.execute("SELECT spec FROM jobs WHERE id = ?", (job,)).fetchone()
        return row[0] if row is not None else "null"  # (gone meanwhile: no need, counted)

    def job(self, job: int) -> JobRow:
        rows = self.jobs([job])
        if not rows:
            raise InputError(f"no job {job} in {self.path}")
        return rows[0]

    def spec_json(self, job: int) -> str:
        with self.transaction(immediate=False) as db:
            return self._job(db, job)["spec"]

    def chunks(self, job: int) -> list[dict]:
        """The chunk rows of ``job`` as dicts (index order), reports decoded (a report that is not a JSON object
        is None, with ``report_error`` saying why)."""
        with self.transaction(immediate=False) as db:
            self._job(db, job)
            rows = db.execute("SELECT * FROM chunks WHERE job = ? ORDER BY idx", (job,)).fetchall()
        out = []
        for r in rows:
            d = dict(r)
            d["chunk"] = json.loads(d["chunk"])
            d["report"], d["report_error"] = decode_report(d["report"])
            out.append(d)
        return out

    def integrity_check(self) -> str:
        with self._errors():
            return self._db.execute("PRAGMA integrity_check").fetchone()[0]
