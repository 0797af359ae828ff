"""Tile grids: equal-size tiles whose cores partition the frame, each core ``overlap`` away from inner edges."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vsr.errors import MemoryBudgetError
from vsr.pipeline.memory import MARGIN, item_mb, plan_memory
from vsr.pipeline.tiles import axis_spans, best_tile, tile_grid


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


def plan(**kw):
    args = dict(budget_mb=3072, height=1080, width=1920, scale=4, num_frame=5, batch=1, queue=2, overlap=16,
                encoder_mb=34.0 * 7680 * 4320 / 1e6)
    args.update(kw)
    return plan_memory(**args)


def test_memory_plan_keeps_the_whole_run_inside_the_budget():
    p = plan()
    assert p.fits and p.tile is not None and all(s % 16 == 0 for s in p.tile)
    assert p.total_mb <= p.budget_mb
    # the tile is among the largest that fit: 16 px more on both sides would not
    bigger = item_mb((p.tile[0] + 16) * (p.tile[1] + 16), 1, 5, 4)
    assert p.total_mb - p.model_mb + bigger > p.budget_mb * (1 - MARGIN)
    # 1080p -> 8K: LR ring + queues of float32 1080p frames, 8K frames in flight, the encoder's estimate
    assert 250 < p.lr_frames_mb < 400 and 200 < p.hr_frames_mb < 400 and p.encoder_mb > 1000


def area(t):
    return t[0] * t[1]


def test_memory_plan_follows_budget_batch_and_encoder():
    base = area(plan().tile)
    assert area(plan(budget_mb=6144).tile) > base
    assert area(plan(batch=2).tile) < base  # two items per call need twice the working memory
    assert area(plan(encoder_mb=0.0).tile) > base
    assert plan(height=120, width=160).tile is None  # small frames go whole
    with pytest.raises(MemoryBudgetError, match="64x64 tiles"):  # not even the smallest tile fits
        plan(budget_mb=1500)


@given(h=st.integers(40, 700), w=st.integers(40, 700), budget=st.integers(60 * 60, 400 * 400))
@settings(max_examples=60, deadline=None)
def test_best_tile_is_optimal_among_all_valid_tiles(h, w, budget):
    """Exhaustive check: no tile of 16-multiples (or full sides) within the pixel budget computes less."""
    t = best_tile(h, w, budget, 16, 64)

    def cost(th, tw):
        return sum((x.y1 - x.y0) * (x.x1 - x.x0) for x in tile_grid(h, w, (th, tw), 16))

    options = [(th, tw) for th in sorted({h, *range(64, h, 16)}) for tw in sorted({w, *range(64, w, 16)})
               if th * tw <= budget]
    if not options:
        assert t is None
        return
    assert t is not None and area(t) <= budget
    assert cost(*t) <= min(cost(*o) for o in options)
    cover = np.zeros((h, w), int)
    for x in tile_grid(h, w, t, 16):
        cover[x.cy0:x.cy1, x.cx0:x.cx1] += 1
    assert (cover == 1).all()  # the cores partition the frame


def test_memory_plan_is_in_the_run_report(tiny_backend):
    from tests.pipeline.test_runner import CountingSource, NullSink
    from vsr.pipeline import FrameQueueRunner, RunnerSettings

    report = FrameQueueRunner(tiny_backend, RunnerSettings(memory_budget_mb=3072)).run(CountingSource(3), NullSink())
    mp = report.settings["memory_plan"]
    assert mp["budget_mb"] == 3072 and mp["tile"] is None and mp["total_mb"] <= 3072
    assert "budget_from" not in mp  # given, not made from the machine's memory
