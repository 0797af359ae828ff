"""Jobs through Celery on a real Redis server (127.0.0.1, a free port) with real worker processes.

Two workers share two jobs: each output decodes to exactly the frames and timestamps of one
``vsr.pipeline.upscale`` pass with the same options, and both workers computed chunks.  A worker process killed
with SIGKILL mid-chunk hands its chunk back and the job still finishes, frame-exact.  A broker that is not
running, or a URL that is not Redis, is one line (``BrokerError``) within seconds.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

import av
import pytest

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None,
                                reason="redis-server is not installed (Debian's redis-server; .ci/run installs it)")

redis = pytest.importorskip("redis")  # the `jobs` extra, installed by scripts/setup.sh

import torch  # noqa: E402

from vsr.backends import BackendRequest, CudaOptions, TorchOptions  # noqa: E402
from vsr.errors import BrokerError  # noqa: E402
from vsr.jobs import JobSpec  # noqa: E402
from vsr.jobs.distributed import cancel, make_app, retry, run_worker, status, submit  # noqa: E402
from vsr.pipeline.runner import RunnerSettings  # noqa: E402
from vsr.pipeline.upscale import upscale  # noqa: E402
from vsr.video import EncoderSettings  # noqa: E402

from tests.conftest import Audio  # noqa: E402

ENCODER = EncoderSettings(codec="ffv1")
REQUEST = BackendRequest("random", "edvr-tiny", TorchOptions(threads=1))  # what the tiny_backend fixture opens
WAIT_S = 300  # a loaded 2-core machine starts a worker (torch import) in tens of seconds


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis(port: int, folder: Path, appendonly: str = "no") -> subprocess.Popen:
    """A redis-server on 127.0.0.1:``port`` answering PING; no snapshots, an append-only file if asked."""
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", appendonly, "--appendfsync", "always", "--dir", str(folder)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis.from_url(f"redis://127.0.0.1:{port}/0")
    deadline = time.monotonic() + 20
    while True:
        try:
            client.ping()
            return proc
        except redis.ConnectionError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                pytest.fail("redis-server did not start")
            time.sleep(0.05)


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory):
    """A throw-away redis-server: no snapshots, no append-only file, killed at the end."""
    port = free_port()
    proc = start_redis(port, tmp_path_factory.mktemp("redis"))
    url = f"redis://127.0.0.1:{port}/0"
    yield url
    proc.kill()
    proc.wait()


@pytest.fixture
def broker(redis_server):
    redis.Redis.from_url(redis_server).flushall()
    return redis_server


class Workers:
    """``n`` workers as subprocesses (``run_worker`` in each), logs in ``folder``; stopped with SIGTERM."""

    def __init__(self, broker: str, n: int, folder: Path, env: dict | None = None):
        self.broker, self.logs = broker, [folder / f"worker{i}.log" for i in range(n)]
        code = "import sys; from vsr.jobs.distributed import run_worker; run_worker(sys.argv[1], 1)"
        # a session each: a whole worker (main process and pool child) can be killed as a process group
        self.procs = [subprocess.Popen([sys.executable, "-c", code, broker], stdout=log.open("w"),
                                       stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
                                       start_new_session=True) for log in self.logs]

    def wait_ready(self) -> None:
        app = make_app(self.broker)
        deadline = time.monotonic() + WAIT_S
        try:
            while len(app.control.ping(timeout=1.0)) < len(self.procs):
                assert all(p.poll() is None for p in self.procs), self.log_text()
                assert time.monotonic() < deadline, "the workers did not start"
        finally:
            app.close()

    def log_text(self) -> str:
        return "\n".join(log.read_text() for log in self.logs)

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


@pytest.fixture
def workers(broker, tmp_path):
    started = []

    def start(n: int, env: dict | None = None) -> Workers:
        started.append(Workers(broker, n, tmp_path, env))
        started[-1].wait_ready()
        return started[-1]

    yield start
    for w in started:
        w.stop()


def wait_finished(broker: str, ids: list[str], w: Workers) -> dict[str, dict]:
    deadline = time.monotonic() + WAIT_S
    while True:
        rows = {r["id"]: r for r in status(broker) if r["id"] in ids}
        if all(r["state"] in ("done", "failed") for r in rows.values()):
            return rows
        assert time.monotonic() < deadline, f"jobs not finished: {rows}\n{w.log_text()}"
        time.sleep(0.2)


def running_chunk(db, job_id: str, w: Workers) -> tuple[str, str]:
    """The first chunk of ``job_id`` a worker is seen running: (chunk index, "<worker> pid <pid>")."""
    deadline = time.monotonic() + WAIT_S
    while not (running := db.hgetall(f"vsr:job:{job_id}:running")):
        assert time.monotonic() < deadline, w.log_text()
        time.sleep(0.01)
    return next(iter(running.items()))


def decoded(path: Path) -> dict:
    """Each stream of ``path``: video frames as (pts, duration, plane digest), other packets as (pts, dts, bytes)."""
    out = {}
    with av.open(str(path)) as c:
        for pkt in c.demux():
            items = out.setdefault(pkt.stream.index, [pkt.stream.type, pkt.stream.time_base])
            if pkt.stream.type == "video":
                items += [(f.pts, f.duration, hashlib.sha256(f.to_ndarray().tobytes()).hexdigest())
                          for f in pkt.decode()]
            elif pkt.size:
                items.append((pkt.pts, pkt.dts, hashlib.sha256(bytes(pkt)).hexdigest()))
    return out


def single_pass(src: Path, dst: Path, backend) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        upscale(src, dst, backend=backend, encoder=ENCODER)
    return dst


def job(src: Path, out: Path) -> JobSpec:
    return JobSpec.from_settings(src, out, REQUEST, ENCODER, RunnerSettings())


@pytest.mark.slow
def test_two_workers_share_the_jobs_and_match_a_single_pass(broker, workers, make_clip, tmp_path, tiny_backend):
    """Two jobs finish frame-exact on two workers; a third, whose output path holds a file vsr did not write,
    fails with that message while they finish, and finishes after the file is moved away and it is retried."""
    clips = [make_clip("a.mp4", width=32, height=24, frames=14),
             make_clip("b.mkv", width=24, height=16, frames=11, audio=[Audio()]),
             make_clip("c.mp4", frames=4)]
    refs = [single_pass(c, tmp_path / f"ref-{c.name}", tiny_backend) for c in clips]
    out = tmp_path / "out"
    out.mkdir()
    (out / "c.mp4").write_text("not vsr's")
    w = workers(2)
    ids = submit([job(c, out / c.name) for c in clips], broker, chunk_frames=3)
    assert len(set(ids)) == 3
    rows = wait_finished(broker, ids, w)
    for job_id, clip, ref in zip(ids[:2], clips, refs):
        row = rows[job_id]
        assert row["state"] == "done", row["error"]
        assert row["chunks_done"] == row["chunks_total"] > 3
        assert decoded(out / clip.name) == decoded(ref)
    assert len({name for r in rows.values() for name in r["workers"]}) == 2, "one worker did every chunk"
    assert rows[ids[2]]["state"] == "failed" and "output exists" in rows[ids[2]]["error"]
    assert (out / "c.mp4").read_text() == "not vsr's"
    (out / "c.mp4").unlink()
    retry(broker, ids[2])
    row = wait_finished(broker, ids[2:], w)[ids[2]]
    assert row["state"] == "done" and row["error"] is None
    assert decoded(out / "c.mp4") == decoded(refs[2])
    assert sorted(p.name for p in out.iterdir()) == ["a.mp4", "b.mkv", "c.mp4"]  # no chunk folder, no partial


@pytest.mark.slow
def test_a_worker_process_killed_mid_chunk_hands_the_chunk_back(broker, workers, make_clip, tmp_path,
                                                                 tiny_backend):
    clip = make_clip("c.mp4", width=64, height=48, frames=12)
    ref = single_pass(clip, tmp_path / "ref.mp4", tiny_backend)
    w = workers(1)
    [job_id] = submit([job(clip, tmp_path / "out" / "c.mp4")], broker, chunk_frames=3)
    db = redis.Redis.from_url(broker, decode_responses=True)
    index, where = running_chunk(db, job_id, w)
    os.kill(int(re.search(r"pid (\d+)", where).group(1)), signal.SIGKILL)
    row = wait_finished(broker, [job_id], w)[job_id]
    assert row["state"] == "done", row["error"]
    assert decoded(tmp_path / "out" / "c.mp4") == decoded(ref)
    assert int(db.hget(f"vsr:job:{job_id}:attempts", index)) == 2  # delivered again after the kill
    assert "WorkerLostError" in w.log_text()


@pytest.mark.slow
def test_a_whole_worker_killed_mid_chunk_hands_the_chunk_back_after_the_visibility_timeout(
        broker, workers, make_clip, tmp_path, tiny_backend):
    """``kill -9`` of a worker's process group (a lost host): the other worker runs the chunk once Redis'
    visibility timeout (short here; chunks of this clip take a few seconds) has run out."""
    clip = make_clip("f.mp4", width=64, height=48, frames=12)
    ref = single_pass(clip, tmp_path / "ref.mp4", tiny_backend)
    w = workers(2, env={"VSR_CELERY_VISIBILITY_S": "20"})
    [job_id] = submit([job(clip, tmp_path / "out" / "f.mp4")], broker, chunk_frames=3)
    db = redis.Redis.from_url(broker, decode_responses=True)
    index, where = running_chunk(db, job_id, w)
    main_pid = int(re.match(r"vsr-(\d+)@", where).group(1))
    os.killpg(main_pid, signal.SIGKILL)
    row = wait_finished(broker, [job_id], w)[job_id]
    assert row["state"] == "done", row["error"]
    assert decoded(tmp_path / "out" / "f.mp4") == decoded(ref)
    assert int(db.hget(f"vsr:job:{job_id}:attempts", index)) == 2
    assert row["workers"] and f"vsr-{main_pid}@" not in json.loads(db.hget(f"vsr:job:{job_id}:done", index))["worker"]


@pytest.mark.slow
def test_a_retry_while_a_chunk_of_the_cancelled_job_runs_leaves_that_chunk_to_its_worker(
        broker, workers, make_clip, tmp_path, tiny_backend):
    """``cancel`` lets a chunk in progress finish; a ``retry`` meanwhile sent that chunk again, and another worker
    computed it beside the first (time lost: the commit is atomic).  Now it stays its worker's, who finishes it,
    and the job ends frame-exact; a chunk redelivered by Celery would count a second attempt."""
    clip = make_clip("r.mp4", width=64, height=48, frames=12)
    ref = single_pass(clip, tmp_path / "ref.mp4", tiny_backend)
    w = workers(2)
    [job_id] = submit([job(clip, tmp_path / "out" / "r.mp4")], broker, chunk_frames=3)
    db = redis.Redis.from_url(broker, decode_responses=True)
    index, _ = running_chunk(db, job_id, w)
    cancel(broker, job_id)
    retried = time.time()
    retry(broker, job_id)
    row = wait_finished(broker, [job_id], w)[job_id]
    assert row["state"] == "done", row["error"]
    assert decoded(tmp_path / "out" / "r.mp4") == decoded(ref)
    # it was still running at the retry (else this proves nothing), and it was not handed out again
    assert json.loads(db.hget(f"vsr:job:{job_id}:done", index))["finished"] > retried
    assert db.hget(f"vsr:job:{job_id}:attempts", index) is None, w.log_text()


@pytest.mark.slow
def test_a_redis_restarted_while_a_chunk_runs_loses_no_chunk(make_clip, tmp_path, tiny_backend):
    """Redis (keeping an append-only file) stops while a chunk runs and comes back after its commit: the chunk's
    records wait for it.  Its task failed on the first record written, was acknowledged, and the job stayed
    running forever, its last chunk never computed."""
    from vsr.jobs.chunks import is_committed
    from vsr.jobs.spec import ChunkSpec

    clip = make_clip("p.mp4", width=64, height=48, frames=9)
    ref = single_pass(clip, tmp_path / "ref.mp4", tiny_backend)
    port, folder = free_port(), tmp_path / "redis"
    folder.mkdir()
    server = start_redis(port, folder, appendonly="yes")
    url = f"redis://127.0.0.1:{port}/0"
    w = Workers(url, 1, tmp_path)
    try:
        w.wait_ready()
        spec = job(clip, tmp_path / "out" / "p.mp4")
        [job_id] = submit([spec], url, chunk_frames=3)
        db = redis.Redis.from_url(url, decode_responses=True)
        index, _ = running_chunk(db, job_id, w)
        chunk = ChunkSpec.from_dict(json.loads(db.hget(f"vsr:job:{job_id}", "chunks"))[int(index)])
        db.shutdown()  # (SHUTDOWN writes the append-only file)
        server.wait(30)
        back = time.monotonic() + 10
        while not is_committed(spec, chunk) and time.monotonic() < back:  # the chunk's next record finds no Redis
            time.sleep(0.05)
        time.sleep(1)
        server = start_redis(port, folder, appendonly="yes")
        row = wait_finished(url, [job_id], w)[job_id]
        assert row["state"] == "done", row["error"]
        assert decoded(tmp_path / "out" / "p.mp4") == decoded(ref)
    finally:
        w.stop()
        server.kill()
        server.wait()


def test_cancel_and_retry_without_workers(broker, make_clip, tmp_path):
    """A cancelled job's queued chunks stay in the queue (workers drop them); retry sends the chunks again."""
    [job_id] = submit([job(make_clip("e.mp4", frames=5), tmp_path / "e.mp4")], broker, chunk_frames=2)
    db = redis.Redis.from_url(broker)
    assert [r["state"] for r in status(broker)] == ["queued"] and db.llen("vsr") == 3
    cancel(broker, job_id)
    assert [(r["state"], r["chunks_done"], r["chunks_total"]) for r in status(broker)] == [("cancelled", 0, 3)]
    with pytest.raises(BrokerError, match="cancelled already"):
        cancel(broker, job_id)
    retry(broker, job_id)
    assert [r["state"] for r in status(broker)] == ["queued"] and db.llen("vsr") == 6
    with pytest.raises(BrokerError, match="only a failed or cancelled job"):
        retry(broker, job_id)
    with pytest.raises(BrokerError, match="no job 'nope'"):
        cancel(broker, "nope")


def gpu_job(src: Path, out: Path) -> JobSpec:
    return JobSpec.from_settings(src, out, BackendRequest("random", "edvr-tiny", CudaOptions()), ENCODER,
                                 RunnerSettings())


def test_a_gpu_jobs_chunks_go_to_their_own_queue_and_retry_sends_them_there(broker, make_clip, tmp_path):
    """A --backend cuda job's chunks wait on ``vsr.cuda``, which only workers with a GPU consume."""
    [job_id] = submit([gpu_job(make_clip("g.mp4", frames=5), tmp_path / "g.mp4")], broker, chunk_frames=2)
    db = redis.Redis.from_url(broker)
    assert (db.llen("vsr.cuda"), db.llen("vsr")) == (3, 0)
    assert [r["needs"] for r in status(broker)] == ["a GPU (backend cuda)"]
    cancel(broker, job_id)
    retry(broker, job_id)
    assert (db.llen("vsr.cuda"), db.llen("vsr")) == (6, 0)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a worker on a machine without a GPU")
def test_a_cpu_only_worker_leaves_a_gpu_job_queued(broker, workers, make_clip, tmp_path):
    """A worker where torch sees no GPU finishes the CPU job and leaves the GPU job's chunks queued for a worker
    that has one (it used to take them and fail the job: "--backend cuda needs an NVIDIA GPU")."""
    clip = make_clip("h.mp4", frames=4)
    w = workers(1)
    gpu, cpu = submit([gpu_job(clip, tmp_path / "gpu.mp4"), job(clip, tmp_path / "cpu.mp4")], broker, chunk_frames=2)
    assert wait_finished(broker, [cpu], w)[cpu]["state"] == "done"
    time.sleep(2)  # (a worker that consumed vsr.cuda would have taken a chunk by now)
    row = {r["id"]: r for r in status(broker)}[gpu]
    assert (row["state"], row["chunks_done"], row["error"]) == ("queued", 0, None)
    assert redis.Redis.from_url(broker).llen("vsr.cuda") == 2
    assert "leaves the jobs of queue vsr.gpu (torch sees no CUDA GPU here)" in w.log_text()


def test_a_chunk_delivered_again_after_its_job_was_joined_is_dropped(broker, make_clip, tmp_path):
    """Late acknowledgement hands a chunk out again where its worker died between the commit and the ack; after
    the join its folder is gone, and the chunk was computed anew into a folder no one removed."""
    import types

    from vsr.jobs.distributed import _chunk_task

    spec = job(make_clip("d.mp4", frames=4), tmp_path / "out" / "d.mp4")
    [job_id] = submit([spec], broker, chunk_frames=2)
    db = redis.Redis.from_url(broker, decode_responses=True)
    db.hset(f"vsr:job:{job_id}", "state", "done")  # as the join leaves it
    chunk = json.loads(db.hget(f"vsr:job:{job_id}", "chunks"))[1]
    task = types.SimpleNamespace(app=types.SimpleNamespace(conf=types.SimpleNamespace(broker_url=broker)),
                                 request=types.SimpleNamespace(hostname="w@test", id="t1"))
    assert _chunk_task(task, job_id, spec.to_json(), chunk, 0) is None
    assert not (tmp_path / "out").exists() and db.hget(f"vsr:job:{job_id}", "state") == "done"
    assert not db.exists(f"vsr:job:{job_id}:attempts")  # not counted either


def test_a_chunk_whose_worker_was_lost_is_sent_again_by_a_retry(broker, make_clip, tmp_path):
    """A retry leaves a running chunk to its worker; the mark of a worker lost on a chunk (killed, its message
    then dropped: the job was cancelled, or the chunk lost too often) must not pass for one: the chunk is sent
    again, else no one would ever compute it."""
    import types

    from vsr.jobs.distributed import MAX_ATTEMPTS, _chunk_task

    spec = job(make_clip("k.mp4", frames=5), tmp_path / "k.mp4")
    [job_id] = submit([spec], broker, chunk_frames=2)
    db = redis.Redis.from_url(broker, decode_responses=True)
    db.delete("vsr")  # (the messages: this test delivers them itself)
    chunks = json.loads(db.hget(f"vsr:job:{job_id}", "chunks"))
    task = types.SimpleNamespace(app=types.SimpleNamespace(conf=types.SimpleNamespace(broker_url=broker)),
                                 request=types.SimpleNamespace(hostname="w@test", id="t1"))
    db.hset(f"vsr:job:{job_id}:running", mapping={"0": "w@gone pid 1", "1": "w@gone pid 1"})  # killed there
    db.hset(f"vsr:job:{job_id}:attempts", "1", MAX_ATTEMPTS)
    assert _chunk_task(task, job_id, spec.to_json(), chunks[1], 0) is None  # lost once too often: the job fails
    assert status(broker)[0]["state"] == "failed"
    assert _chunk_task(task, job_id, spec.to_json(), chunks[0], 0) is None  # redelivered to a failed job
    assert db.hgetall(f"vsr:job:{job_id}:running") == {}
    assert retry(broker, job_id) == 3 and db.llen("vsr") == 3


def test_cancel_and_retry_on_the_command_line(broker, make_clip, tmp_path, capsys):
    from vsr.cli import main

    [job_id] = submit([job(make_clip("c.mp4", frames=5), tmp_path / "c.mp4")], broker, chunk_frames=2)
    assert main(["jobs", "cancel", job_id, "--broker", broker]) == 0
    assert [r["state"] for r in status(broker)] == ["cancelled"]
    assert main(["jobs", "retry", job_id, "--broker", broker]) == 0
    assert [r["state"] for r in status(broker)] == ["queued"]
    out = capsys.readouterr().out
    assert f"cancelled job {job_id}" in out and f"job {job_id} queued again: 3 chunks sent" in out
    assert main(["jobs", "retry", job_id, "--broker", broker]) == 2
    assert "only a failed or cancelled job is retried" in capsys.readouterr().err


def test_a_broker_that_is_not_running_is_one_line_within_seconds(tmp_path, make_clip):
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    spec = job(make_clip("d.mp4"), tmp_path / "out.mp4")
    for call in (lambda: submit([spec], url, 8), lambda: status(url), lambda: run_worker(url)):
        t0 = time.monotonic()
        with pytest.raises(BrokerError) as err:
            call()
        assert time.monotonic() - t0 < 15  # a hang guard, not a timing: the connect timeout is seconds
        assert "\n" not in str(err.value) and "127.0.0.1" in str(err.value)
    assert not (tmp_path / "out.mp4").exists()


@pytest.mark.parametrize("url", ["amqp://127.0.0.1:5672//", "not a url", "redis://127.0.0.1:notaport/0"])
def test_a_broker_url_vsr_cannot_use_is_one_line(url):
    with pytest.raises(BrokerError) as err:
        status(url)
    assert "\n" not in str(err.value)


def test_a_password_is_not_printed():
    with pytest.raises(BrokerError) as err:
        status(f"redis://:s3cret@127.0.0.1:{free_port()}/0")
    assert "s3cret" not in str(err.value) and "***" in str(err.value)


def test_one_unfinished_job_per_output_on_the_broker_too(broker, make_clip, tmp_path):
    """The Celery side of issue 23's retry case: the owner of an output is taken atomically (a Redis script)
    by submit and by retry; eight submits racing for one output: one wins."""
    from concurrent.futures import ThreadPoolExecutor

    from vsr.jobs.distributed import submit_planned
    from vsr.jobs.chunking import plan_job

    planned = plan_job(job(make_clip("r.mp4", frames=3), tmp_path / "out" / "r.mp4"), 8)
    [first] = submit_planned([planned], broker)
    with pytest.raises(BrokerError, match=f"is already the output of job {first} \\(queued\\): one unfinished job"):
        submit_planned([planned], broker)
    cancel(broker, first)
    [second] = submit_planned([planned], broker)
    with pytest.raises(BrokerError, match=f"is already the output of job {second} \\(queued\\)"):
        retry(broker, first)
    assert {r["id"]: r["state"] for r in status(broker)} == {first: "cancelled", second: "queued"}
    cancel(broker, second)

    def one(_):
        try:
            return submit_planned([planned], broker)[0]
        except BrokerError:
            return None

    with ThreadPoolExecutor(8) as pool:
        won = [i for i in pool.map(one, range(8)) if i is not None]
    assert len(won) == 1
    states = [r["state"] for r in status(broker)]
    assert states.count("queued") == 1 and len(states) == 3  # the losers left no record behind


@pytest.mark.parametrize("damage, words", [
    (lambda db, i: db.hdel(f"vsr:job:{i}", "total"), "is malformed (no 'total')"),
    (lambda db, i: (db.delete(f"vsr:job:{i}:done"), db.set(f"vsr:job:{i}:done", "x")), "holds something else"),
    (lambda db, i: (db.delete("vsr:jobs"), db.set("vsr:jobs", "x")), "holds something else at vsr:jobs"),
    (lambda db, i: db.hset(f"vsr:job:{i}", "spec", "{"), "is malformed (not a vsr job"),
])
def test_a_record_vsr_did_not_write_is_one_line(broker, make_clip, tmp_path, damage, words):
    [job_id] = submit([job(make_clip("m.mp4", frames=3), tmp_path / "m.mp4")], broker, chunk_frames=8)
    damage(redis.Redis.from_url(broker, decode_responses=True), job_id)
    with pytest.raises(BrokerError) as err:
        status(broker)
    assert words in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("url", ["redis://:{pw}@127.0.0.1:{port}/0", "redis://vsr:{pw}@127.0.0.1:{port}/0",
                                 "redis://127.0.0.1:{port}/0?password={pw}", "unix:///nowhere/redis.sock?password={pw}",
                                 "redis://127.0.0.1:{port}/0?password={pw}&db=2"])
def test_a_password_is_masked_in_every_url_form(url):
    url = url.format(pw="s3cr%65t", port=free_port())
    with pytest.raises(BrokerError) as err:
        status(url)
    assert "s3cr" not in str(err.value) and "***" in str(err.value)
