"""int8 subgraph plans: the cache key covers precision and the quantization parameters; the plan runs with the
bridge kernels and stays close to the fp32 plan; the manifest lists the convs kept in fp32 by sensitivity."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from tests.plan.toy_graphs import edvr_like
from tests.quant.int8_graphs import rel_rms
from vsr.plan.executor import PlanExecutor
from vsr.plan.plan import PlanCache, plan_key
from vsr.plan.segments import OrtSegmentBackend
from vsr.quant import Int8SegmentBackend, QuantConfig, int8_plan_transform

TOLERANCE = 0.05  # relative RMS of the output: two DCNs and six int8 convs of 8 channels, random weights


@pytest.fixture
def model_path(tmp_path):
    p = tmp_path / "m.onnx"
    onnx.save(edvr_like(height=16, width=12), str(p))
    return p


def test_cache_key_covers_precision_and_quantization(model_path):
    fp32 = plan_key(model_path)
    a = plan_key(model_path, precision="int8", quant=QuantConfig().digest)
    b = plan_key(model_path, precision="int8", quant=QuantConfig(keep_fp32=0.3).digest)
    assert len({fp32.digest, a.digest, b.digest}) == 3
    assert "quant" not in fp32.fields()  # fp32 plans keep the digests they had
    assert QuantConfig().digest != QuantConfig(windows=3).digest


def test_int8_plan_runs_close_to_fp32_and_lists_fp32_convs(model_path, tmp_path):
    cache = PlanCache(tmp_path / "plans")
    cfg = QuantConfig(keep_fp32=0.2)
    kw = dict(precision="int8", quant=cfg.digest, transform=int8_plan_transform(cfg, threads=1))
    p8 = cache.get(model_path, **kw)
    p32 = cache.get(model_path)
    assert cache.get(model_path, **kw).directory == p8.directory and cache.built == 2  # reused, not rebuilt
    manifest = json.loads((p8.directory / "manifest.json").read_text())
    kept = manifest["quant"]["fp32_convs"]
    assert len(kept) == 2 and all("sqnr_db" in k for k in kept)  # ceil(0.2 * 8 convs)
    ops = [n.op_type for f in p8.directory.glob("segment*.onnx") for n in onnx.load(str(f)).graph.node]
    assert ops.count("QLinearConv") == 6 and ops.count("Conv") == 2
    x = np.random.default_rng(4).random((1, 3, 16, 12), dtype=np.float32)
    ref = PlanExecutor(p32, OrtSegmentBackend(threads=1)).run({"x": x})
    out = PlanExecutor(p8, Int8SegmentBackend(threads=1)).run({"x": x})
    name = p32.outputs[0]
    assert rel_rms(out[name], ref[name]) < TOLERANCE


def test_a_plan_that_keeps_no_conv_in_fp32_calibrates_ranges_alone(model_path, tmp_path):
    """Each conv's sensitivity is measured only where it chooses convs for fp32: the default plan (none) runs the
    ranges' pass alone, on a probe without shadow convs -- the same ranges, the same segments."""
    from vsr.plan.plan import write_plan
    from vsr.quant.calibrate import calibrate_plan
    from vsr.quant.config import calibration_windows

    plan = write_plan(model_path, tmp_path / "fp32")
    windows = calibration_windows(QuantConfig(), None, 16, 12)
    both = calibrate_plan(plan, windows, threads=1)
    ranges = calibrate_plan(plan, windows, threads=1, sqnr=False)
    assert [(s.node, s.x_range, s.y_range) for s in ranges] == [(s.node, s.x_range, s.y_range) for s in both]
    assert all(np.isfinite(s.sqnr_db) for s in both) and all(np.isnan(s.sqnr_db) for s in ranges)

    import vsr.quant.int8_plan as int8_plan

    def build(folder):
        cfg = QuantConfig()
        p8 = PlanCache(folder).get(model_path, precision="int8", quant=cfg.digest,
                                   transform=int8_plan_transform(cfg, threads=1))
        return p8.directory, json.loads((p8.directory / "quant.json").read_text())

    ranged, ranged_quant = build(tmp_path / "ranges")
    with pytest.MonkeyPatch.context() as mp:  # the sensitivity pass forced, as every plan ran it before
        mp.setattr(int8_plan, "calibrate_plan", lambda *a, **kw: calibrate_plan(*a, **(kw | {"sqnr": True})))
        measured, measured_quant = build(tmp_path / "both")
    assert "sensitivity_sqnr_db" not in ranged_quant and len(measured_quant["sensitivity_sqnr_db"]) == 8
    assert ranged_quant["tensors"] == measured_quant["tensors"]
    segments = sorted(f.name for f in ranged.glob("segment*.onnx"))
    assert segments and all((ranged / f).read_bytes() == (measured / f).read_bytes() for f in segments)


def test_synthetic_calibration_frames_drift_and_have_hard_edges():
    from vsr.quant.config import synthetic_frames

    f = synthetic_frames(2, 60, 80)
    assert f.shape == (2, 3, 60, 80) and f.dtype == np.float32 and f.min() >= 0.0 and f.max() <= 1.0
    np.testing.assert_array_equal(f[1][:, :-1, :-1], f[0][:, 1:, 1:])  # one pixel of drift per frame
    # steps of more than half the range between neighbours: what smooth fields alone never had
    assert (np.abs(np.diff(f[0], axis=2)) > 0.5).mean() > 0.002
