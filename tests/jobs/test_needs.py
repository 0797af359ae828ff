"""A mixed fleet: a worker leaves alone the jobs its machine cannot run (a ``--backend cuda`` job where torch sees
no GPU), which stay queued for a worker that can; ``add`` and ``list`` say what such a job waits for, and
``run --until-empty`` stops saying which jobs it left.

No GPU here, and that is the real lack these tests use: the CUDA runtime's jobs need one (``--devices cpu:0``,
its CPU emulation, is a worker that runs them).  A machine *with* a GPU is a stand-in (its GPU count), said where
it is used.
"""

from __future__ import annotations

import json
import time

import pytest
import torch

from vsr.backends import BackendRequest, CudaOptions, OrtOptions, SplitOptions, TorchOptions
from vsr.cli import main
from vsr.jobs.chunks import plan_chunks
from vsr.jobs.needs import Machine, Need, job_need, queue_of, waiting_line, worker_queues
from vsr.jobs.spec import JobSpec
from vsr.jobs.store import JobStore
from vsr.pipeline import RunnerSettings
from vsr.video import EncoderSettings

from tests.jobs.helpers import added_ids

TINY = ["--weights", "random", "--config", "edvr-tiny", "--codec", "ffv1", "--threads", "1"]
no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without a GPU")


def spec_of(options, out: str = "/o/out.mkv") -> dict:
    return JobSpec("/i/in.mp4", out, BackendRequest("random", "edvr-tiny", options)).to_dict()


def test_what_each_backend_needs():
    cuda = job_need(spec_of(CudaOptions()))
    assert cuda == Need("cuda", 0, ("cupy", "pycuda")) and cuda.text() == "a GPU (backend cuda)"
    assert job_need(spec_of(CudaOptions(device="cpu"))) is None  # the CPU emulation
    assert job_need(spec_of(CudaOptions()), device="cpu:1") is None  # a --devices cpu:1 worker emulates it
    assert job_need(spec_of(CudaOptions(launcher="cupy")), device="cuda:0") == Need("cuda", 0, ("cupy",))
    trt = job_need(spec_of(CudaOptions(segments="tensorrt")))
    assert trt.tensorrt and trt.text() == "a GPU and TensorRT (backend cuda)" and queue_of(trt) == "tensorrt"
    assert job_need(spec_of(CudaOptions(segments="tensorrt")), device="cpu:0") == trt  # no engines emulated
    assert job_need(spec_of(TorchOptions())) is None  # torch's own choice: the CPU where there is no GPU
    assert job_need(spec_of(TorchOptions(device="cuda:1"))).text() == "GPU cuda:1 (backend torch)"
    assert job_need(spec_of(SplitOptions())) is None and job_need(spec_of(OrtOptions())) is None
    ort = job_need(spec_of(OrtOptions(providers=("CUDAExecutionProvider", "CPUExecutionProvider"))))
    assert ort == Need("ort", providers=("CUDAExecutionProvider",)) and queue_of(ort) is None
    assert job_need("not json") is None and job_need({"backend": 3}) is None  # running it says what is wrong
    assert [queue_of(job_need(spec_of(o))) for o in (TorchOptions(device="cuda"), CudaOptions())] == ["gpu", "cuda"]


@no_gpu
def test_this_machine_lacks_a_gpu_and_a_stand_in_gpu_machine_has_one(monkeypatch):
    machine = Machine()
    assert machine.lacks(job_need(spec_of(CudaOptions()))) == "torch sees no CUDA GPU here"
    assert machine.runs(spec_of(CudaOptions())) == Need("cuda", 0, ("cupy", "pycuda"))
    assert machine.runs(spec_of(SplitOptions())) is None and Machine("cpu:0").runs(spec_of(CudaOptions())) is None
    assert worker_queues("vsr", machine)[0] == ["vsr"]  # a CPU-only Celery worker consumes the CPU jobs only
    monkeypatch.setattr(Machine, "gpus", lambda self: 1)  # stand-in: one GPU (a launcher is still missing)
    assert Machine().lacks(job_need(spec_of(TorchOptions(device="cuda")))) is None
    assert Machine().lacks(job_need(spec_of(TorchOptions(device="cuda:1")))) == "torch sees 1 GPU here"
    assert worker_queues("vsr", Machine())[0] == ["vsr", "vsr.gpu"]


def test_the_waiting_line_groups_the_jobs_by_need():
    gpu, trt = Need("cuda", 0, ("cupy",)), Need("cuda", 0, ("cupy",), True)
    assert waiting_line([(3, gpu)]) == "job 3 waits for a worker with a GPU (backend cuda)"
    assert waiting_line([(3, gpu), (4, trt), (5, gpu)]) == ("jobs 3, 5 wait for a worker with a GPU (backend cuda); "
                                                            "job 4 waits for a worker with a GPU and TensorRT "
                                                            "(backend cuda)")
    assert waiting_line([(i, gpu) for i in range(12)], most=2) == ("jobs 0, 1 and 10 more wait for a worker with "
                                                                   "a GPU (backend cuda)")


def gpu_and_cpu_jobs(src, tmp_path) -> list:
    """Two jobs of ``src``: one of the CUDA runtime (``gpu.mkv``), one of torch on the CPU (``cpu.mkv``)."""
    return [JobSpec.from_settings(src, tmp_path / name, BackendRequest("random", "edvr-tiny", options),
                                  EncoderSettings(codec="ffv1"), RunnerSettings(scene_cuts="off"))
            for name, options in (("gpu.mkv", CudaOptions()), ("cpu.mkv", TorchOptions(threads=1)))]


@no_gpu
def test_a_claim_leaves_the_chunks_this_machine_cannot_run_queued(make_clip, tmp_path):
    src = make_clip("in.mp4", frames=4, width=16, height=12)
    jobs = gpu_and_cpu_jobs(src, tmp_path)
    with JobStore(tmp_path / "q.db", create=True) as store:
        gpu_job, cpu_job = store.add_jobs([(spec, plan_chunks(spec, 2)) for spec in jobs])
        machine = Machine()
        claims = [store.claim("me:1:a", 60, fits=machine.fits) for _ in range(3)]
        assert [(c.job, c.index) for c in claims[:2]] == [(cpu_job, 0), (cpu_job, 1)] and claims[2] is None
        assert store.pending(fits=machine.fits)  # the CPU job's chunks run (no worker would take the GPU job's)
        for claim in claims[:2]:
            store.commit_chunk("me:1:a", claim, {}, True)
        join = store.claim("me:1:a", 60, fits=machine.fits)
        assert join.job == cpu_job and join.is_join  # a join needs no backend
        store.finish_job("me:1:a", join)
        assert not store.pending(fits=machine.fits) and store.pending()
        assert store.claim("me:1:a", 60, fits=Machine("cpu:0").fits).job == gpu_job  # the emulation runs it
        assert [c["attempts"] for c in store.chunks(gpu_job)] == [1, 0]


@no_gpu
def test_a_workers_line_counts_the_other_jobs_this_machine_runs_and_no_eta_for_a_cancelled_job(make_clip, tmp_path):
    """`job 2 chunk 0 ... 1 other job left` counted a GPU job that this worker leaves to other machines (it then
    sat idle, the job still "left"); a chunk of a job cancelled while it runs showed the job's ETA though none
    of its other chunks will start."""
    from vsr.jobs.worker import Outlook, Progress, WorkerSettings, _Heartbeat

    src = make_clip("in.mp4", frames=4, width=16, height=12)
    jobs = gpu_and_cpu_jobs(src, tmp_path)
    with JobStore(tmp_path / "q.db", create=True) as store:
        _, cpu_job = store.add_jobs([(spec, plan_chunks(spec, 2)) for spec in jobs])
        machine = Machine()
        claim = store.claim("me:1:a", 60, fits=machine.fits)
        assert store.outlook(cpu_job)[1] == 1  # (the store's count of every unfinished job)
        progress = Progress()
        outlook = Outlook(cpu_job, *store.outlook(cpu_job, machine.fits), progress)
        progress.start()
        progress.add(1)
        time.sleep(0.01)
        assert ", ETA " in outlook.text() and outlook.text().endswith("; no other job left")
        store.cancel(cpu_job)
        beat = _Heartbeat(store.path, "me:1:a", claim, WorkerSettings(lease_s=0.2), None, progress)
        beat.start()
        try:
            deadline = time.monotonic() + 30
            while not progress.stopped and time.monotonic() < deadline:
                time.sleep(0.01)
        finally:
            beat.stopped.set()
            beat.join()
        assert ", ETA " not in outlook.text() and ", job stopped" in outlook.text()


@no_gpu
def test_a_cpu_worker_leaves_a_gpu_job_queued_and_says_so(make_clip, tmp_path, capsys):
    src = make_clip("in.mp4", frames=3, width=16, height=12)
    store = str(tmp_path / "q.db")
    assert main(["jobs", "add", str(src), "--out-dir", str(tmp_path / "gpu"), "--backend", "cuda", *TINY,
                 "--store", store]) == 0  # not an error: a GPU machine may share the store
    out = capsys.readouterr()
    [gpu_job] = added_ids(out.out)
    assert out.err.splitlines()[-1] == (f"vsr: job {gpu_job} waits for a worker with a GPU (backend cuda): this "
                                        "machine cannot run it (torch sees no CUDA GPU here)")
    assert main(["jobs", "add", str(src), "--out-dir", str(tmp_path / "cpu"), "--backend", "torch", *TINY,
                 "--store", store]) == 0
    assert "waits for" not in capsys.readouterr().err
    assert main(["jobs", "run", "--until-empty", "--store", store]) == 0  # the CPU job done, the GPU job left
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == (f"vsr: no job left that this machine can run; job {gpu_job} waits for a "
                                    "worker with a GPU (backend cuda)")
    assert "failed" not in err
    assert main(["jobs", "list", "--json", "--store", store]) == 0
    rows = {str(r["id"]): r for r in json.loads(capsys.readouterr().out)}
    assert rows[gpu_job]["state"] == "queued" and rows[gpu_job]["needs"] == "a GPU (backend cuda)"
    assert [r["state"] for r in rows.values()] == ["queued", "done"]
    assert main(["jobs", "list", "--store", store]) == 0
    assert "waits for a worker with a GPU (backend cuda)" in capsys.readouterr().out
    with JobStore(store) as s:
        assert [c["attempts"] for c in s.chunks(int(gpu_job))] == [0]  # never claimed
    assert not (tmp_path / "gpu").exists() or not any((tmp_path / "gpu").iterdir())


def test_a_celery_worker_asks_torch_for_its_gpus_in_a_process_of_its_own():
    """A Celery worker forks its pool: ``torch.cuda.is_available()`` in its main process initialises CUDA, and the
    forked children could then not use the GPU.  Its probe runs torch elsewhere (this process never imports it)."""
    import subprocess
    import sys

    code = ("import sys; from vsr.jobs.needs import Machine; n = Machine(forks=True).gpus(); "
            "print(n, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=True)
    assert out.stdout.split() == [str(torch.cuda.device_count() if torch.cuda.is_available() else 0), "False"]


@no_gpu
def test_list_says_what_an_interrupted_gpu_job_waits_for(make_clip, tmp_path, capsys):
    """A GPU job whose GPU worker was killed mid-chunk shows as interrupted; it waits for another GPU worker."""
    src = make_clip("in.mp4", frames=4, width=16, height=12)
    spec = JobSpec.from_settings(src, tmp_path / "gpu.mkv", BackendRequest("random", "edvr-tiny", CudaOptions()),
                                 EncoderSettings(codec="ffv1"), RunnerSettings(scene_cuts="off"))
    with JobStore(tmp_path / "q.db", create=True) as store:
        [job] = store.add_jobs([(spec, plan_chunks(spec, 2))])
        assert store.claim("gpu-host:1:a", 60).job == job  # a GPU worker of another host, lost since
        store._db.execute("UPDATE chunks SET expiry = 0")  # its lease ran out
    assert main(["jobs", "list", "--store", str(tmp_path / "q.db")]) == 0
    assert "interrupted" in (out := capsys.readouterr().out) and "waits for a worker with a GPU (backend cuda)" in out


@no_gpu
def test_an_idle_worker_says_once_which_jobs_it_leaves_to_other_machines(make_clip, tmp_path, capsys):
    """Without ``--until-empty`` a worker polls for new jobs; beside a queue of GPU jobs it waited in silence."""
    import select
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    from vsr.jobs.needs import Waiting

    src = make_clip("in.mp4", frames=3, width=16, height=12)
    store = str(tmp_path / "q.db")
    assert main(["jobs", "add", str(src), "--out-dir", str(tmp_path / "a"), "--backend", "cuda", *TINY,
                 "--store", store]) == 0
    [first] = added_ids(capsys.readouterr().out)
    waiting = Waiting(Machine(), every_s=0)
    with JobStore(store) as s:
        line = f"waiting for jobs this machine can run; job {first} waits for a worker with a GPU (backend cuda)"
        assert waiting.line(s) == line
        assert waiting.line(s) is None  # said once
        assert main(["jobs", "add", str(src), "--out-dir", str(tmp_path / "b"), "--backend", "cuda", *TINY,
                     "--store", store]) == 0
        [second] = added_ids(capsys.readouterr().out)
        assert waiting.line(s) == (f"waiting for jobs this machine can run; jobs {first}, {second} wait for a "
                                   "worker with a GPU (backend cuda)")
    # the worker of `vsr jobs run` says it, then waits for new jobs until it is stopped
    worker = subprocess.Popen([sys.executable, "-m", "vsr", "jobs", "run", "--store", store], text=True,
                              stderr=subprocess.PIPE, cwd=Path(__file__).resolve().parents[2],
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as from a terminal
    try:
        said = worker.stderr.readline() if select.select([worker.stderr], [], [], 120)[0] else "(nothing in 120 s)"
        assert said.startswith("vsr: waiting for jobs this machine can run; jobs "), said
        time.sleep(1)
        assert worker.poll() is None  # still waiting
    finally:
        worker.send_signal(signal.SIGINT)
        rest = worker.communicate(timeout=60)[1]
    assert worker.returncode == 130 and "waiting for jobs" not in rest, rest
