"""Plan cache: the directory name hashes everything that makes a plan valid; stale plans are never used, valid
ones never rebuilt; the manifest is readable and complete."""

from __future__ import annotations

import json
import shutil

import numpy as np
import onnx
import pytest

from tests.plan.toy_graphs import edvr_like
from vsr.errors import BackendError, InputError
from vsr.plan.plan import PlanCache, SubgraphPlan, plan_key, write_plan


@pytest.fixture
def model_path(tmp_path):
    p = tmp_path / "m.onnx"
    onnx.save(edvr_like(), str(p))
    return p


def test_manifest_is_readable_and_lists_steps_tensors_and_files(model_path, tmp_path):
    write_plan(model_path, tmp_path / "plan")
    m = json.loads((tmp_path / "plan" / "manifest.json").read_text())
    assert m["key"]["bridge_ops"] == ["DeformConv", "DepthToSpace"] and m["key"]["precision"] == "fp32"
    assert m["key"]["model_sha256"] == plan_key(model_path).model_sha256
    assert [s["kind"] for s in m["steps"]].count("bridge") == 4
    for s in m["steps"]:
        for t in [t for t in s["inputs"] if t] + s["outputs"]:
            assert m["tensors"][t]["dtype"] == "float32" and m["tensors"][t]["shape"][0] == "N"
    assert set(m["files"]) == {s["file"] for s in m["steps"] if s["kind"] == "segment"} | {"constants.npz"}
    mem = m["memory_batch1_without_workspaces"]
    assert 0 < mem["arena_bytes"] <= mem["naive_bytes"]


def test_valid_plan_is_reused_and_not_rebuilt(model_path, tmp_path):
    cache = PlanCache(tmp_path / "plans")
    a = cache.get(model_path)
    mtime = (a.directory / "manifest.json").stat().st_mtime_ns
    b = PlanCache(tmp_path / "plans").get(model_path)
    assert a.directory == b.directory and cache.built == 1
    assert (b.directory / "manifest.json").stat().st_mtime_ns == mtime


def test_key_changes_with_everything_that_makes_a_plan_valid(model_path, tmp_path):
    base = plan_key(model_path)
    assert plan_key(model_path, bridge_ops=("DeformConv",)).digest != base.digest
    assert plan_key(model_path, backend_version="0.0.0").digest != base.digest
    assert plan_key(model_path, fuse_activations=False).digest != base.digest
    assert plan_key(model_path, bridge_ops=("DepthToSpace", "DeformConv")).digest == base.digest  # a set
    other = tmp_path / "other.onnx"
    onnx.save(edvr_like(seed=1), str(other))  # other weights
    assert plan_key(other).digest != base.digest
    bigger = tmp_path / "bigger.onnx"
    onnx.save(edvr_like(height=12), str(bigger))  # other bucket
    assert plan_key(bigger).bucket != base.bucket and plan_key(bigger).digest != base.digest


def test_changed_model_gets_a_new_plan(model_path, tmp_path):
    cache = PlanCache(tmp_path / "plans")
    a = cache.get(model_path)
    onnx.save(edvr_like(seed=5), str(model_path))  # same path, new content
    b = cache.get(model_path)
    assert a.directory != b.directory and cache.built == 2


def test_damaged_plan_is_rebuilt_not_used(model_path, tmp_path):
    cache = PlanCache(tmp_path / "plans")
    a = cache.get(model_path)
    seg = next(a.directory.glob("segment*.onnx"))
    seg.write_bytes(seg.read_bytes()[:-10])
    with pytest.raises(BackendError, match="does not match"):
        SubgraphPlan.load(a.directory)
    b = cache.get(model_path)
    assert cache.built == 2 and b.directory == a.directory
    SubgraphPlan.load(b.directory)  # verified again


def test_loaded_plan_equals_written_plan(model_path, tmp_path):
    w = write_plan(model_path, tmp_path / "p")
    r = SubgraphPlan.load(tmp_path / "p")
    assert [s.to_json() for s in r.steps] == [s.to_json() for s in w.steps]
    assert r.tensors == w.tensors
    assert set(r.constants) == set(w.constants)
    for k in w.constants:
        np.testing.assert_array_equal(r.constants[k], w.constants[k])


def test_bad_inputs_are_user_errors(tmp_path):
    with pytest.raises(InputError, match="no such"):
        write_plan(tmp_path / "missing.onnx", tmp_path / "p")
    (tmp_path / "junk.onnx").write_bytes(b"not onnx")
    with pytest.raises(InputError, match="not a readable"):
        write_plan(tmp_path / "junk.onnx", tmp_path / "p")
    shutil.rmtree(tmp_path / "p", ignore_errors=True)
