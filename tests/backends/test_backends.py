"""Backends: ONNX Runtime equals PyTorch on random inputs with offsets that move samples; one padding policy;
options objects select the backend."""

import warnings
from pathlib import Path

import numpy as np
import pytest

from vsr.backends import (BackendRequest, BucketPolicy, OrtOptions, SplitOptions, TorchOptions, backend_options,
                          open_backend)
from vsr.backends.ort import OrtBackend
from vsr.backends.split import SplitBackend
from vsr.backends.torch_backend import TorchBackend
from vsr.errors import BackendError

# A frame of 14x18 is within max_pad of the 16x24 bucket: every backend must pad it to 16x24, not to 16x20.
NEAR_BUCKET = BucketPolicy(sizes=((16, 24),), max_pad=16)


@pytest.fixture(scope="module")
def pair():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return (open_backend("random", "edvr-tiny", OrtOptions()), open_backend("random", "edvr-tiny", TorchOptions()))


def test_ort_equals_torch_within_1e4_on_odd_sizes(pair):
    ort_b, torch_b = pair
    x = np.random.default_rng(1).random((3, 3, 3, 13, 22), dtype=np.float32)
    a, b = ort_b.infer(x), torch_b.infer(x)
    assert a.shape == (3, 3, 52, 88)
    assert np.abs(a - b).max() <= 1e-4
    # second call reuses the session and the preallocated output buffer, result unchanged
    np.testing.assert_array_equal(ort_b.infer(x), a)
    assert ort_b.timings()["run"] > 0


def test_batch_is_dynamic_and_frames_independent(pair):
    ort_b, _ = pair
    x = np.random.default_rng(2).random((4, 3, 3, 16, 16), dtype=np.float32)
    whole = ort_b.infer(x)
    one = ort_b.infer(x[2:3])
    assert np.abs(whole[2:3] - one).max() <= 1e-5


def test_prepare_builds_the_session_before_the_first_frame(pair):
    ort_b, torch_b = pair
    ort_b.prepare(30, 31, 2)  # bucket 32x32
    built = ort_b.timings()
    assert (32, 32) in ort_b._sessions and built["session"] > 0
    ort_b.prepare(32, 32, 2)
    ort_b.infer(np.zeros((2, 3, 3, 30, 31), np.float32))
    after = ort_b.timings()
    assert after["export"] == built["export"] and after["session"] == built["session"]
    torch_b.prepare(30, 31, 2)  # nothing to build, and no error


def test_every_backend_declares_the_window_padding_of_its_config(pair):
    for b in pair:
        assert b.padding == b.config.padding == "reflection_circle"


def test_whole_split_and_torch_pad_alike_on_a_frame_that_is_not_a_bucket(tmp_path, monkeypatch):
    monkeypatch.setenv("VSR_ENGINE_DIR", str(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        backends = [open_backend("random", "edvr-tiny", opts) for opts in (
            OrtOptions(threads=2, buckets=NEAR_BUCKET), SplitOptions(threads=2, buckets=NEAR_BUCKET),
            TorchOptions(threads=2, buckets=NEAR_BUCKET))]
    x = np.random.default_rng(5).random((1, 3, 3, 14, 18), dtype=np.float32)
    whole, split, torch_out = (b.infer(x) for b in backends)
    assert whole.shape == split.shape == torch_out.shape == (1, 3, 56, 72)
    assert np.abs(whole - split).max() <= 1e-4 and np.abs(whole - torch_out).max() <= 1e-4
    # the bottom rows differ when a backend pads to another bucket (16x20, say): the policy is what agrees
    other = open_backend("random", "edvr-tiny", TorchOptions(threads=2, buckets=BucketPolicy())).infer(x)
    assert np.abs(other - torch_out).max() > 1e-3


def test_the_default_policy_buckets_every_backend_alike(pair):
    """A 176x320 frame runs at the 180x320 bucket whether the plan is whole or split."""
    ort_b, torch_b = pair
    assert ort_b.buckets == torch_b.buckets == BucketPolicy.load()
    assert ort_b.buckets.bucket(176, 320) == (180, 320)


def test_options_select_the_backend():
    assert backend_options() == SplitOptions()
    assert backend_options("ort", "split", 3) == SplitOptions(threads=3)
    assert backend_options("ort", "whole", 2) == OrtOptions(threads=2)
    assert backend_options("torch", "auto", 1) == TorchOptions(threads=1)
    assert BackendRequest().options == SplitOptions()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert isinstance(open_backend("random", "edvr-tiny", TorchOptions(threads=1)), TorchBackend)
        assert isinstance(open_backend("random", "edvr-tiny", OrtOptions(threads=1)), OrtBackend)
        assert isinstance(BackendRequest("random", "edvr-tiny").open(), SplitBackend)


def test_unknown_backend_is_a_clean_error():
    with pytest.raises(BackendError, match="unknown backend"):
        backend_options("cuda-magic")
    with pytest.raises(BackendError, match="unknown plan"):
        backend_options("ort", "halves")
    with pytest.raises(BackendError, match="TorchOptions, OrtOptions, SplitOptions or CudaOptions"):
        open_backend("random", "edvr-tiny", "torch")


@pytest.mark.parametrize("preset", [None, "0"])
def test_torch_allocates_large_tensors_in_huge_pages_unless_told_not_to(preset):
    """vsr turns torch's huge pages on (a 4K frame's output is faulted in and freed 2 MB at a time; the post stage
    frees it); a THP_MEM_ALLOC_ENABLE the user set is kept.  Pages checked where the kernel gives huge pages to
    memory that asks (madvise)."""
    import os
    import subprocess
    import sys

    code = """import vsr, os, torch
t = torch.ones(64 << 18)  # 64 MB
huge, inside = 0, False
for line in open('/proc/self/smaps'):
    if line[0] in '0123456789abcdef':  # a mapping: start-end perms ...
        lo, hi = (int(x, 16) for x in line.split()[0].split('-'))
        inside = lo <= t.data_ptr() < hi
    elif inside and line.startswith('AnonHugePages:'):
        huge = int(line.split()[1])
print(os.environ['THP_MEM_ALLOC_ENABLE'], huge)
"""
    import vsr

    env = {k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"}
    env["PYTHONPATH"] = str(Path(vsr.__file__).resolve().parents[1])  # this vsr
    if preset is not None:
        env["THP_MEM_ALLOC_ENABLE"] = preset
    flag, huge_kb = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                   check=True).stdout.split()
    assert flag == (preset or "1")
    mode = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if mode.exists() and "[madvise]" in mode.read_text():
        assert (int(huge_kb) > 0) == (preset is None), huge_kb
