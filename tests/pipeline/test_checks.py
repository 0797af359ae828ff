"""The check of a model's output (:mod:`vsr.pipeline.checks`): broken weights stop a run, an edge's overshoot
does not (issues 32 and 37)."""

from __future__ import annotations

import numpy as np
import pytest

from vsr.errors import WeightsError
from vsr.pipeline.checks import check_model_output, looks_suspicious


def tile(rng, garbage: float = 0.0, low: float = -4.3, high: float = 6.1) -> np.ndarray:
    """A (3, 64, 64) output in [0, 1] with the share ``garbage`` of its values spread over [low, high]."""
    core = rng.random((3, 64, 64), dtype=np.float32)
    n = int(garbage * core.size)
    core.reshape(-1)[rng.choice(core.size, n, replace=False)] = rng.uniform(low, high, n)
    return core


@pytest.mark.parametrize("garbage", [0.0072, 0.05, 0.86])
def test_a_block_of_garbage_pixels_is_refused(garbage):
    """One weight of 1e4 in EDVR's first layer: 0.72 % of a 64x48 frame's values between -4.3 and 6.1 (the
    hostile run's clip), up to 86 % on other footage, nothing beyond +-1000 (issue 37)."""
    core = tile(np.random.default_rng(0), garbage)
    with pytest.raises(WeightsError, match=r"frame 7 is saturated \(.* % of its values beyond -2 to 3.*w\.pth"):
        check_model_output(core, 7, "w.pth")


def test_an_edges_overshoot_is_not_garbage():
    """The bundled weights' worst input, a one-pixel checkerboard of black and white, gives -1.04 to 1.72 with
    12 % of the values outside [-0.5, 1.5]: a sharp edge, not broken weights."""
    rng = np.random.default_rng(0)
    core = tile(rng, 0.12, -1.04, 1.72)
    assert looks_suspicious((0, int((core >= -0.5).sum()), int((core <= 1.5).sum())), core.size)
    check_model_output(core, 0, "default")
    core.reshape(-1)[:3] = 5.0  # a few stray values: not a block
    check_model_output(core, 0, "default")


@pytest.mark.parametrize("value, words", [(np.nan, "not finite"), (60000.0, "saturated"), (-0.7, "saturated")])
def test_nan_overflow_and_a_tile_all_out_of_range_still_stop_the_run(value, words):
    core = np.full((3, 8, 8), value, np.float32)
    with pytest.raises(WeightsError, match=words):
        check_model_output(core, 0, None)


def test_a_usual_tile_is_not_looked_at_twice():
    assert not looks_suspicious((0, 300, 300), 300)
    assert looks_suspicious((0, 299, 300), 300) and looks_suspicious((1, 300, 300), 300)
