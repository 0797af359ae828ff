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


def _get(cache, model_path):
    import warnings

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        plan = cache.get(model_path)
    return plan, [str(w.message) for w in seen]


@pytest.mark.parametrize("damage", ["no steps", "not an object", "constants"])
def test_a_plan_with_an_incomplete_manifest_or_constants_is_rebuilt_with_one_warning(model_path, tmp_path, damage):
    """A manifest that parses but lacks a key was a KeyError traceback mid-run; the same for a manifest that
    is a list, or constants.npz cut short where the manifest no longer lists it."""
    cache = PlanCache(tmp_path / "plans")
    a = cache.get(model_path)
    manifest = a.directory / "manifest.json"
    m = json.loads(manifest.read_text())
    if damage == "no steps":
        del m["steps"]
    elif damage == "constants":
        del m["files"]["constants.npz"]
        (a.directory / "constants.npz").write_bytes(b"PK\x03\x04cut")
    manifest.write_text(json.dumps([m] if damage == "not an object" else m))
    b, said = _get(cache, model_path)
    assert cache.built == 2 and b.directory == a.directory and len(said) == 1 and "building it again" in said[0]
    assert SubgraphPlan.load(b.directory).steps


def test_a_plans_folder_others_can_write_is_refused_in_one_line(model_path, tmp_path):
    root = tmp_path / "plans"
    PlanCache(root).get(model_path)
    root.chmod(0o777)
    with pytest.raises(InputError, match=r"will not keep cached split plans in .*plans: other users can write to "
                                         r"it \(mode 777\)"):
        PlanCache(root).get(model_path)
    assert (tmp_path / "new").exists() is False
    PlanCache(tmp_path / "new").get(model_path)
    assert (tmp_path / "new").stat().st_mode & 0o777 == 0o700


def test_a_plan_folder_others_can_write_or_a_link_is_not_used(model_path, tmp_path):
    """A plan folder whose name is the key was used as found: through a link to anywhere, or writable by all."""
    cache = PlanCache(tmp_path / "plans")
    a = cache.get(model_path)
    a.directory.chmod(0o777)
    b, said = _get(cache, model_path)
    assert cache.built == 2 and len(said) == 1 and "(other users can write to it (mode 777))" in said[0]
    assert b.directory.stat().st_mode & 0o777 == 0o700
    elsewhere = tmp_path / "elsewhere"
    b.directory.rename(elsewhere)
    b.directory.symlink_to(elsewhere)
    c, said = _get(cache, model_path)
    assert cache.built == 3 and len(said) == 1 and "(it is a symbolic link)" in said[0]
    assert not c.directory.is_symlink() and (elsewhere / "manifest.json").is_file()  # the target left alone


def test_a_plan_folder_of_another_user_is_not_used(model_path, tmp_path, monkeypatch):
    """No chown here: the check is given another user id as this process's own once the folders exist."""
    import os

    cache = PlanCache(tmp_path / "plans")
    a = cache.get(model_path)
    me = os.geteuid()
    monkeypatch.setattr("vsr.plan.plan.private_folder", lambda path, *a, **k: path)
    monkeypatch.setattr("vsr.files.os.geteuid", lambda: me + 1)
    assert PlanCache._cached(a.directory, plan_key(model_path)) == (None, f"is not yours alone (it belongs to "
                                                                         f"user {me})")


def test_the_key_covers_onnx_and_the_code_that_writes_plans(model_path, monkeypatch):
    from vsr.plan import plan as plan_module

    base = plan_key(model_path)
    monkeypatch.setattr(onnx, "__version__", "0.0.1")
    plan_module.plan_tools.cache_clear()
    assert plan_key(model_path).digest != base.digest
    monkeypatch.undo()
    plan_module.plan_tools.cache_clear()
    assert plan_key(model_path).digest == base.digest
    assert plan_key(model_path, quant="q").tools != base.tools  # int8: its rewrite's code too


def _aged(path, days: float):
    import os
    import time

    t = time.time() - days * 86400
    os.utime(path, (t, t), follow_symlinks=False)
    return path


def test_a_new_plan_removes_the_model_s_plans_no_run_used_for_a_week(model_path, tmp_path):
    """Every key change (a new export of the model, onnx or ONNX Runtime upgraded, vsr's plan code) left the
    earlier plan folder (tens of MB) in the cache for good.  Building one now removes, whole, the plans of the
    same model (the export's config and size, any key; or the same file) that no run used for UNUSED_DAYS."""
    import os
    import time

    exports = tmp_path / "onnx"
    exports.mkdir()

    def export(key: str, seed: int, size: str = "8x6"):
        p = exports / f"edvr-{size}-{key * 20}.onnx"
        onnx.save(edvr_like(seed=seed), str(p))
        return p

    cache = PlanCache(tmp_path / "plans")
    old, recent = cache.get(export("0", 1)).directory, cache.get(export("1", 2)).directory
    size = cache.get(export("0", 4, "8x7")).directory  # another size (its name says so)
    file = cache.get(model_path).directory  # another model: a file outside the export cache
    for d, days in ((old, 8), (recent, 6), (size, 8), (file, 8)):  # (UNUSED_DAYS is 7)
        _aged(d, days)
    third = cache.get(export("2", 3))
    assert cache.built == 5 and not os.path.lexists(old)
    assert all(SubgraphPlan.load(d).steps for d in (recent, size, file))
    assert sorted(os.listdir(cache.root)) == sorted(d.name for d in (recent, size, file, third.directory))
    _aged(third.directory, 8)
    assert cache.get(export("2", 3)).directory == third.directory and cache.built == 5
    assert time.time() - third.directory.stat().st_mtime < 60  # used: marked so
    onnx.save(edvr_like(seed=5), str(model_path))  # the same file, new content: its earlier plan goes
    cache.get(model_path)
    assert cache.built == 6 and not os.path.lexists(file) and recent.is_dir() and third.directory.is_dir()


def test_a_new_plan_removes_build_folders_a_killed_build_left_a_day_ago(model_path, tmp_path):
    """A build killed outright (SIGKILL, power loss, the OOM killer) left its hidden ``.<digest>.<random>``
    folder (tens of MB) in the plans folder for good.  The next build removes those not written for a day;
    a fresh one (another machine's build in progress) and anything else of that folder are kept."""
    import os
    import subprocess
    import sys
    import time

    root = tmp_path / "plans"
    script = ("import sys, time, vsr.plan.plan as p\n"
              "w = p.write_plan\n"
              "def stuck(*a, **k):\n    w(*a, **k); print('built', flush=True); time.sleep(600)\n"
              "p.write_plan = stuck\np.PlanCache(sys.argv[1]).get(sys.argv[2])\n")
    other = tmp_path / "other.onnx"
    onnx.save(edvr_like(seed=7), str(other))
    killed = subprocess.Popen([sys.executable, "-c", script, str(root), str(other)], stdout=subprocess.PIPE)
    try:
        assert killed.stdout.readline() == b"built\n"
    finally:
        killed.kill()
        killed.wait()
    [left] = os.listdir(root)
    assert left.startswith(".") and (root / left / "manifest.json").is_file()
    (root / left / "link").symlink_to(model_path)  # (inside: unlinked, never followed)
    fresh = root / f".{'f' * 24}.abcd_123"
    fresh.mkdir()
    like = [root / ".notaplan.abcdefgh", root / f".{'e' * 24}.abcdefgh"]  # not a build's name; a file
    like[0].mkdir()
    like[1].write_bytes(b"x")
    for p in (root / left, *like):
        _aged(p, 1.5)
    plan = PlanCache(root).get(model_path)
    assert sorted(os.listdir(root)) == sorted([plan.directory.name, fresh.name, *(p.name for p in like)])
    assert model_path.is_file()
    _aged(fresh, 1.5)
    shutil.rmtree(plan.directory)
    PlanCache(root).get(model_path)
    assert not fresh.exists() and time.time() - plan.directory.stat().st_mtime < 60
