"""Celery jobs through what an operator does to a fleet: a Redis without persistence restarted under queued and
running jobs, a worker stopped with a double Ctrl-C mid-chunk, the broker's URL (and password) given in the
environment rather than on a command line.  Real redis-server processes on free 127.0.0.1 ports, real workers
(``vsr jobs run``), EDVR-tiny on tiny clips."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import av
import pytest

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None,
                                reason="redis-server is not installed (Debian's redis-server; .ci/run installs it)")

redis = pytest.importorskip("redis")  # the `jobs` extra, installed by scripts/setup.sh

from vsr.cli import main  # noqa: E402
from vsr.jobs import ledger  # noqa: E402
from vsr.jobs.distributed import forgets, status  # noqa: E402
from vsr.jobs.records import broker_key  # noqa: E402

from tests.jobs.helpers import added_ids  # noqa: E402
from tests.jobs.test_cli_jobs import TINY  # noqa: E402
from tests.jobs.test_distributed import WAIT_S, Workers, free_port, start_redis  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def redis_with(folder: Path, *args: str) -> tuple[subprocess.Popen, int]:
    """A redis-server on a free port with ``args`` (persistence, a password...), answering PING."""
    port = free_port()
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(folder), *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while True:
        try:
            redis.Redis(port=port, password=_password(args)).ping()
            return proc, port
        except redis.ConnectionError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                pytest.fail("redis-server did not start")
            time.sleep(0.05)


def _password(args) -> str | None:
    return args[args.index("--requirepass") + 1] if "--requirepass" in args else None


def stopped(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait()


def frames(path: Path) -> int:
    with av.open(str(path)) as c:
        return sum(1 for _ in c.decode(video=0))


def wait_for(what, timeout: float = WAIT_S, log=lambda: ""):
    deadline = time.monotonic() + timeout
    while not (found := what()):
        assert time.monotonic() < deadline, log()
        time.sleep(0.05)
    return found


@pytest.mark.parametrize("args, said", [
    (["--save", "", "--appendonly", "no"], "keeps nothing on disk (appendonly no, no save): a restart forgets every"),
    (["--save", "3600 1", "--appendonly", "no"], "keeps only snapshots (save 3600 1), no append-only file"),
    (["--save", "", "--appendonly", "no", "--rename-command", "CONFIG", ""],
     "does not say whether it keeps its data on disk (CONFIG GET: unknown command"),
    (["--save", "", "--appendonly", "yes"], None),
])
def test_what_a_restart_of_the_brokers_redis_would_forget_is_said(tmp_path, args, said):
    proc, port = redis_with(tmp_path, *args)
    try:
        line = forgets(f"redis://127.0.0.1:{port}/0")
    finally:
        stopped(proc)
    assert line == said if said is None else (said in line and "\n" not in line), line


@pytest.mark.slow
def test_a_redis_that_keeps_nothing_restarted_under_a_running_job_loses_no_job(make_clip, tmp_path, capsys):
    """``add`` warns that the broker keeps nothing; Redis restarts empty after the job's first chunk was committed:
    the job vanished from ``list`` without a word and its chunks stayed in ``.vsr-chunks/``.  Now ``list`` on the
    adding machine shows it ``lost`` with its committed chunks, ``retry`` sends it again, and it finishes without
    computing its committed chunk again."""
    clip = make_clip("l.mp4", width=64, height=48, frames=12)
    folder = tmp_path / "redis"
    folder.mkdir()
    port = free_port()
    server = start_redis(port, folder)  # --save '' --appendonly no
    url = f"redis://127.0.0.1:{port}/0"
    out, w = tmp_path / "out", None
    try:
        assert main(["jobs", "add", str(clip), "--out-dir", str(out), "--chunk-frames", "3", "--broker", url,
                     *TINY]) == 0
        said = capsys.readouterr()
        [job_id] = added_ids(said.out)
        assert [line for line in said.err.splitlines() if "keeps nothing on disk" in line], said.err
        w = Workers(url, 1, tmp_path)
        w.wait_ready()
        db = redis.Redis.from_url(url, decode_responses=True)
        first = wait_for(lambda: db.hget(f"vsr:job:{job_id}:done", "0"), log=w.log_text)
        with contextlib.suppress(redis.ConnectionError):  # (the client's retry finds it gone)
            db.shutdown(nosave=True)
        server.wait(30)
        server = start_redis(port, folder)  # empty
        wait_for(lambda: not db.hgetall(f"vsr:job:{job_id}:running"), log=w.log_text)  # the chunk in flight ended
        assert main(["jobs", "list", "--broker", url, "--json"]) == 0
        [row] = json.loads(capsys.readouterr().out)
        assert (row["id"], row["state"], row["chunks_total"]) == (job_id, "lost", 4), row
        assert row["chunks_done"] >= 1 and "retry" in row["error"]
        assert main(["jobs", "retry", job_id, "--broker", url]) == 0
        assert f"job {job_id} queued again: 4 chunks sent" in capsys.readouterr().out
        wait_for(lambda: [r["state"] for r in status(url)] in (["done"], ["failed"]), log=w.log_text)
        [row] = status(url)
        assert row["state"] == "done", row["error"]
        assert "keeps nothing on disk (appendonly no, no save)" in w.log_text()  # a worker says it at its start
        # the chunk committed before the restart was found on disk, not computed again (the same report)
        assert json.loads(db.hget(f"vsr:job:{job_id}:done", "0"))["report"] == json.loads(first)["report"]
    finally:
        if w is not None:
            w.stop()
        stopped(server)
    assert frames(out / "l.mp4") == 12
    assert sorted(p.name for p in out.iterdir()) == ["l.mp4"]
    assert ledger.entries(url) == []  # seen done: this machine's record of it went


def test_a_lost_job_is_cancelled_here_and_a_job_the_broker_knows_is_not_lost(make_clip, tmp_path, capsys):
    """A job queued, then forgotten by a restart before any worker took it: ``lost``; a cancel forgets it on this
    machine too.  A job the broker knows never shows as lost."""
    clip = make_clip("q.mp4", frames=4)
    proc, port = redis_with(tmp_path, "--save", "", "--appendonly", "no")
    url = f"redis://127.0.0.1:{port}/0"
    try:
        for name in ("a", "b"):
            assert main(["jobs", "add", str(clip), "--out-dir", str(tmp_path / name), "--broker", url, *TINY]) == 0
        first, second = added_ids(capsys.readouterr().out)
        assert [r["state"] for r in status(url)] == ["queued", "queued"]
        redis.Redis(port=port).delete(f"vsr:job:{first}")  # as a restart without persistence leaves it
        assert [(r["id"], r["state"]) for r in status(url)] == [(second, "queued"), (first, "lost")]
        assert main(["jobs", "cancel", first, "--broker", url]) == 0
        assert "the broker had forgotten it" in capsys.readouterr().out
        assert [r["id"] for r in status(url)] == [second]
        assert main(["jobs", "retry", first, "--broker", url]) == 2  # gone for good
    finally:
        stopped(proc)


def test_a_lost_job_is_found_however_the_broker_is_spelled(make_clip, tmp_path, capsys):
    """The record of a job sent to ``redis://127.0.0.1:PORT/0`` matched only that spelling: ``list`` by
    ``redis://localhost:PORT`` said "no jobs" and ``retry`` "no job", the job lost for good from there."""
    proc, port = redis_with(tmp_path, "--save", "", "--appendonly", "no")
    url = f"redis://127.0.0.1:{port}/0"
    try:
        assert main(["jobs", "add", str(make_clip("s.mp4", frames=4)), "--out-dir", str(tmp_path / "o"),
                     "--broker", url, *TINY]) == 0
        [job_id] = added_ids(capsys.readouterr().out)
        redis.Redis(port=port).delete(f"vsr:job:{job_id}")  # as a restart without persistence leaves it
        for spelling in (f"redis://localhost:{port}", f"REDIS://LocalHost:{port}/0",
                         f"redis://:pw@127.0.0.1:{port}"):
            assert [(r["id"], r["state"]) for r in status(spelling)] == [(job_id, "lost")], spelling
        assert main(["jobs", "list", "--broker", f"redis://127.0.0.1:{port}/1"]) == 0  # another database
        assert "no jobs" in capsys.readouterr().out
        assert main(["jobs", "retry", job_id, "--broker", f"redis://localhost:{port}"]) == 0
        assert f"job {job_id} queued again" in capsys.readouterr().out
    finally:
        stopped(proc)


@pytest.mark.parametrize("a, b", [("redis://localhost", "redis://127.0.0.1:6379/0"),
                                  ("redis://LOCALHOST:6379", "redis://[::1]:6379/?db=0"),
                                  ("Redis://Host.Example:6380/2", "redis://user:pw@host.example:6380?db=2"),
                                  ("unix:///run/redis/../redis/redis.sock", "unix:///run/redis/redis.sock?db=0")])
def test_one_broker_spelled_two_ways_has_one_key(a, b):
    assert broker_key(a) == broker_key(b)


@pytest.mark.parametrize("a, b", [("redis://localhost", "redis://localhost:6380"),
                                  ("redis://localhost", "redis://localhost/1"),
                                  ("redis://localhost", "rediss://localhost"), ("redis://host-a", "redis://host-b"),
                                  ("redis://localhost/1?db=2", "redis://localhost/1")])  # (redis-py: ?db= wins)
def test_two_brokers_have_two_keys(a, b):
    assert broker_key(a) != broker_key(b)


def test_a_database_given_as_db_parameter_is_refused_in_one_line(capsys):
    """Celery's Redis transport reads the database from the URL's path alone and redis-py lets ``?db=`` win:
    ``redis://h/?db=2`` sent the chunks to database 0 and kept the records in 2."""
    assert main(["jobs", "list", "--broker", "redis://:pw@127.0.0.1:1/?db=2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("vsr: error: give the broker's database in its path (redis://HOST:PORT/N), not as ?db=")
    assert len(err.splitlines()) == 1 and "pw" not in err


def test_a_broker_key_holds_no_password():
    for url in ("redis://:s3cret@localhost/0", "redis://u:s3cret@h:1/0?password=s3cret", "redis://:s3cret@h:x/0"):
        assert "s3cret" not in broker_key(url)


@pytest.mark.slow
def test_a_double_ctrl_c_mid_chunk_does_not_count_as_a_lost_worker(make_clip, tmp_path, capsys, monkeypatch):
    """``vsr jobs run`` with the broker (a password in its URL) in ``$VSR_BROKER``: no command line shows it.  A
    double Ctrl-C mid-chunk (a cold shutdown) counted as one of the chunk's 3 deliveries; three such stops failed
    the job as "worker lost".  Now the stop is not counted, ``list`` shows the job ``interrupted`` without an ETA
    until a worker takes it up, and the chunk is delivered once more to the next worker."""
    clip = make_clip("s.mp4", width=96, height=72, frames=8)
    proc, port = redis_with(tmp_path, "--save", "", "--appendonly", "yes", "--requirepass", "s3cret")
    url = f"redis://:s3cret@127.0.0.1:{port}/0"
    monkeypatch.setenv("VSR_BROKER", url)
    db = redis.Redis.from_url(url, decode_responses=True)
    logs, procs = [], []

    def worker() -> subprocess.Popen:
        logs.append(tmp_path / f"worker{len(logs)}.log")
        procs.append(subprocess.Popen([sys.executable, "-m", "vsr", "jobs", "run"], cwd=REPO,
                                      stdout=logs[-1].open("w"), stderr=subprocess.STDOUT,
                                      preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)))  # a terminal's
        return procs[-1]

    def log() -> str:
        return "\n".join(p.read_text() for p in logs)

    try:
        assert main(["jobs", "add", str(clip), "--out-dir", str(tmp_path / "out"), "--chunk-frames", "4", *TINY]) == 0
        said = capsys.readouterr().out
        [job_id] = added_ids(said)
        assert "($VSR_BROKER set)" in said and "s3cret" not in said
        first = worker()
        index, where = wait_for(lambda: next(iter(db.hgetall(f"vsr:job:{job_id}:running").items()), None), log=log)
        child = where.rpartition(" pid ")[2]
        for pid in (first.pid, child):
            assert b"s3cret" not in Path(f"/proc/{pid}/cmdline").read_bytes()
        first.send_signal(signal.SIGINT)
        time.sleep(0.5)
        first.send_signal(signal.SIGINT)  # again: running chunks are terminated
        first.wait(120)
        assert db.hget(f"vsr:job:{job_id}:done", index) is None, "the chunk ended before the stop: a test of nothing"
        assert db.hget(f"vsr:job:{job_id}:attempts", index) == "0", log()
        [row] = status(url)
        assert (row["state"], row["eta_s"], row["running"]) == ("interrupted", None, {}), row
        second = worker()
        wait_for(lambda: status(url)[0]["state"] in ("done", "failed"), log=log)
        second.send_signal(signal.SIGINT)
        second.wait(120)
        [row] = status(url)
        assert row["state"] == "done", row["error"]
        assert db.hget(f"vsr:job:{job_id}:attempts", index) == "1"  # the second worker's delivery alone
        assert f"vsr-{second.pid}@" in json.loads(db.hget(f"vsr:job:{job_id}:done", index))["worker"]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        stopped(proc)
    assert frames(tmp_path / "out" / "s.mp4") == 8


def test_the_broker_is_read_from_vsr_broker_unless_a_store_is_given(make_clip, tmp_path, capsys, monkeypatch):
    clip = make_clip("e.mp4", frames=3)
    proc, port = redis_with(tmp_path, "--save", "", "--appendonly", "yes", "--requirepass", "pw")
    url = f"redis://:pw@127.0.0.1:{port}/0"
    monkeypatch.setenv("VSR_BROKER", url)
    try:
        assert main(["jobs", "add", str(clip), "--out-dir", str(tmp_path / "b"), *TINY]) == 0
        [on_broker] = added_ids(capsys.readouterr().out)
        assert main(["jobs", "list", "--json"]) == 0
        assert [r["id"] for r in json.loads(capsys.readouterr().out)] == [on_broker]
        store = tmp_path / "q.db"
        assert main(["jobs", "add", str(clip), "--out-dir", str(tmp_path / "s"), "--store", str(store), *TINY]) == 0
        assert "in the job store" in capsys.readouterr().out
        assert main(["jobs", "list", "--store", str(store), "--json"]) == 0
        assert [r["id"] for r in json.loads(capsys.readouterr().out)] == [1]
        assert main(["jobs", "cancel", on_broker]) == 0
        assert [r["state"] for r in status(url)] == ["cancelled"]
        monkeypatch.setenv("VSR_BROKER", " ")  # empty: the local store (none here)
        assert main(["jobs", "list", "--json"]) == 2
        assert "no job store at" in capsys.readouterr().err
    finally:
        stopped(proc)


def test_a_running_job_no_chunk_of_which_runs_shows_interrupted_without_an_eta(make_clip, tmp_path):
    """Its workers were stopped and its chunks went back to the queue: it showed ``running``, with an ETA."""
    from tests.jobs.test_distributed import job

    proc, port = redis_with(tmp_path, "--save", "", "--appendonly", "yes")
    url = f"redis://127.0.0.1:{port}/0"
    try:
        from vsr.jobs.distributed import submit

        [job_id] = submit([job(make_clip("i.mp4", frames=4), tmp_path / "i.mp4")], url, chunk_frames=2)
        db = redis.Redis(port=port, decode_responses=True)
        now = time.time()
        db.hset(f"vsr:job:{job_id}", mapping={"state": "running", "started": now - 10})
        db.hset(f"vsr:job:{job_id}:done", "0", json.dumps({"worker": "w@gone", "finished": now, "frames": 2}))
        [row] = status(url)
        assert (row["state"], row["eta_s"], row["chunks_done"]) == ("interrupted", None, 1)
        db.hset(f"vsr:job:{job_id}:running", "1", "w@here pid 1")
        [row] = status(url)
        assert row["state"] == "running" and row["eta_s"] == pytest.approx(10, rel=0.01)
    finally:
        stopped(proc)


def test_a_celery_broker_url_naming_another_broker_is_refused_before_anything_is_queued(make_clip, tmp_path,
                                                                                      capsys, monkeypatch):
    """Celery prefers ``$CELERY_BROKER_URL`` to the broker vsr gives it: the job's record went to ``--broker``,
    its chunks to the other Redis, and the job stayed queued for ever."""
    proc, port = redis_with(tmp_path, "--save", "", "--appendonly", "yes")
    url = f"redis://127.0.0.1:{port}/0"
    try:
        monkeypatch.setenv("CELERY_BROKER_URL", f"redis://:hidden@127.0.0.1:{free_port()}/0")
        assert main(["jobs", "add", str(make_clip("c.mp4", frames=3)), "--out-dir", str(tmp_path / "o"),
                     "--broker", url, *TINY]) == 2
        err = capsys.readouterr().err
        assert "CELERY_BROKER_URL names another broker" in err and "hidden" not in err and len(err.splitlines()) == 1
        monkeypatch.setenv("CELERY_BROKER_URL", f"redis://localhost:{port}")  # the same database, spelled otherwise
        assert main(["jobs", "list", "--broker", url]) == 0, capsys.readouterr().err
        assert redis.Redis(port=port).keys("*") == []
        monkeypatch.setenv("CELERY_BROKER_URL", url)  # the same broker: fine
        assert main(["jobs", "list", "--broker", url]) == 0
    finally:
        stopped(proc)
