"""EDVR through the split plan equals the whole exported graph on ONNX Runtime (max abs <= 1e-4).

Every configuration is exported with seeded random weights (DCN offsets that really move samples, also off the
image) at small sizes; exports are the slow part (~10-60 s each on the shared 2-core machine).
"""

from __future__ import annotations

import warnings

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.plan.arena_checks import check_no_overlap
from vsr.backends import BucketPolicy, OrtOptions, SplitOptions, open_backend
from vsr.backends.split import SplitBackend
from vsr.errors import InputError
from vsr.plan.executor import PlanExecutor
from vsr.plan.plan import PlanCache
from vsr.plan.segments import OrtSegmentBackend

TOL = 1e-4


@pytest.fixture(scope="session")
def export(tmp_path_factory):
    """``export(config, h, w) -> path`` of a seeded random-weight export, made once per session."""
    from vsr.export.onnx import export_onnx
    from vsr.model import load_model

    root = tmp_path_factory.mktemp("exports")
    models, paths = {}, {}

    def get(name: str, h: int, w: int):
        if (name, h, w) not in paths:
            if name not in models:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    models[name] = load_model("random", name, seed=3)
            model, cfg = models[name]
            paths[(name, h, w)] = export_onnx(model, cfg, root / f"{name}-{h}x{w}.onnx", h, w)
        return paths[(name, h, w)], models[name][1]

    return get


def whole(path, x):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, {"lr": x})[0]


CASES = [("edvr-tiny", 16, 16), ("edvr-tiny", 32, 20), ("edvr-m", 16, 16), ("edvr-m", 32, 20),
         ("edvr-m-wotsa", 16, 16), ("edvr-l", 16, 16), ("edvr-l-7f", 16, 16)]


@pytest.mark.slow
@pytest.mark.parametrize("name,h,w", CASES, ids=[f"{n}-{h}x{w}" for n, h, w in CASES])
def test_split_equals_whole_for_every_configuration(export, tmp_path, name, h, w):
    path, cfg = export(name, h, w)
    plan = PlanCache(tmp_path).get(path)
    kinds = [s.op_type or "segment" for s in plan.steps]
    assert kinds.count("DeformConv") == 4 and kinds.count("DepthToSpace") == 2
    assert len(plan.steps) == 13  # 7 segments around 6 bridges
    ex = PlanExecutor(plan, OrtSegmentBackend(threads=2))
    x = np.random.default_rng(0).random((2, cfg.num_frame, 3, h, w), dtype=np.float32)
    got = ex.run({"lr": x})["hr"]
    want = whole(path, x)
    assert got.shape == want.shape == (2, 3, 4 * h, 4 * w)
    assert np.abs(got - want).max() <= TOL
    bound = ex.bind({"lr": x.shape})
    check_no_overlap(bound.memory)
    assert bound.memory.arena_nbytes < bound.memory.naive_nbytes
    assert set(ex.timings()) == {s.name for s in plan.steps} and all(v > 0 for v in ex.timings().values())


@pytest.mark.slow
@pytest.mark.parametrize("name,h,w", [("edvr-tiny", 16, 16), ("edvr-tiny", 32, 20), ("edvr-m", 16, 16)])
def test_the_cpu_plan_runs_conv_last_on_the_narrow_conv_kernel_with_outputs_unchanged(export, tmp_path, name, h, w):
    # the split backend's default plan (CPU_BRIDGE_OPS) against the plan of before (DEFAULT_BRIDGE_OPS), which
    # leaves conv_last to ONNX Runtime: only conv_last's summation order differs, so 1e-5 (outputs are O(1))
    from vsr.plan.partition import CPU_BRIDGE_OPS, DEFAULT_BRIDGE_OPS

    path, cfg = export(name, h, w)
    cache = PlanCache(tmp_path)
    new, old = cache.get(path, bridge_ops=CPU_BRIDGE_OPS), cache.get(path, bridge_ops=DEFAULT_BRIDGE_OPS)
    assert new.directory != old.directory and cache.built == 2  # another layout, another key
    [narrow] = [s for s in new.steps if s.op_type == "NarrowConv"]
    assert narrow.constants[1] == "conv_last.weight" and new.constants["conv_last.weight"].shape == (3, 64, 3, 3)
    x = np.random.default_rng(0).random((2, cfg.num_frame, 3, h, w), dtype=np.float32)
    got = PlanExecutor(new, OrtSegmentBackend(threads=2)).run({"lr": x})["hr"]
    before = PlanExecutor(old, OrtSegmentBackend(threads=2)).run({"lr": x})["hr"]
    assert np.abs(got - before).max() <= 1e-5
    assert np.abs(got - whole(path, x)).max() <= TOL


@pytest.fixture(scope="session")
def tiny_split(export, tmp_path_factory):
    """SplitBackend for edvr-tiny with two buckets (8x8, 16x16); plans cached in a temp dir."""
    from vsr.model import load_config

    cfg = load_config("edvr-tiny")
    calls = []

    def exporter(h, w):
        calls.append((h, w))
        return export("edvr-tiny", h, w)[0]

    be = SplitBackend(exporter, cfg, SplitOptions(threads=2, cache_dir=str(tmp_path_factory.mktemp("plans")),
                                                  buckets=BucketPolicy(sizes=((8, 8), (16, 16)))))
    return be, calls


def pad_like_bucket(x, hb, wb):
    h, w = x.shape[-2:]
    mode = "reflect" if hb - h < h and wb - w < w else "edge"
    return np.pad(x, [(0, 0)] * 3 + [(0, hb - h), (0, wb - w)], mode=mode)


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(n=st.integers(1, 3), h=st.integers(1, 16), w=st.integers(1, 16), seed=st.integers(0, 100))
def test_split_backend_equals_whole_graph_for_random_shapes(export, tiny_split, n, h, w, seed):
    be, _ = tiny_split
    x = np.random.default_rng(seed).random((n, 3, 3, h, w), dtype=np.float32)
    got = be.infer(x)
    hb, wb = be.bucket(h, w)
    assert (hb, wb) in ((8, 8), (16, 16))
    want = whole(export("edvr-tiny", hb, wb)[0], pad_like_bucket(x, hb, wb))[:, :, :4 * h, :4 * w]
    assert got.shape == (n, 3, 4 * h, 4 * w)
    assert np.abs(got - want).max() <= TOL


@pytest.mark.slow
def test_split_backend_builds_each_bucket_once_and_reports_step_timings(tiny_split):
    be, calls = tiny_split
    x = np.random.default_rng(1).random((1, 3, 3, 5, 7), dtype=np.float32)
    be.infer(x)
    be.infer(x[:, :, :, :4, :4])  # same bucket (8x8)
    assert calls.count((8, 8)) == 1
    t = be.timings()
    assert {"bridge00_DeformConv", "bridge05_DepthToSpace", "segment00", "segment06", "pad", "crop"} <= set(t)
    assert t["segment00"] > 0 and t["bridge00_DeformConv"] > 0
    assert be.name == "ort-split" and be.padding == "reflection_circle"
    assert be.num_frame == 3 and be.scale == 4 and be.input_spec().shape[1] == 3
    assert be.output_spec().shape == ("N", 3, "4H", "4W")


@pytest.mark.slow
def test_prepare_builds_the_bucket_before_the_first_frame(tiny_split):
    be, calls = tiny_split
    be.prepare(10, 12, 2)  # bucket 16x16
    built = dict(be.timings())
    assert calls.count((16, 16)) == 1 and built["build:plan"] > 0
    be.prepare(16, 16, 2)  # idempotent
    assert calls.count((16, 16)) == 1
    be.infer(np.zeros((2, 3, 3, 10, 12), np.float32))
    after = be.timings()
    assert after["build:export"] == built["build:export"] and after["build:plan"] == built["build:plan"]
    assert after["build:load"] == built["build:load"]


@pytest.mark.slow
def test_fixed_onnx_file_is_one_bucket(export, tmp_path):
    path, cfg = export("edvr-tiny", 16, 16)
    be = SplitBackend(path, cfg, SplitOptions(threads=2, cache_dir=str(tmp_path)))
    assert be.bucket(3, 9) == (16, 16)
    with pytest.raises(InputError, match="do not fit"):
        be.infer(np.zeros((1, 3, 3, 20, 16), np.float32))
    with pytest.raises(InputError, match="expected"):
        be.infer(np.zeros((1, 5, 3, 8, 8), np.float32))


@pytest.mark.slow
def test_open_backend_split_equals_whole(tmp_path, monkeypatch):
    """Through the entry point: same export cache, same bucket and padding as the whole-graph backend."""
    monkeypatch.setenv("VSR_ENGINE_DIR", str(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        split = open_backend("random", "edvr-tiny", SplitOptions(threads=2))
        whole_be = open_backend("random", "edvr-tiny", OrtOptions(threads=2))
    x = np.random.default_rng(4).random((2, 3, 3, 14, 18), dtype=np.float32)
    got = split.infer(x)
    assert isinstance(split, SplitBackend) and got.shape == (2, 3, 56, 72)
    assert np.abs(got - whole_be.infer(x)).max() <= TOL
    assert len(list((tmp_path / "plans").iterdir())) == 1
