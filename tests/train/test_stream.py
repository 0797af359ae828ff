"""Batches made by worker processes (vsr.train.stream): the same bytes as made in the training process, in order,
from any starting iteration (a resume); a worker's error arrives as itself; no worker outlives the stream."""

from __future__ import annotations

import multiprocessing
from dataclasses import replace

import numpy as np
import pytest
import torch

from vsr.errors import InputError
from vsr.train.data import UNIT, FramePool, PairSampler, find_sources
from vsr.train.degrade import Context, load_degrade
from vsr.train.stream import BatchStream, batch_bytes, in_flight


def sampler(clip, cls=PairSampler) -> PairSampler:
    # video segments and the real-footage recipe (blur, noise, JPEG, x264) on a larger, longer clip than the window
    real = replace(load_degrade("real"), context=Context(lr_size=12, frames=5))
    pool = FramePool(find_sources([clip]), segments_per_video=2, segment_length=7, region=48)
    return cls(pool, num_frame=3, lr_patch=8, batch_size=3, seed=5, degradation=real)


class FailingAt2(PairSampler):
    def batch_uint8(self, iteration: int):
        if iteration == 2:
            raise InputError("iteration 2's frame is unreadable")
        return super().batch_uint8(iteration)


@pytest.fixture
def clip(make_clip):
    return make_clip("train.mp4", width=64, height=48, frames=10)


def test_workers_make_the_batches_made_here_in_order_from_any_iteration(clip):
    s = sampler(clip)
    here = [s.batch_uint8(i) for i in range(6)]
    with BatchStream(sampler(clip), 0, 6, workers=2) as whole:
        got = list(whole)
    with BatchStream(sampler(clip), 4, 6, workers=2) as resumed:  # a run resumed at iteration 4
        got += list(resumed)
    assert not multiprocessing.active_children()  # every worker joined on leaving
    assert len(got) == 8 and all(isinstance(t, torch.Tensor) and t.dtype == torch.uint8 for b in got for t in b)
    for (lr, hr), (want_lr, want_hr) in zip(got, here + here[4:]):
        assert np.array_equal(lr.numpy(), want_lr) and np.array_equal(hr.numpy(), want_hr)
    assert whole.wait_s > 0
    with BatchStream(sampler(clip), 4, 6, workers=0) as inline:
        assert all(np.array_equal(a.numpy(), b) for (a, b) in zip(next(inline), here[4]))


def test_a_workers_error_arrives_as_itself_and_the_workers_stop(clip):
    with pytest.raises(InputError, match="^iteration 2's frame is unreadable$"):
        with BatchStream(sampler(clip, FailingAt2), 0, 5, workers=2) as stream:
            for _ in stream:
                pass
    assert stream.iteration == 2 and not multiprocessing.active_children()


def test_a_worker_that_dies_is_one_line(clip):
    import os
    import signal

    from vsr.errors import VsrError

    with pytest.raises(VsrError, match="^a batch worker process stopped .*--workers 0") as e:
        with BatchStream(sampler(clip), 0, 1000, workers=1, prefetch=1) as stream:
            next(stream)
            for child in multiprocessing.active_children():
                os.kill(child.pid, signal.SIGKILL)  # as the kernel's out-of-memory killer would
            for _ in stream:
                pass
    assert "\n" not in str(e.value) and not multiprocessing.active_children()


def test_float_batches_are_the_uint8_ones_through_one_table(clip):
    s = sampler(clip)
    lr8, hr8 = s.batch_uint8(3)
    lr, hr = s.batch(3)
    assert np.array_equal(lr, lr8.astype(np.float32) / np.float32(255)) and lr.dtype == np.float32
    assert np.array_equal(hr, hr8.astype(np.float32) / np.float32(255))
    assert torch.equal(torch.tensor(UNIT)[torch.from_numpy(lr8).long()], torch.from_numpy(lr))


def test_batches_in_flight_keep_to_half_of_the_shared_memory():
    mib = 1 << 20
    assert in_flight(4, 2, mib, 100 * mib) == (4, 2)  # 8 of 50 fit
    assert in_flight(4, 2, mib, 12 * mib) == (4, 1)  # 6 fit: one each
    assert in_flight(4, 2, mib, 6 * mib) == (3, 1)  # 3 fit: fewer workers
    assert in_flight(4, 2, mib, mib) == (0, 1)  # none: made in the training process
    s = PairSampler.__new__(PairSampler)
    s.batch_size, s.lr_patch, s.num_frame = 32, 64, 5
    assert batch_bytes(s) == 32 * (5 * 3 * 64 * 64 + 3 * 256 * 256)


FULL_SHM = """
import os, subprocess, sys
from dataclasses import replace
from pathlib import Path

def main():
    from vsr.errors import VsrError
    from vsr.train.data import FramePool, PairSampler, find_sources
    from vsr.train.degrade import Context, load_degrade
    from vsr.train.stream import BatchStream

    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "vsr-test-shm", "/dev/shm"], check=True)
    real = replace(load_degrade("real"), context=Context(lr_size=12, frames=5))
    pool = FramePool(find_sources([Path(sys.argv[1])]), segments_per_video=2, segment_length=7, region=48)
    s = PairSampler(pool, num_frame=3, lr_patch=8, batch_size=3, seed=5, degradation=real)
    with BatchStream(s, 0, 50, workers=2) as stream:
        assert stream.workers == 2
        fd = os.open("/dev/shm/filler", os.O_WRONLY | os.O_CREAT)
        try:  # the room the stream planned with, taken since (another program, another run)
            while True:
                os.write(fd, bytes(65536))
        except OSError:
            pass
        os.close(fd)
        try:
            for _ in stream:
                pass
        except VsrError as e:
            print("ERROR:", e, flush=True)

if __name__ == "__main__":  # the fork server imports __main__
    main()
"""


def test_a_worker_that_cannot_allocate_its_batch_stops_the_stream_in_one_line(clip, tmp_path):
    """A full /dev/shm (a real, small tmpfs in a private mount namespace): the workers' queue threads printed a
    traceback each and dropped their batches, and the training process waited for them for ever (issue 37)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from tests.jobs.test_full_disk import namespace

    cmd = namespace()
    if cmd is None:
        pytest.skip("no mount namespace here (unshare -m / -rm)")
    (tmp_path / "full_shm.py").write_text(FULL_SHM)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    r = subprocess.run([*cmd, sys.executable, tmp_path / "full_shm.py", clip], capture_output=True, text=True,
                       timeout=120, env=env)
    errors = [ln for ln in r.stdout.splitlines() if ln.startswith("ERROR:")]
    assert len(errors) == 1 and "cannot allocate shared memory" in errors[0] and "--workers" in errors[0], \
        r.stdout + r.stderr
    assert "Traceback" not in r.stderr, r.stderr


def test_a_worker_is_quiet_about_a_training_process_gone_mid_hand_over():
    """CI (2026-12-05): Ctrl-C ended the training process while a worker's resource-sharer thread was handing it a
    batch's shared memory; the broken pipe's traceback came out of the worker, after `vsr: interrupted`.  The hook a
    worker installs drops exactly those errors (the other end gone) and passes every other one on."""
    from vsr.train.stream import _quiet_when_gone

    passed = []

    def hook(kind, value, tb):
        passed.append(kind)

    for gone in (BrokenPipeError(32, "Broken pipe"), ConnectionResetError(104, "reset"), EOFError()):
        _quiet_when_gone(hook, type(gone), gone, None)
    for other in (ValueError("bad"), OSError(28, "No space left on device"), KeyError("x")):
        _quiet_when_gone(hook, type(other), other, None)
    assert passed == [ValueError, OSError, KeyError]


def test_a_stopped_run_s_semaphores_are_cleaned_up_without_a_warning():
    """A run stopped while its batch queues' semaphores exist (an exit that skips their finalizers, as an
    interrupted run's does) leaves them to multiprocessing's resource tracker, which unlinks them: its job, done
    silently, not two warnings and their source lines on the terminal after ``vsr: interrupted``."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import os, vsr.train.stream as s\n"
            "ctx = s._fork_server()\n"
            "held = [ctx.Lock(), ctx.Semaphore(2)]\n"  # named semaphores, registered with the tracker
            "os._exit(130)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       cwd=Path(__file__).resolve().parents[2])
    assert p.returncode == 130, p.stderr
    assert "resource_tracker" not in p.stderr and "leaked" not in p.stderr, p.stderr
