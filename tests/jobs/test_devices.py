"""``vsr jobs run --devices``: a worker per device, each with its own backend there, the chunks shared through the
store as ever.  No GPU here: the workers run the CUDA runtime's CPU emulation on two device names (``cpu:0``,
``cpu:1``: torch takes both), and each chunk's report names the device that computed it; the GPU count that
``all`` and indices are checked against comes from a stand-in for ``torch.cuda`` (it says so).  A GPU's worker
process starts with that GPU alone visible (``CUDA_VISIBLE_DEVICES``), checked on stand-in processes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from vsr.backends import BackendRequest, CudaOptions, TorchOptions
from vsr.backends.cuda import device_list
from vsr.errors import BackendError
from vsr.machine import usable_cores
from vsr.jobs.chunks import plan_chunks
from vsr.jobs.spec import JobSpec
from vsr.jobs.store import JobStore
from vsr.pipeline import RunnerSettings
from vsr.video import EncoderSettings

REPO = Path(__file__).resolve().parents[2]


def test_devices_name_one_device_per_worker(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # stand-in: two GPUs
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert device_list("all") == device_list("0,1") == ["cuda:0", "cuda:1"]
    assert device_list("1") == ["cuda:1"] and device_list("cpu:0, cpu:1") == ["cpu:0", "cpu:1"]
    with pytest.raises(BackendError, match=r"no GPU cuda:2 \(torch sees 2\)"):
        device_list("0,2")
    with pytest.raises(BackendError, match="'tpu' is not a device"):
        device_list("tpu")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    with pytest.raises(BackendError, match="--devices all: torch sees no GPU here"):
        device_list("all")


def test_devices_torch_does_not_see_are_one_line(tmp_path, capsys):
    from vsr.cli import main

    if torch.cuda.is_available():
        pytest.skip("checks the behaviour without a GPU")
    assert main(["jobs", "run", "--devices", "all", "--store", str(tmp_path / "q.db")]) == 2
    assert capsys.readouterr().err == "vsr: error: --devices all: torch sees no GPU here\n"
    assert main(["jobs", "run", "--devices", "1", "--store", str(tmp_path / "q.db")]) == 2
    assert capsys.readouterr().err == "vsr: error: --devices: no GPU cuda:1 (torch sees 0)\n"
    assert not (tmp_path / "q.db").exists()


def test_a_request_moves_to_the_workers_device_where_its_backend_has_one():
    cuda = BackendRequest("random", "edvr-tiny", CudaOptions(device="cpu"))
    assert cuda.on_device("cuda:1").options.device == "cuda:1" and cuda.on_device(None) == cuda
    assert BackendRequest(options=TorchOptions()).on_device("cuda:0").options.device == "cuda:0"
    plain = BackendRequest()  # ONNX Runtime's split plan: the CPU, whatever the worker's device
    assert plain.on_device("cuda:0") == plain


def test_jobs_run_devices_runs_a_worker_per_device_each_with_its_backend_there(make_clip, tmp_path):
    src = make_clip("in.mp4", frames=4, width=16, height=12)
    backend = BackendRequest("random", "edvr-tiny", CudaOptions(device="cpu", precision="fp32"))
    spec = JobSpec.from_settings(src, tmp_path / "out.mkv", backend, EncoderSettings(codec="ffv1"),
                                 RunnerSettings(scene_cuts="off"))
    store = tmp_path / "q.db"
    with JobStore(store, create=True) as s:
        [job] = s.add_jobs([(spec, plan_chunks(spec, 2))])
    r = subprocess.run([sys.executable, "-m", "vsr", "jobs", "run", "--devices", "cpu:0,cpu:1", "--until-empty",
                        "--store", str(store)], capture_output=True, text=True, cwd=REPO,
                       env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    started = re.findall(r"vsr: worker \d+ on (cpu:\d)", r.stderr)  # (two processes' lines may interleave)
    assert sorted(started) == ["cpu:0", "cpu:1"]  # two processes, one per device
    with JobStore(store) as s:
        assert s.jobs()[0].state == "done"
        chunks = s.chunks(job)
    assert len(chunks) == 2
    assert {c["report"]["settings"]["backend_facts"]["device"] for c in chunks} <= {"cpu:0", "cpu:1"}
    assert (tmp_path / "out.mkv").is_file()
    # two workers on one machine: each one's threads default to half its cores (each took all of them)
    assert {c["report"]["settings"]["cores"] for c in chunks} == {max(1, usable_cores() // 2)}


def test_a_gpu_worker_sees_its_gpu_alone():
    from vsr.jobs.worker import gpu_alone

    assert gpu_alone("cuda:1", None) == ("cuda:0", {"CUDA_VISIBLE_DEVICES": "1"})
    assert gpu_alone("cuda", None) == ("cuda:0", {"CUDA_VISIBLE_DEVICES": "0"})
    assert gpu_alone("cuda:1", "4, 6") == ("cuda:0", {"CUDA_VISIBLE_DEVICES": "6"})  # this process's own choice
    assert gpu_alone("cpu:1", "4") == ("cpu:1", {}) and gpu_alone(None, None) == (None, {})
    with pytest.raises(BackendError, match="CUDA_VISIBLE_DEVICES=4 shows 1 GPUs"):
        gpu_alone("cuda:1", "4")


def test_run_workers_starts_each_gpu_worker_with_its_gpu_alone(tmp_path, monkeypatch):
    """The spawned processes are stand-ins that record what they would start with (no GPU here)."""
    from vsr.jobs import worker

    started = []

    class Process:  # stand-in for multiprocessing's spawned Process: records its settings and environment
        def __init__(self, target, args, name):
            self.settings, self.exitcode = args[1], 0

        def start(self):
            started.append((self.settings.device, os.environ.get("CUDA_VISIBLE_DEVICES")))

        def join(self):
            pass

    monkeypatch.setattr(worker.multiprocessing, "get_context", lambda kind: types.SimpleNamespace(Process=Process))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    JobStore(tmp_path / "q.db", create=True).close()
    assert worker.run_workers(tmp_path / "q.db", 1, worker.WorkerSettings(), ["cuda:0", "cuda:1", "cpu:0"]) == 0
    assert started == [("cuda:0", "0"), ("cuda:0", "1"), ("cpu:0", None)]
    assert "CUDA_VISIBLE_DEVICES" not in os.environ  # this process's own environment as it was


def test_a_gpu_workers_report_names_the_gpu_it_was_shown(monkeypatch):
    from vsr.backends.cuda.runtime import _device_label

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert _device_label("cuda:0", torch.device("cuda", 0)) == "cuda:0 (CUDA_VISIBLE_DEVICES=1)"
    assert _device_label("cpu:1", torch.device("cpu", 1)) == "cpu:1"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert _device_label("cuda:1", torch.device("cuda", 1)) == "cuda:1"
