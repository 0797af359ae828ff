"""Run-time int8 scales: a window's range is predicted from the windows before it (widest of the last ``memory``,
times ``margin``), a context starts at the calibration range times ``start``, a saturated code always means a
run again (never a kept output), a re-run leaves the tensor wider for a while, and tiles and scenes are followed
apart.  The table is driven here with the codes a range gives under its own scales, as a segment run would."""

from __future__ import annotations

import numpy as np
import pytest

from vsr.backends.base import FrameKeys
from vsr.backends.features import SceneFollower, keyless
from vsr.errors import BackendError, ConfigError
from vsr.quant.scales import ScaleRule, ScaleTable

RULE = ScaleRule(margin=1.25, start=2.0, memory=3, widen=4.0, passes=8)


def table(policy="runtime", rule=RULE) -> ScaleTable:
    t = ScaleTable(policy, rule)
    t.add("a", -1.0, 2.0, relu=False)
    return t


def codes(t: ScaleTable, lo: float, hi: float) -> tuple[list[int], list[int]]:
    s = t.tensors["a"]
    scale, zero = float(s.scale), int(s.zero)
    return [int(np.clip(round(hi / scale) + zero, 0, 255))], [int(np.clip(round(lo / scale) + zero, 0, 255))]


def window(t: ScaleTable, lo: float, hi: float) -> int:
    """One segment run on content of range ``[lo, hi]``, run again while the table asks; returns the passes."""
    passes = 1
    while t.after_run(["a"], *codes(t, lo, hi), passes):
        t.reruns += 1
        passes += 1
    return passes


def test_the_rule_is_read_from_its_config_and_checked(tmp_path):
    rule = ScaleRule.load()
    assert rule.margin >= 1 and rule.start > 0 and rule.memory >= 1
    bad = tmp_path / "scales.toml"
    bad.write_text("margin = 0.5\nstart = 2\nmemory = 4\nwiden = 4\npasses = 8\n")
    with pytest.raises(ConfigError, match="margin >= 1"):
        ScaleRule.load(bad)
    bad.write_text("margin = 1.5\n")
    with pytest.raises(ConfigError, match="malformed"):
        ScaleRule.load(bad)


def test_a_context_starts_at_the_calibration_range_times_start_static_at_the_calibration():
    assert (table().tensors["a"].lo, table().tensors["a"].hi) == (-2.0, 4.0)
    assert (table("static").tensors["a"].lo, table("static").tensors["a"].hi) == (-1.0, 2.0)


def test_the_prediction_is_the_widest_of_the_last_windows_times_the_margin():
    t = table()
    for hi in (3.0, 1.0, 1.0):
        assert window(t, -0.5, hi) == 1
    assert t.tensors["a"].hi == pytest.approx(3.0 * 1.25, rel=0.01)  # 3.0 is among the last 3 windows
    window(t, -0.5, 1.0)
    assert t.tensors["a"].hi == pytest.approx(1.0 * 1.25, rel=0.01)  # ... and now forgotten
    assert t.tensors["a"].lo == pytest.approx(-0.5 * 1.25, rel=0.02)


def test_a_saturated_code_always_runs_again_until_none_saturates():
    t = table()
    assert window(t, -0.5, 50.0) == 3  # 4.0 -> 16 -> 64: two re-runs, the output of the third kept
    assert t.reruns == 2 and t.passes == 3
    s = t.tensors["a"]
    assert s.hi == pytest.approx(50.0 * 1.25, rel=0.01)  # a first window's miss is the calibration's: no boost
    assert t.after_run(["a"], [255], [10], 1)  # a code at 255 is never kept
    assert t.after_run(["a"], [200], [0], 1) and s.zero > 0  # nor one at 0 where the range has negatives


def test_still_saturated_after_the_rule_s_passes_is_an_error_not_an_output():
    t = table(rule=ScaleRule(margin=1.25, start=2.0, memory=3, widen=4.0, passes=3))
    with pytest.raises(BackendError, match="still saturate after 3 runs"):
        window(t, -0.5, 1e9)


def test_a_rerun_keeps_the_tensor_wider_for_memory_windows():
    t = table()
    window(t, -0.5, 1.0)
    assert window(t, -0.5, 2.0) == 2  # predicted 1.25: short by 1.6
    boosted = t.tensors["a"].hi
    assert boosted == pytest.approx(2.0 * 1.25 * 1.6, rel=0.02)
    for _ in range(RULE.memory):
        window(t, -0.5, 1.0)
    assert t.tensors["a"].hi == pytest.approx(1.0 * 1.25, rel=0.01)  # the boost ran out with the 2.0 window


def test_warm_ups_learn_nothing_and_static_never_runs_again():
    t = table()
    t.held = True
    assert not t.after_run(["a"], [255], [0], 1) and t.passes == 0
    t.held = False
    s = table("static")
    assert not s.after_run(["a"], [255], [0], 1) and s.passes == 1


def test_exact_runs_a_loose_window_again_on_its_own_range():
    t = table("exact")
    assert window(t, -0.1, 0.2) == 2
    assert window(t, -0.1, 0.2) == 1  # a prediction that fits is not run again


def test_each_context_follows_its_own_ranges_and_a_new_scene_starts_over():
    t = table()
    t.select((0,))
    window(t, -0.5, 1.0)
    t.select((1,))
    assert t.tensors["a"].hi == 4.0  # tile 1 starts from the calibration x start, not from tile 0
    window(t, -0.1, 3.0)
    t.select((0,))
    assert t.tensors["a"].hi == pytest.approx(1.25, rel=0.03)  # measured in codes of 6/255
    t.select((0,), anew=True)
    assert t.tensors["a"].hi == 4.0


def keys(stream, frames, tiles=None):
    return FrameKeys(stream, tuple(tuple(f) for f in frames), tiles or (0,) * len(frames), keep_from=0)


def test_a_scene_cut_or_a_new_stream_starts_anew_continuing_windows_do_not():
    told = []
    f = SceneFollower(lambda ctx, anew: told.append((ctx, anew)))
    f.see(keys(1, [(2, 1, 0, 1, 2)]))
    f.see(keys(1, [(1, 0, 1, 2, 3)]))
    f.see(keys(1, [(6, 5, 4, 5, 6)]))  # a cut at 4: the window shares no frame with the one before
    f.see(keys(1, [(3, 4, 5, 6, 7)], (1,)))  # another tile's first call
    f.see(keys(2, [(3, 4, 5, 6, 7)]))  # another run
    f.see(keyless(1, 5))  # infer() without keys: no scene known, the context None goes on
    assert told == [((0,), True), ((0,), False), ((0,), True), ((1,), True), ((0,), True), (None, False)]


def test_a_fixed_zero_point_stays_and_the_scale_alone_follows_the_range():
    """Plans with the zero points as graph constants (ONNX Runtime's fast int8 convs): the scale covers the range
    on the side that needs more, the zero point never moves, and a saturated side still runs again (also from a
    range whose low end was 0)."""
    from vsr.quant.scales import u8_params

    assert u8_params(-1.0, 3.0, zero=64) == (pytest.approx(3.0 / 191), 64)
    assert u8_params(-2.0, 1.0, zero=64) == (pytest.approx(2.0 / 64), 64)
    t = ScaleTable("runtime", RULE)
    s = t.add("a", 0.0, 2.0, relu=False, zero=8)
    assert int(s.zero) == 8
    assert window(t, -3.0, 5.0) > 1  # both ends beyond the start range: run again until neither saturates
    assert int(s.zero) == 8 and s.lo <= -3.0 and s.hi >= 5.0
    assert window(t, -0.5, 1.0) == 1
