"""Bucket policy: listed sizes when close, else multiples of ``align``; padding at the bottom/right."""

from __future__ import annotations

import numpy as np
import pytest

from vsr.errors import ConfigError
from vsr.backends.buckets import BucketPolicy


def test_listed_bucket_only_when_the_padding_is_small():
    p = BucketPolicy(sizes=((180, 320), (272, 480)), align=4, max_pad=16)
    assert p.bucket(180, 320) == (180, 320)
    assert p.bucket(176, 318) == (180, 320)
    assert p.bucket(270, 480) == (272, 480)
    assert p.bucket(14, 18) == (16, 20)  # a tiny frame is not padded to 180x320
    assert p.bucket(181, 320) == (184, 320)


def test_default_config_loads():
    p = BucketPolicy.load()
    assert p.align == 4 and all(h % 4 == 0 and w % 4 == 0 for h, w in p.sizes)


def test_bad_configs_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="multiples"):
        BucketPolicy(sizes=((270, 480),))
    with pytest.raises(ConfigError, match="pad_mode"):
        BucketPolicy(pad_mode="wrap")
    bad = tmp_path / "b.toml"
    bad.write_text("sizes = [[180, ")
    with pytest.raises(ConfigError, match="malformed"):
        BucketPolicy.load(bad)


def test_pad_into_reflects_and_falls_back_to_edge():
    p = BucketPolicy()
    x = np.arange(2 * 3 * 3, dtype=np.float32).reshape(1, 2, 3, 3)
    out = np.empty((1, 2, 4, 4), np.float32)
    p.pad_into(x, out)
    np.testing.assert_array_equal(out, np.pad(x, [(0, 0), (0, 0), (0, 1), (0, 1)], mode="reflect"))
    big = np.empty((1, 2, 8, 8), np.float32)
    p.pad_into(x, big)  # padding larger than the frame: edge
    np.testing.assert_array_equal(big, np.pad(x, [(0, 0), (0, 0), (0, 5), (0, 5)], mode="edge"))


def test_pad_reflects_at_the_bottom_right_and_keeps_the_frame():
    p = BucketPolicy()
    x = np.arange(2 * 13 * 22, dtype=np.float32).reshape(2, 13, 22)
    padded, hw = p.pad(x)
    assert hw == (16, 24) and padded.shape == (2, 16, 24)
    np.testing.assert_array_equal(padded[:, :13, :22], x)
    np.testing.assert_array_equal(padded[:, 13, :22], x[:, 11, :])  # reflection about the last row
    same, hw = p.pad(padded)
    assert same is padded and hw == (16, 24)


def test_pad_copies_the_edge_when_the_frame_is_smaller_than_its_padding():
    padded, hw = BucketPolicy().pad(np.array([[1.0, 2.0]], np.float32))
    assert hw == (4, 4)
    np.testing.assert_array_equal(padded, [[1, 2, 2, 2]] * 4)
