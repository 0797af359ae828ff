"""Tile grids: equal-size tiles whose cores partition the frame, each core ``overlap`` away from inner edges."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vsr.pipeline.tiles import auto_tile, axis_spans, tile_grid


@settings(max_examples=200, deadline=None)
@given(length=st.integers(1, 700), tile=st.integers(40, 300), overlap=st.integers(0, 19))
def test_axis_spans_partition_with_margins(length, tile, overlap):
    spans = axis_spans(length, tile, overlap)
    covered = np.zeros(length, int)
    for s, e, cs, ce in spans:
        assert e - s == min(tile, length)  # every tile the same size
        assert 0 <= s <= cs < ce <= e <= length
        covered[cs:ce] += 1
        if cs > 0:
            assert cs - s >= overlap
        if ce < length:
            assert e - ce >= overlap
    assert (covered == 1).all()


def test_grid_is_row_major_and_whole_frame_without_tile():
    assert len(tile_grid(180, 320, None, 16)) == 1
    g = tile_grid(180, 320, 128, 16)
    assert len(g) == 2 * 3
    assert [(t.y0, t.x0) for t in g[:3]] == [(0, 0), (0, 96), (0, 192)]
    area = np.zeros((180, 320), int)
    for t in g:
        area[t.cy0:t.cy1, t.cx0:t.cx1] += 1
    assert (area == 1).all()


def test_tile_must_exceed_twice_the_overlap():
    with pytest.raises(ValueError):
        axis_spans(100, 32, 16)


def test_auto_tile_follows_the_memory_budget():
    # EDVR-tiny fits 180x180 whole in 1 GiB; EDVR-M at 1080p gets ~128 px tiles (measured ~65 KB/LR pixel)
    assert auto_tile(180, 180, 16, 3, 1, 1 << 30, 16) is None
    assert auto_tile(240, 320, 16, 3, 1, 1 << 30, 16) is not None
    side = auto_tile(1080, 1920, 64, 5, 1, 1 << 30, 16)
    assert side is not None and side % 16 == 0 and 112 <= side <= 128
    assert side * side * 65_000 <= 1 << 30
    assert auto_tile(1080, 1920, 64, 5, 2, 1 << 30, 16) < side  # a batch of 2 needs twice the memory
    assert auto_tile(1080, 1920, 64, 5, 1, 256 << 20, 16) < side
