"""The workers' side of the job store: claim work under a lease, keep it alive, commit, fail, release.

Mixed into :class:`vsr.jobs.store.JobStore`; every method is one ``BEGIN IMMEDIATE`` transaction.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass

# A chunk whose worker vanished this many times is not tried again and its job fails: an input that kills its
# worker (the OOM killer, a native crash) must not take every later `vsr jobs run` down with it.  Well above the
# 20 kills at random moments that the crash test (scripts/crash_jobs.py) survives with every job done.
MAX_ATTEMPTS = 25


@dataclass(frozen=True)
class Claim:
    """Work a worker holds a lease on: a chunk (``index`` >= 0) or the job's join (``index`` is None)."""

    job: int
    spec: str  # JobSpec JSON
    index: int | None = None
    chunk: dict | None = None  # ChunkSpec.to_dict()

    @property
    def is_join(self) -> bool:
        return self.index is None


def owner_id() -> str:
    """A lease owner: this host, this process, and a token (two workers of one process never share an owner)."""
    return f"{socket.gethostname()}:{os.getpid()}:{os.urandom(4).hex()}"


def owner_gone(owner: str | None) -> bool:
    """Whether ``owner`` is a process of this host that has exited (its lease needs no waiting for)."""
    if not owner:
        return True
    host, _, rest = owner.partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # it exists, under another user
        return False
    return False


def lost(owner: str | None, expiry: float | None, now: float) -> bool:
    """Whether a lease (``owner``, ``expiry``) is no longer held: it ran out, or its owner is known gone."""
    return expiry is None or expiry < now or owner_gone(owner)


# the jobs a worker may take work from: queued and running ones, and waiting ones (disk full) whose wait is over
_OPEN = "(state IN ('queued', 'running') OR (state = 'waiting' AND coalesce(not_before, 0) <= :now))"


class Leases:
    """Claims, heartbeats and commits (a mixin: needs ``self.transaction()`` and ``self.path``)."""

    def claim(self, owner: str, lease_s: float, max_attempts: int = MAX_ATTEMPTS, fits=None) -> Claim | None:
        """The next piece of work, leased to ``owner`` for ``lease_s`` seconds, or None if there is none now.

        A job whose chunks are all done offers its join first; then queued chunks and chunks whose lease was
        lost, oldest job first.  A chunk lost ``max_attempts`` times fails its job instead.  ``fits(job, spec)``
        (:meth:`vsr.jobs.needs.Machine.fits`; ``spec()`` reads the job's spec): False for a job whose chunks this
        worker leaves to another (it has no GPU); they stay queued.  A join needs no backend: any worker joins.
        """
        now = time.time()
        with self.transaction() as db:
            for j in db.execute(f"SELECT id, spec, join_owner, join_expiry FROM jobs j WHERE {_OPEN} AND NOT EXISTS "
                                "(SELECT 1 FROM chunks c WHERE c.job = j.id AND c.state != 'done') ORDER BY id",
                                {"now": now}).fetchall():
                if j["join_owner"] is None or lost(j["join_owner"], j["join_expiry"], now):
                    db.execute("UPDATE jobs SET state = 'running', error = NULL, not_before = NULL, join_owner = ?, "
                               "join_expiry = ?, updated = ? WHERE id = ?", (owner, now + lease_s, now, j["id"]))
                    return Claim(j["id"], j["spec"])
            rows = db.execute("SELECT c.job, c.idx, c.chunk, c.state, c.owner, c.expiry, c.attempts, c.start, c.stop "
                              f"FROM chunks c JOIN (SELECT id FROM jobs WHERE {_OPEN}) j ON j.id = c.job "
                              "WHERE c.state IN ('queued', 'running') ORDER BY c.job, c.idx", {"now": now}).fetchall()
            failed: set[int] = set()
            for c in rows:
                if c["job"] in failed or (c["state"] == "running" and not lost(c["owner"], c["expiry"], now)):
                    continue
                if fits is not None and not fits(c["job"], lambda: self._spec(db, c["job"])):
                    continue
                if c["attempts"] >= max_attempts:
                    message = (f"chunk {c['idx']} (frames {c['start']}:{c['stop']}) was started {c['attempts']} "
                               f"times and its worker vanished each time (killed? out of memory?)")
                    self._fail(db, c["job"], c["idx"], message, now)
                    failed.add(c["job"])
                    continue
                db.execute("UPDATE chunks SET state = 'running', owner = ?, expiry = ?, heartbeat = ?, "
                           "attempts = attempts + 1, progress = 0, progress_s = 0 WHERE job = ? AND idx = ?",
                           (owner, now + lease_s, now, c["job"], c["idx"]))
                db.execute("UPDATE jobs SET state = 'running', error = CASE WHEN state = 'waiting' THEN NULL ELSE "
                           "error END, not_before = NULL, updated = ? WHERE id = ?", (now, c["job"]))
                return Claim(c["job"], self._spec(db, c["job"]), c["idx"], json.loads(c["chunk"]))
        return None

    @staticmethod
    def _spec(db, job: int) -> str:
        return db.execute("SELECT spec FROM jobs WHERE id = ?", (job,)).fetchone()[0]

    def heartbeat(self, owner: str, claim: Claim, lease_s: float, progress: tuple[int, float] | None = None) -> bool:
        """Extend ``owner``'s lease on ``claim``, and record the chunk's ``progress`` (frames written, seconds
        since its first frame); False when the lease was lost or the job was stopped."""
        now = time.time()
        frames, seconds = progress or (0, 0.0)
        with self.transaction() as db:
            if claim.is_join:
                n = db.execute("UPDATE jobs SET join_expiry = ? WHERE id = ? AND join_owner = ?",
                               (now + lease_s, claim.job, owner)).rowcount
            else:
                n = db.execute("UPDATE chunks SET expiry = ?, heartbeat = ?, progress = ?, progress_s = ? WHERE "
                               "job = ? AND idx = ? AND owner = ? AND state = 'running'",
                               (now + lease_s, now, frames, seconds, claim.job, claim.index, owner)).rowcount
            state = db.execute("SELECT state FROM jobs WHERE id = ?", (claim.job,)).fetchone()
        return n == 1 and state is not None and state[0] in ("queued", "running")

    def commit_chunk(self, owner: str, claim: Claim, report: dict, computed: bool) -> None:
        """Record a chunk committed on disk, with its run report; ``computed``: this worker computed it (rather
        than finding it committed).  Recorded even if the lease was lost meanwhile: the file is there."""
        now = time.time()
        with self.transaction() as db:
            db.execute("UPDATE chunks SET computed = computed + ? WHERE job = ? AND idx = ?",
                       (int(computed), claim.job, claim.index))
            db.execute("UPDATE chunks SET state = 'done', report = ?, owner = NULL, expiry = NULL "
                       "WHERE job = ? AND idx = ? AND state != 'done'", (json.dumps(report), claim.job, claim.index))
            db.execute("UPDATE jobs SET updated = ? WHERE id = ?", (now, claim.job))

    def finish_job(self, owner: str, claim: Claim) -> None:
        """The join wrote the output: the job is done -- a job cancelled meanwhile too (a worker whose join lease
        ran out while it went on: the output is there, complete)."""
        with self.transaction() as db:
            db.execute("UPDATE jobs SET state = 'done', error = NULL, join_owner = NULL, join_expiry = NULL, "
                       "updated = ? WHERE id = ? AND state IN ('queued', 'running', 'waiting', 'cancelled')",
                       (time.time(), claim.job))

    def fail(self, owner: str, claim: Claim, message: str) -> None:
        """The claimed work failed for good (bad input): its job fails with ``message`` (one line)."""
        with self.transaction() as db:
            self._fail(db, claim.job, claim.index, message, time.time())

    def drop_done(self, job: int) -> None:
        """The chunk folder of failed ``job`` was removed (its input changed): its done chunks are no longer
        there, so list no longer counts them, and a retry computes them again."""
        with self.transaction() as db:
            db.execute("UPDATE chunks SET state = 'queued', report = NULL, progress = 0, progress_s = 0 "
                       "WHERE job = ? AND state = 'done'", (job,))

    @staticmethod
    def _fail(db, job: int, index: int | None, message: str, now: float) -> None:
        if index is not None:
            db.execute("UPDATE chunks SET state = 'failed', owner = NULL, expiry = NULL WHERE job = ? AND idx = ?",
                       (job, index))
        db.execute("UPDATE jobs SET state = 'failed', error = ?, join_owner = NULL, join_expiry = NULL, updated = ? "
                   "WHERE id = ? AND state IN ('queued', 'running', 'waiting')", (message, now, job))

    def wait(self, owner: str, claim: Claim, message: str, wait_s: float) -> None:
        """The claimed work could not be written (the output's disk is full): it goes back to the queue, not
        counted as an attempt, and its job waits ``wait_s`` seconds, saying why (``message``), before a worker
        tries it again.  Nothing is lost: the chunks committed stay."""
        now = time.time()
        with self.transaction() as db:
            if claim.is_join:
                db.execute("UPDATE jobs SET join_owner = NULL, join_expiry = NULL WHERE id = ? AND join_owner = ?",
                           (claim.job, owner))
            else:
                db.execute("UPDATE chunks SET state = 'queued', owner = NULL, expiry = NULL, progress = 0, "
                           "progress_s = 0, attempts = max(0, attempts - 1) WHERE job = ? AND idx = ? AND owner = ? "
                           "AND state = 'running'", (claim.job, claim.index, owner))
            db.execute("UPDATE jobs SET state = 'waiting', error = ?, not_before = ?, updated = ? WHERE id = ? "
                       "AND state IN ('queued', 'running', 'waiting')", (message, now + wait_s, now, claim.job))

    def release(self, owner: str) -> None:
        """Everything ``owner`` holds goes back to the queue at once (Ctrl-C); not counted as a lost attempt."""
        with self.transaction() as db:
            db.execute("UPDATE chunks SET state = 'queued', owner = NULL, expiry = NULL, attempts = max(0, "
                       "attempts - 1) WHERE owner = ? AND state = 'running'", (owner,))
            db.execute("UPDATE jobs SET join_owner = NULL, join_expiry = NULL WHERE join_owner = ?", (owner,))

    def pending(self, fits=None) -> bool:
        """Whether any job is still queued, running or waiting (``fits``: as :meth:`claim`'s, one that fits)."""
        with self.transaction(immediate=False) as db:
            jobs = db.execute("SELECT id FROM jobs WHERE state IN ('queued', 'running', 'waiting') ORDER BY id")
            return any(fits is None or fits(j, lambda: self._spec(db, j)) for (j,) in jobs.fetchall())

    def unfinished(self) -> list[tuple[int, str]]:
        """``(id, spec)`` of every job still queued, running or waiting, oldest first."""
        with self.transaction(immediate=False) as db:
            return [(j, s) for j, s in db.execute("SELECT id, spec FROM jobs WHERE state IN ('queued', 'running', "
                                                  "'waiting') ORDER BY id").fetchall()]
