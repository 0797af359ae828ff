"""The cores vsr's threads default to: those this process may run on (its affinity mask, a cgroup's CPU quota),
not the machine's.  ``os.cpu_count()`` counts the machine's: a container given 2 of 64 cores started 64 ONNX
Runtime threads, and on 1 core 8 threads ran the whole graph 2.7-4.7x slower than 1 (docs/benchmarks.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from vsr.machine import usable_cores


def _tree(tmp_path, files: dict[str, str]):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text + "\n")
    return tmp_path


V2, V1_CPU, V1_CPUACCT = "0::/\n", "3:cpu:/\n", "3:cpu,cpuacct:/\n"  # /proc/self/cgroup in a cgroup namespace
SERVICE = "0::/system.slice/vsr.service\n"  # a systemd service, cgroup v2, no namespace


@pytest.mark.parametrize("files, own, cores", [
    ({"cpu.max": "max 100000"}, V2, None),  # cgroup v2, no quota
    ({"cpu.max": "50000 100000"}, V2, 1),  # half a core: one thread
    ({"cpu.max": "100000 100000"}, V2, 1),
    ({"cpu.max": "150000 100000"}, V2, 2),  # a core and a half: rounded up
    ({"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000"}, V1_CPU, None),  # cgroup v1, no quota
    ({"cpu/cpu.cfs_quota_us": "100000", "cpu/cpu.cfs_period_us": "100000"}, V1_CPU, 1),
    ({"cpu,cpuacct/cpu.cfs_quota_us": "50000", "cpu,cpuacct/cpu.cfs_period_us": "100000"}, V1_CPUACCT, 1),
    ({}, V2, None),  # no cgroup file to read
    # a quota set on the process's own cgroup, not the mount's root (read alone before): a systemd service's
    # CPUQuota, one above it, a Docker container's v1 mount (which starts at its own cgroup)
    ({"system.slice/vsr.service/cpu.max": "100000 100000", "cpu.max": "max 100000"}, SERVICE, 1),
    ({"system.slice/cpu.max": "100000 100000", "system.slice/vsr.service/cpu.max": "max 100000"}, SERVICE, 1),
    ({"cpu,cpuacct/cpu.cfs_quota_us": "50000", "cpu,cpuacct/cpu.cfs_period_us": "100000"},
     "3:cpu,cpuacct:/docker/0123abc\n", 1),
], ids=["v2-max", "v2-half", "v2-one", "v2-1.5", "v1-none", "v1-one", "v1-cpuacct-half", "none", "v2-service",
        "v2-above", "v1-docker"])
def test_a_cgroups_cpu_quota_bounds_the_cores(tmp_path, files, own, cores):
    """The kernel's own files, as a process sees them (cgroup v2 ``cpu.max``; v1 ``cfs_quota_us``/period)."""
    mine = len(os.sched_getaffinity(0))
    assert usable_cores(_tree(tmp_path, files), own) == (mine if cores is None else min(cores, mine))


@pytest.mark.parametrize("files, own, mb", [
    ({"memory.max": "max"}, V2, None),
    ({"system.slice/vsr.service/memory.max": str(4 << 30)}, SERVICE, 4096),  # systemd-run -p MemoryMax=4G
    ({"system.slice/memory.max": str(3 << 30), "system.slice/vsr.service/memory.max": str(4 << 30)}, SERVICE, 3072),
    ({"memory/slurm/uid_0/job_7/memory.limit_in_bytes": str(2 << 30),
      "memory/memory.limit_in_bytes": "9223372036854771712"}, "4:memory:/slurm/uid_0/job_7\n", 2048),  # Slurm, v1
    ({"memory/memory.limit_in_bytes": str(1 << 30)}, "4:memory:/docker/0123abc\n", 1024),  # Docker's v1 mount
], ids=["v2-max", "v2-service", "v2-above", "v1-slurm", "v1-docker"])
def test_a_cgroups_memory_limit_is_found_where_it_is_set(tmp_path, files, own, mb):
    """The memory budget's default is half of this: a Slurm job's or a systemd service's limit, set on its own
    cgroup, was not seen (only the mount's root was read), and the budget followed the whole machine."""
    from vsr.machine import _cgroup_limit_mb

    assert _cgroup_limit_mb(_tree(tmp_path, files), own) == mb


PROBE = """
import json
from vsr.plan.segments import session_options
from vsr.kernels.threads import default_threads
from vsr.video.planes import conversion_threads
from vsr.train.stream import default_workers
from vsr.backends import TorchOptions, open_backend
import torch, warnings
warnings.simplefilter("ignore")
open_backend("random", "edvr-tiny", TorchOptions(device="cpu"))
print(json.dumps({"ort": session_options().intra_op_num_threads, "kernels": default_threads(),
                  "conversion": conversion_threads(None), "train_workers": default_workers(),
                  "torch": torch.get_num_threads()}))
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores to give a process one of them")
def test_a_process_pinned_to_one_core_runs_one_thread_in_each_pool():
    """``taskset -c 0 vsr upscale``: ONNX Runtime's sessions, vsr's kernels, the colour conversion and torch each
    take the one core, and training starts no batch worker (it would share the step's core)."""
    core = min(os.sched_getaffinity(0))
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300,
                         preexec_fn=lambda: os.sched_setaffinity(0, {core}))
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.splitlines()[-1]) == {"ort": 1, "kernels": 1, "conversion": 1, "train_workers": 0,
                                                       "torch": 1}


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores to give a process one of them")
def test_a_runs_report_says_the_cores_its_threads_took(make_clip, tmp_path):
    src = make_clip("in.mp4", frames=2, width=16, height=12)
    core = min(os.sched_getaffinity(0))
    out = subprocess.run([sys.executable, "-m", "vsr", "upscale", str(src), str(tmp_path / "o.mkv"), "--weights",
                          "random", "--config", "edvr-tiny", "--backend", "torch", "--report", str(tmp_path / "r.json"),
                          "--quiet"], capture_output=True, text=True, timeout=300,
                         preexec_fn=lambda: os.sched_setaffinity(0, {core}))
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads((tmp_path / "r.json").read_text())["settings"]["cores"] == 1


RUN_SHARED = """
import sys
from vsr.machine import share_cores
share_cores(int(sys.argv[1]) or None)
from vsr.console import entry
sys.argv = ["vsr", *sys.argv[2:]]
entry()
"""


def _x264_threads(path) -> int:
    """The thread count x264 wrote into its own settings in the stream (its SEI: ``... threads=N ...``)."""
    data = path.read_bytes()
    at = data.index(b" threads=") + len(b" threads=")
    return int(data[at:data.index(b" ", at)])


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores to give a process a share of one")
def test_the_encoder_takes_the_share_not_the_machine(make_clip, tmp_path):
    """A worker's share (or a container's CPU quota) bounds x264's threads too: its own count (1.5 a core of the
    affinity mask) ignores them.  Read back from the stream, where x264 records the settings it ran with."""
    src = make_clip("in.mp4", frames=2, width=96, height=72)  # 18 rows of macroblocks: room for x264's threads
    threads = {}
    for share in (0, 1):
        out = tmp_path / f"o{share}.mkv"
        run = subprocess.run([sys.executable, "-c", RUN_SHARED, str(share), "upscale", str(src), str(out),
                              "--weights", "random", "--config", "edvr-tiny", "--backend", "torch", "--quiet"],
                             capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr[-2000:]
        threads[share] = _x264_threads(out)
    assert threads[1] == 1 and threads[0] > 1  # x264's own choice where nothing bounds it


KERNELS_IN_A_THREAD = """
import json, sys, threading
import numba, numpy as np
from vsr.machine import share_cores
from vsr.kernels import conv3x3_narrow, depth_to_space_crd
from vsr.kernels.threads import configure_kernel_threads, default_threads
if sys.argv[1] == "share":
    share_cores(1)  # a batch worker's share of the machine
else:
    configure_kernel_threads(1)  # --threads 1, set in the thread that opens the backend
seen = {}

def run():  # as the pipeline's infer stage runs them: in a thread of its own
    depth_to_space_crd(np.ones((1, 4, 8, 8), np.float32), 2)
    seen["depth_to_space"] = numba.get_num_threads()  # what the kernel's prange ran on in this thread
    conv3x3_narrow(np.ones((1, 4, 8, 8), np.float32), np.ones((3, 4, 3, 3), np.float32))
    seen["narrow_conv"] = numba.get_num_threads()

thread = threading.Thread(target=run)
thread.start()
thread.join()
print(json.dumps({"kernels": default_threads(), **seen}))
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores to give a process a share of one")
@pytest.mark.parametrize("bound", ["share", "threads"])
def test_numbas_parallel_loops_take_the_kernels_cores_in_every_thread(bound):
    """numba's thread count is per thread and a new one starts at NUMBA_NUM_THREADS (the affinity mask's): the
    infer stage's PixelShuffle and narrow convolution ran on every core whatever a worker's share or --threads."""
    out = subprocess.run([sys.executable, "-c", KERNELS_IN_A_THREAD, bound], capture_output=True, text=True,
                         timeout=300, env={**os.environ, "NUMBA_NUM_THREADS": "2"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.splitlines()[-1]) == {"kernels": 1, "depth_to_space": 1, "narrow_conv": 1}


@pytest.fixture
def kernel_threads(monkeypatch):
    """vsr.kernels.threads with a counted ``usable_cores`` (``cores[0]`` its answer) and no count configured;
    numba's count of this thread and the module's state put back after."""
    import numba

    from vsr.kernels import threads

    calls, cores = [], [1]
    monkeypatch.setattr(threads, "usable_cores", lambda: calls.append(1) or cores[0])
    monkeypatch.setattr(threads, "_configured", None)
    monkeypatch.setattr(threads, "_default", None, raising=False)
    monkeypatch.delenv("VSR_KERNEL_THREADS", raising=False)
    before = numba.get_num_threads()
    yield threads, calls, cores
    numba.set_num_threads(before)
    threads.shared_workers.cache_clear()


def test_the_kernels_thread_count_is_worked_out_once_not_on_every_kernel_call(kernel_threads):
    """Each narrow convolution and PixelShuffle asks it: the cgroup's files read every time took ~150 us a call."""
    threads, calls, _ = kernel_threads
    assert [threads.parallel_loop_threads() for _ in range(5)] == [1] * 5
    assert len(calls) == 1


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores to tell 1 from 2")
def test_a_runs_setup_works_the_kernels_thread_count_out_again(kernel_threads):
    """A worker's next job: its share as it is now, and a job's --threads is not the next job's default."""
    import numba

    threads, calls, cores = kernel_threads
    numba_threads = int(numba.config.NUMBA_NUM_THREADS)
    assert threads.default_threads() == 1
    cores[0] = 2
    threads.configure_kernel_threads(None)  # a split backend without --threads opened
    assert threads.default_threads() == 2 and threads.parallel_loop_threads() == min(2, numba_threads)
    threads.configure_kernel_threads(1)  # a job with --threads 1
    assert threads.parallel_loop_threads() == 1
    threads.configure_kernel_threads(None)  # the next job, without
    assert threads.default_threads() == 2 and len(calls) == 3  # once a run's setup, not once a kernel call
