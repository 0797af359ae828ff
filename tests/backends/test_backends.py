"""Backends: ONNX Runtime equals PyTorch on random inputs with offsets that move samples; buckets."""

import numpy as np
import pytest

from vsr.backends import open_backend
from vsr.backends.buckets import bucket_size, pad_to_bucket
from vsr.errors import BackendError


@pytest.fixture(scope="module")
def pair():
    return (open_backend("random", "edvr-tiny", backend="ort", plan="whole"),
            open_backend("random", "edvr-tiny", backend="torch"))


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


def test_buckets_pad_and_crop():
    assert bucket_size(13, 22) == (16, 24)
    x = np.arange(2 * 13 * 22, dtype=np.float32).reshape(2, 13, 22)
    p, hw = pad_to_bucket(x)
    assert hw == (16, 24) and p.shape == (2, 16, 24)
    np.testing.assert_array_equal(p[:, :13, :22], x)
    np.testing.assert_array_equal(p[:, 13, :22], x[:, 11, :])  # reflection about the last row


def test_unknown_backend_is_a_clean_error():
    with pytest.raises(BackendError):
        open_backend("random", "edvr-tiny", backend="cuda-magic")
