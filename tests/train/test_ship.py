"""``python -m vsr.train.ship``: an existing output is replaced only with ``--overwrite``, and a stop between the
weights and their record never leaves a record whose sha256 is another file's (the default weights would then
fail to load: vsr broken out of the box)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest
import torch

from vsr.files import sha256_file

# The child sends itself SIGINT right after the weights are renamed into place: before the record, in the old code.
STOP_AFTER_THE_WEIGHTS = """
import os, signal, sys
real = os.replace
def replace(src, dst, *args, **kwargs):
    real(src, dst, *args, **kwargs)
    if str(dst).endswith(".pth"):
        os.kill(os.getpid(), signal.SIGINT)
os.replace = replace
from vsr.train.ship import main
sys.exit(main(sys.argv[1:]))
"""


def _checkpoint(path, value: float):
    w = {"w": torch.full((2,), value)}
    torch.save({"params": w, "params_ema": w, "vsr": {"config": "edvr-tiny"}}, path)
    return path


def _ship(argv):
    return subprocess.run([sys.executable, "-c", STOP_AFTER_THE_WEIGHTS, *argv], capture_output=True, text=True,
                          timeout=120, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


@pytest.mark.parametrize("existing", [False, True])
def test_a_stop_between_the_weights_and_their_record_leaves_a_matching_pair(tmp_path, existing):
    from vsr.train.ship import ship

    out = tmp_path / "w" / "default.pth"
    if existing:  # the bundled default, replaced (with --overwrite)
        ship(_checkpoint(tmp_path / "old.pth", 1.0), out)
    r = _ship([str(_checkpoint(tmp_path / "new.pth", 2.0)), "--out", str(out)] + ["--overwrite"] * existing)
    assert r.returncode == 130, r.stderr
    assert r.stderr == f"vsr: stopping once writing {out} and its record ends\nvsr: interrupted\n"
    record = json.loads(out.with_suffix(".json").read_text())
    assert record["sha256"] == sha256_file(out)  # the two renames both happened: the record is the weights'
    assert torch.equal(torch.load(out, weights_only=True)["params"]["w"], torch.full((2,), 2.0, dtype=torch.half))
    assert sorted(p.name for p in out.parent.iterdir()) == ["default.json", "default.pth"]  # no temporary left


def test_an_existing_output_is_refused_without_overwrite(tmp_path, capsys):
    from vsr.train.ship import main

    out = tmp_path / "default.pth"
    assert main([str(_checkpoint(tmp_path / "old.pth", 1.0)), "--out", str(out)]) == 0
    before = out.read_bytes(), out.with_suffix(".json").read_text()
    capsys.readouterr()
    assert main([str(_checkpoint(tmp_path / "new.pth", 2.0)), "--out", str(out)]) == 2
    assert capsys.readouterr().err == f"vsr: error: {out} exists (pass --overwrite to replace it)\n"
    assert (out.read_bytes(), out.with_suffix(".json").read_text()) == before
    out.unlink()  # a record left alone is refused too: it is replaced with the weights
    assert main([str(tmp_path / "new.pth"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == f"vsr: error: {out.with_suffix('.json')} exists (pass --overwrite to replace it)\n"
    assert main([str(tmp_path / "new.pth"), "--out", str(out), "--overwrite"]) == 0
    assert json.loads(out.with_suffix(".json").read_text())["sha256"] == sha256_file(out)


def test_weights_beside_another_files_record_are_one_line_naming_the_fix(tmp_path, monkeypatch):
    """What a shipping cut short by a kill (nothing defers SIGKILL) leaves: the loader's line said "reinstall vsr",
    which does not restore a source checkout's weights."""
    import vsr.model.weights as weights
    from vsr.errors import WeightsError
    from vsr.train.ship import ship

    bundled, other = tmp_path / "bundled" / "default.pth", tmp_path / "other" / "default.pth"
    ship(_checkpoint(tmp_path / "old.pth", 1.0), bundled)
    ship(_checkpoint(tmp_path / "new.pth", 2.0), other)
    bundled.write_bytes(other.read_bytes())  # the new weights beside the old record
    monkeypatch.setattr(weights, "WEIGHTS_DIR", bundled.parent)
    monkeypatch.setattr(weights, "source_checkout", lambda: True)  # vsr run from its git checkout
    with pytest.raises(WeightsError) as checkout:
        weights.check_digest("default", bundled)
    assert str(checkout.value).startswith(f"the bundled 'default' weights are damaged: {bundled} has sha256 ")
    assert str(checkout.value).endswith("restore them (git checkout -- vsr/weights) or ship them again "
                                        f"(python -m vsr.train.ship CHECKPOINT --out {bundled} --overwrite)")
    monkeypatch.setattr(weights, "source_checkout", lambda: False)  # an installed vsr
    with pytest.raises(WeightsError, match="; reinstall vsr$"):
        weights.check_digest("default", bundled)


# The child kills itself (SIGKILL: nothing defers it, no cleanup runs) right after its N-th rename.
KILL_AFTER_RENAME = """
import os, signal, sys
real, done = os.replace, [0]
def replace(src, dst, *args, **kwargs):
    real(src, dst, *args, **kwargs)
    done[0] += 1
    if done[0] == int(sys.argv[1]):
        os.kill(os.getpid(), signal.SIGKILL)
os.replace = replace
from vsr.train.ship import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("renames", [1, 2])
def test_a_kill_between_the_renames_leaves_a_pair_the_loader_accepts(tmp_path, monkeypatch, renames):
    """A kill -9 between the weights' rename and their record's left the new weights beside the old record: the
    bundled default failed to load ("damaged").  Now every state between the renames is a pair: the old weights
    or the new ones, each accepted by the loader's digest check."""
    import vsr.model.weights as weights
    from vsr.train.ship import ship

    out = tmp_path / "w" / "default.pth"
    ship(_checkpoint(tmp_path / "old.pth", 1.0), out)
    r = subprocess.run([sys.executable, "-c", KILL_AFTER_RENAME, str(renames),
                        str(_checkpoint(tmp_path / "new.pth", 2.0)), "--out", str(out), "--overwrite"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == -signal.SIGKILL, r.stderr
    monkeypatch.setattr(weights, "WEIGHTS_DIR", out.parent)
    weights.check_digest("default", out)  # no WeightsError: the pair is one the loader accepts
    value = torch.load(out, weights_only=True)["params"]["w"][0].item()
    assert value == (1.0 if renames == 1 else 2.0)  # the first rename is the record's: the old weights stay
    record = json.loads(out.with_suffix(".json").read_text())
    assert record["previous_sha256" if renames == 1 else "sha256"] == sha256_file(out)
    assert ship(tmp_path / "new.pth", out, overwrite=True)["sha256"] == sha256_file(out)  # and a new ship completes
    assert "previous_sha256" not in json.loads(out.with_suffix(".json").read_text())
    weights.check_digest("default", out)


def test_a_log_a_kill_left_half_written_is_read_up_to_that_line(tmp_path):
    """(a run killed as it wrote a log line, shipped without a resume since: a JSONDecodeError traceback)"""
    from vsr.train.ship import ship

    run = tmp_path / "run"
    run.mkdir()
    _checkpoint(run / "latest.pth", 1.0)
    (run / "log.jsonl").write_text('{"event": "start", "data": "1 images"}\n{"event": "train", "iteration": 10}\n'
                                   '{"event": "train", "itera')
    info = ship(run / "latest.pth", tmp_path / "w.pth")
    assert info["runs"] == [{"event": "start"}] and info["data"] == "1 images" and info["curve"] == []
