"""The SQLite job store: claims under leases, heartbeats, commits, failures, cancel and retry, and the one-line
errors of a store that cannot be used.  Real SQLite files; concurrent claims from real processes."""

from __future__ import annotations

import json
import multiprocessing
import socket
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from vsr.errors import InputError
from vsr.jobs.leases import MAX_ATTEMPTS, owner_id
from vsr.jobs.store import SCHEMA_VERSION, JobStore, StoreError


@dataclass(frozen=True)
class FakeSpec:
    """What the store reads of a JobSpec."""

    input: str
    output: str

    def to_json(self) -> str:
        return json.dumps({"input": self.input, "output": self.output})


@dataclass(frozen=True)
class FakeChunk:
    index: int
    start: int
    stop: int

    def to_dict(self) -> dict:
        return {"index": self.index, "start": self.start, "stop": self.stop}


def job(name: str, chunks: int, frames: int = 4):
    return FakeSpec(f"/in/{name}.mp4", f"/out/{name}.mp4"), [FakeChunk(i, i * frames, (i + 1) * frames)
                                                             for i in range(chunks)]


def report(frames: int, wall: float) -> dict:
    return {"format": "vsr-run-report/2", "frames": frames, "wall_s": wall, "stages": []}


@pytest.fixture
def store(tmp_path):
    with JobStore(tmp_path / "jobs" / "queue.db", create=True) as s:
        yield s


def test_a_job_runs_chunk_by_chunk_then_joins(store):
    (a,) = store.add_jobs([job("a", 2)])
    me = owner_id()
    c0 = store.claim(me, 30)
    c1 = store.claim(me, 30)
    assert (c0.job, c0.index, c1.index) == (a, 0, 1) and not c0.is_join
    assert json.loads(c0.spec)["input"] == "/in/a.mp4" and c1.chunk == {"index": 1, "start": 4, "stop": 8}
    assert store.claim(me, 30) is None  # both chunks leased, the join not ready
    store.commit_chunk(me, c0, report(4, 2.0), computed=True)
    row = store.job(a)
    assert (row.state, row.chunks_done, row.chunks_total, row.fps) == ("running", 1, 2, 2.0)
    assert row.eta_s == pytest.approx(2.0)  # 4 frames left at 2 fps, one chunk running
    store.commit_chunk(me, c1, report(4, 2.0), computed=True)
    join = store.claim(me, 30)
    assert join.is_join and join.job == a and store.claim(me, 30) is None
    assert store.pending()
    store.finish_job(me, join)
    assert store.job(a).state == "done" and not store.pending() and store.job(a).eta_s is None
    assert [c["computed"] for c in store.chunks(a)] == [1, 1] and store.integrity_check() == "ok"


def test_an_expired_lease_returns_the_chunk_to_the_queue(store):
    (a,) = store.add_jobs([job("a", 1)])
    far = "another-host:1:x"  # not this machine: only the lease's expiry frees it
    first = store.claim(far, 0.05)
    assert store.claim(owner_id(), 30) is None
    time.sleep(0.1)
    again = store.claim("me:2:y", 30)
    assert (again.job, again.index) == (a, 0) and store.chunks(a)[0]["attempts"] == 2
    assert not store.heartbeat(far, first, 30)  # the first owner lost it
    assert store.heartbeat("me:2:y", again, 30)


def test_the_chunk_of_a_dead_local_process_is_free_at_once(store):
    store.add_jobs([job("a", 1)])
    dead = subprocess.Popen(["true"])
    dead.wait()
    store.claim(f"{socket.gethostname()}:{dead.pid}:t", 3600)
    assert store.claim(owner_id(), 30).index == 0


def test_a_chunk_whose_worker_keeps_vanishing_fails_its_job(store):
    (a,) = store.add_jobs([job("a", 1)])
    (b,) = store.add_jobs([job("b", 1)])
    for _ in range(MAX_ATTEMPTS):
        assert store.claim("elsewhere:1:x", 0.001).job == a
        time.sleep(0.005)
    nxt = store.claim(owner_id(), 30)
    assert nxt.job == b  # the other job goes on
    row = store.job(a)
    assert row.state == "failed" and f"started {MAX_ATTEMPTS} times" in row.error


def test_release_gives_the_claims_back_without_counting_an_attempt(store):
    (a,) = store.add_jobs([job("a", 2)])
    me = owner_id()
    store.claim(me, 30)
    store.release(me)
    assert [c["state"] for c in store.chunks(a)] == ["queued", "queued"]
    assert store.claim(owner_id(), 30).index == 0 and store.chunks(a)[0]["attempts"] == 1


def test_a_failure_fails_its_job_only(store):
    a, b = store.add_jobs([job("a", 2), job("b", 1)])
    me = owner_id()
    claim = store.claim(me, 30)
    store.fail(me, claim, "input does not exist: /in/a.mp4")
    assert store.job(a).state == "failed" and store.job(a).error == "input does not exist: /in/a.mp4"
    assert store.claim(me, 30).job == b  # a's other chunk is not offered


def test_cancel_and_retry(store):
    (a,) = store.add_jobs([job("a", 3)])
    me = owner_id()
    done = store.claim(me, 30)
    store.commit_chunk(me, done, report(4, 1.0), computed=True)
    store.cancel(a)
    assert store.claim(me, 30) is None and store.job(a).state == "cancelled"
    with pytest.raises(InputError, match="only a queued, running or waiting job can be cancelled"):
        store.cancel(a)
    store.retry(a, committed=lambda chunk: True)
    assert store.job(a).state == "queued" and store.job(a).chunks_done == 1
    assert store.claim(me, 30).index == 1
    with pytest.raises(InputError, match="only a failed or cancelled job"):
        store.retry(a)
    with pytest.raises(InputError, match="no job 99"):
        store.cancel(99)


def test_retry_queues_a_done_chunk_whose_file_is_gone(store):
    (a,) = store.add_jobs([job("a", 2)])
    me = owner_id()
    for _ in range(2):
        store.commit_chunk(me, store.claim(me, 30), report(4, 1.0), computed=True)
    store.cancel(a)
    store.retry(a, committed=lambda chunk: chunk["index"] == 0)
    assert [c["state"] for c in store.chunks(a)] == ["done", "queued"]


def test_an_output_of_an_unfinished_job_is_not_queued_twice(store):
    store.add_jobs([job("a", 1)])
    with pytest.raises(StoreError, match="already the output of job 1"):
        store.add_jobs([job("b", 1), job("a", 1)])
    assert [r.input for r in store.jobs()] == ["/in/a.mp4"]  # nothing of the refused batch was added


def _claim_all(path: str, n: int, out) -> None:
    with JobStore(path) as s:
        me = owner_id()
        got = []
        while (c := s.claim(me, 30)) is not None:
            got.append((c.job, c.index))
        out.put(got)


def test_processes_claiming_at_once_never_share_a_chunk(tmp_path):
    path = tmp_path / "queue.db"
    with JobStore(path, create=True) as s:
        s.add_jobs([job(f"v{i}", 10) for i in range(4)])
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_claim_all, args=(str(path), 40, out)) for _ in range(3)]
    for p in procs:
        p.start()
    claims = [c for _ in procs for c in out.get(timeout=60)]
    for p in procs:
        p.join()
    assert len(claims) == 40 and len(set(claims)) == 40


def test_a_missing_store_is_one_line(tmp_path):
    with pytest.raises(StoreError, match="no job store at .*vsr jobs add creates it"):
        JobStore(tmp_path / "nope.db")
    for odd, kind in ((tmp_path, "a folder"), (Path("/dev/null"), "a character device")):
        for create in (False, True):  # (`vsr jobs add --store /dev/null` said "no job store: add creates it")
            with pytest.raises(StoreError, match=f"^{odd} is {kind}: a job store is a file"):
                JobStore(odd, create=create)


def test_a_store_whose_creation_a_full_disk_stopped_leaves_no_file(tmp_path):
    """``vsr jobs add`` on a full disk left an empty file at the store's name, which every later command (add
    too, once there was room) refused as "an SQLite file but not a vsr job store".  The full disk: a file size
    limit of 0 (RLIMIT_FSIZE; each write fails with EFBIG), in a process of its own."""
    store = tmp_path / "jobs.db"
    script = ("import resource, signal, sys\n"
              "from vsr.jobs.store import JobStore, StoreError\n"
              "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # (else the limit kills the process)\n"
              "resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.RLIM_INFINITY))\n"
              "try:\n"
              "    JobStore(sys.argv[1], create=True)\n"
              "except StoreError as e:\n"
              "    sys.exit(f'StoreError: {e}')\n")
    done = subprocess.run([sys.executable, "-c", script, str(store)], capture_output=True, text=True)
    assert done.returncode == 1 and done.stderr.startswith(f"StoreError: job store {store}: "), done.stderr
    assert sorted(tmp_path.iterdir()) == []
    JobStore(store, create=True).close()  # (with room: made)


def test_a_file_that_is_not_a_database(tmp_path):
    bad = tmp_path / "queue.db"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="not a job store, or it is corrupt") as e:
        JobStore(bad)
    assert "\n" not in str(e.value)


def test_a_foreign_database_or_a_newer_schema_is_refused(tmp_path):
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE t (x)")
    with pytest.raises(StoreError, match="not a vsr job store"):
        JobStore(other, create=True)
    newer = tmp_path / "newer.db"
    JobStore(newer, create=True).close()
    with sqlite3.connect(newer) as db:
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(StoreError, match=f"schema version {SCHEMA_VERSION + 1}"):
        JobStore(newer)


def test_a_locked_store_is_one_line_after_the_busy_timeout(tmp_path):
    path = tmp_path / "queue.db"
    JobStore(path, create=True).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("PRAGMA locking_mode = EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        t0 = time.monotonic()
        with pytest.raises(StoreError, match=r"locked by another process \(waited 0.2 s\)"):
            with JobStore(path, busy_timeout_s=0.2) as s:
                s.add_jobs([job("a", 1)])
        assert time.monotonic() - t0 < 5
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    with JobStore(path) as s:
        assert s.jobs() == [] and s.integrity_check() == "ok"


def test_retry_cannot_take_an_output_another_unfinished_job_owns(store):
    """Issue 23: cancel job 1, add job 2 to the same output, retry job 1: both ran and job 1's output was
    silently replaced.  The store's unique index refuses the retry, whatever the command line said."""
    (a,) = store.add_jobs([job("a", 1)])
    store.cancel(a)
    (b,) = store.add_jobs([job("a", 1)])
    with pytest.raises(StoreError, match=f"job {a} cannot be retried: its output /out/a.mp4 is now the output of "
                                         f"job {b} \\(queued\\): one unfinished job per output"):
        store.retry(a)
    assert [r.state for r in store.jobs()] == ["cancelled", "queued"]
    store.cancel(b)
    store.retry(a)  # the output is free again
    assert [r.state for r in store.jobs()] == ["queued", "cancelled"]


def test_the_store_itself_keeps_one_unfinished_job_per_output(store):
    """Not a check in each command: a plain INSERT of a second unfinished job is refused by SQLite."""
    store.add_jobs([job("a", 1)])
    db = sqlite3.connect(store.path)
    with pytest.raises(sqlite3.IntegrityError, match="UNIQUE"):
        db.execute("INSERT INTO jobs (spec, input, output, state, created, updated) VALUES ('{}', '/in/x.mp4', "
                   "'/out/a.mp4', 'waiting', 0, 0)")
    db.execute("INSERT INTO jobs (spec, input, output, state, created, updated) VALUES ('{}', '/in/x.mp4', "
               "'/out/a.mp4', 'done', 0, 0)")  # finished jobs of one output: as many as ever ran
    db.commit()
    db.close()


def test_a_version_1_store_is_migrated_and_keeps_one_owner_per_output(tmp_path):
    """A store written by the vsr before schema 2 (whose retry could make two unfinished jobs of one output):
    opened, it becomes version 2; its chunks stay; of two unfinished jobs of one output the later one fails."""
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE jobs (id INTEGER PRIMARY KEY AUTOINCREMENT, spec TEXT NOT NULL, input TEXT NOT NULL,
            output TEXT NOT NULL, state TEXT NOT NULL CHECK (state IN ('queued', 'running', 'done', 'failed',
            'cancelled')), error TEXT, join_owner TEXT, join_expiry REAL, created REAL NOT NULL,
            updated REAL NOT NULL);
        CREATE TABLE chunks (job INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE, idx INTEGER NOT NULL,
            start INTEGER NOT NULL, stop INTEGER NOT NULL, chunk TEXT NOT NULL, state TEXT NOT NULL CHECK (state
            IN ('queued', 'running', 'done', 'failed')), owner TEXT, expiry REAL, heartbeat REAL,
            attempts INTEGER NOT NULL DEFAULT 0, computed INTEGER NOT NULL DEFAULT 0, report TEXT,
            PRIMARY KEY (job, idx));
        CREATE INDEX chunks_state ON chunks (state);
        INSERT INTO jobs VALUES (1, '{}', '/in/a.mp4', '/out/a.mp4', 'running', NULL, NULL, NULL, 0, 0);
        INSERT INTO jobs VALUES (2, '{}', '/in/b.mp4', '/out/a.mp4', 'queued', NULL, NULL, NULL, 0, 0);
        INSERT INTO chunks (job, idx, start, stop, chunk, state) VALUES (1, 0, 0, 4, '{}', 'done');
        INSERT INTO chunks (job, idx, start, stop, chunk, state) VALUES (2, 0, 0, 4, '{}', 'queued');
        PRAGMA user_version = 1;
    """)
    db.close()
    with JobStore(path) as s:
        assert [(r.id, r.state, r.chunks_done, r.chunks_total) for r in s.jobs()] == \
            [(1, "interrupted", 1, 1), (2, "failed", 0, 1)]
        assert s.job(2).error == "job 1 writes the same output; retry this one once it has ended"
        assert s.integrity_check() == "ok"
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 2


def test_a_full_disk_makes_a_job_wait_then_it_goes_on(store):
    (a,) = store.add_jobs([job("a", 2)])
    me = owner_id()
    claim = store.claim(me, 30)
    store.wait(me, claim, "no space left on the output's disk", 0.3)
    row = store.job(a)
    assert (row.state, row.error) == ("waiting", "no space left on the output's disk") and store.pending()
    assert store.chunks(a)[0]["attempts"] == 0  # not counted against --max-attempts
    assert store.claim(me, 30) is None  # not before its wait is over
    time.sleep(0.35)
    again = store.claim(me, 30)
    assert (again.job, again.index) == (a, 0) and store.job(a).state == "running" and store.job(a).error is None
    store.cancel(a)  # a waiting job can be cancelled too
    assert store.job(a).state == "cancelled"


def test_a_running_job_whose_workers_are_gone_shows_as_interrupted(store):
    (a,) = store.add_jobs([job("a", 2, frames=10)])
    dead = subprocess.Popen(["true"])
    dead.wait()
    gone = f"{socket.gethostname()}:{dead.pid}:t"
    store.claim(gone, 3600)
    assert store.job(a).state == "interrupted" and store.job(a).to_dict()["state"] == "interrupted"
    me = owner_id()
    claim = store.claim(me, 30)  # the lost chunk, taken up again
    assert store.job(a).state == "running"
    assert store.heartbeat(me, claim, 30, progress=(4, 2.0))
    row = store.job(a)
    assert (row.frames_running, row.chunks_running, row.fps) == (4, 1, 2.0)
    assert row.progress == pytest.approx(0.2) and row.eta_s == pytest.approx(8.0)  # 16 frames left at 2 fps
    store.release(me)
    assert store.job(a).state == "interrupted" and store.job(a).frames_running == 0


def test_a_chunk_report_that_is_not_json_is_read_as_none(store):
    (a,) = store.add_jobs([job("a", 1)])
    me = owner_id()
    store.commit_chunk(me, store.claim(me, 30), report(4, 1.0), computed=True)
    with sqlite3.connect(store.path) as db:
        db.execute("UPDATE chunks SET report = ? WHERE job = ?", ("{not json" + "[" * 100000, a))
    row = store.job(a)
    assert row.chunks_done == 1 and row.fps is None
    assert store.chunks(a)[0]["report"] is None and store.chunks(a)[0]["report_error"].startswith("not JSON")


def test_retry_leaves_a_chunk_in_progress_with_its_worker(store):
    """A cancelled job's chunk in progress finishes; retried meanwhile, the chunk stays its worker's -- queued
    again, a second worker computed it beside the first (seen: computed = 2)."""
    (a,) = store.add_jobs([job("a", 2)])
    first, second = owner_id(), owner_id()  # this process: alive
    running = store.claim(first, 30)
    store.cancel(a)
    store.retry(a, committed=lambda chunk: True)
    assert [c["state"] for c in store.chunks(a)] == ["running", "queued"]
    assert store.claim(second, 30).index == 1 and store.claim(second, 30) is None
    assert store.heartbeat(first, running, 30)  # its lease is still its own
    store.commit_chunk(first, running, report(4, 1.0), computed=True)
    assert [c["computed"] for c in store.chunks(a)] == [1, 0]


def test_retry_queues_a_chunk_whose_worker_is_gone(store):
    (a,) = store.add_jobs([job("a", 1)])
    store.claim("elsewhere:1:x", 0.01)
    store.cancel(a)
    time.sleep(0.02)
    store.retry(a)
    assert store.claim(owner_id(), 30).index == 0


def test_a_job_being_joined_cannot_be_cancelled(store):
    """Cancelled mid-join, the join went on and wrote the output of a job then shown as cancelled, whose retry
    computed every chunk again."""
    (a,) = store.add_jobs([job("a", 1)])
    me = owner_id()
    store.commit_chunk(me, store.claim(me, 30), report(4, 1.0), computed=True)
    join = store.claim(me, 30)
    assert join.is_join
    with pytest.raises(InputError, match="is being joined into /out/a.mp4 .every chunk is done.: it can no longer"):
        store.cancel(a)
    store.finish_job(me, join)
    assert store.job(a).state == "done"


def test_a_join_that_outlived_its_lease_finishes_a_cancelled_job(store):
    """A worker stopped past its join lease (SIGSTOP, a suspended laptop) and the job cancelled meanwhile: the
    join that goes on writes the output, and the job is done (its output is there, complete)."""
    (a,) = store.add_jobs([job("a", 1)])
    far = "elsewhere:1:x"
    store.commit_chunk(far, store.claim(far, 30), report(4, 1.0), computed=True)
    join = store.claim(far, 0.01)
    time.sleep(0.02)
    store.cancel(a)  # the lease ran out: allowed
    assert store.job(a).state == "cancelled"
    store.finish_job(far, join)
    assert store.job(a).state == "done" and store.job(a).error is None


def test_a_chunks_done_line_counts_the_chunks_other_workers_committed_meanwhile(store):
    """`job 1 chunk 1 ... done; 4/8 frames of job 1` was said with both chunks done (the job as it was at the
    chunk's claim)."""
    from vsr.jobs.worker import Outlook, Progress

    (a,) = store.add_jobs([job("a", 2)])
    me, other = owner_id(), owner_id()
    mine, theirs = store.claim(me, 30), store.claim(other, 30)
    progress = Progress()
    outlook = Outlook(a, *store.outlook(a), progress)
    store.commit_chunk(other, theirs, report(4, 1.0), computed=True)
    progress.start()
    progress.add(4)
    store.commit_chunk(me, mine, report(4, 1.0), computed=True)
    assert outlook.text(4).startswith("4/8 frames of job 1")
    outlook.update(*store.outlook(a), 4)
    assert outlook.text(4).startswith("8/8 frames of job 1") and outlook.text(4).endswith("; no other job left")


def test_a_store_is_not_created_through_a_broken_link(tmp_path):
    """SQLite followed a dangling `--store` link and made the store wherever it pointed."""
    link = tmp_path / "q.db"
    link.symlink_to(tmp_path / "elsewhere" / "planted.db")
    (tmp_path / "elsewhere").mkdir()
    with pytest.raises(StoreError, match="is a broken symbolic link .to .*planted.db.: vsr does not create"):
        JobStore(link, create=True)
    assert list((tmp_path / "elsewhere").iterdir()) == []
