"""Checkpoint files are written atomically, never through a link planted in the run folder."""

from __future__ import annotations

import pytest
import torch

from vsr.train.checkpoint import save_checkpoint


def test_a_failed_save_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "latest.pth"
    save_checkpoint({"params": {"w": torch.ones(2)}}, path)
    with pytest.raises(Exception):
        save_checkpoint({"params": {"w": torch.zeros(2)}, "bad": lambda: 0}, path)  # lambdas do not pickle
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest.pth"]
    assert torch.equal(torch.load(path, weights_only=True)["params"]["w"], torch.ones(2))


def _planted(tmp_path, *names):
    """A file of this user's, and links to it at ``names`` in ``tmp_path/run`` (another user of a shared run
    folder plants them)."""
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    run = tmp_path / "run"
    run.mkdir()
    for name in names:
        (run / name).symlink_to(victim)
    return run, victim


def test_a_link_planted_at_the_checkpoints_temporary_is_not_written_through(tmp_path):
    run, victim = _planted(tmp_path, "latest.tmp")
    save_checkpoint({"params": {"w": torch.ones(2)}}, run / "latest.pth")
    assert victim.read_text() == "keep me\n"
    assert torch.equal(torch.load(run / "latest.pth", weights_only=True)["params"]["w"], torch.ones(2))
    assert sorted(p.name for p in run.iterdir()) == ["latest.pth"]


def test_a_link_planted_at_the_qat_temporary_or_the_log_is_not_written_through(tmp_path):
    import json
    from types import SimpleNamespace

    from vsr.train.trainer import Trainer, _write_json

    run, victim = _planted(tmp_path, ".qat.json.part", "log.jsonl")
    _write_json(run / "qat.json", {"scale": 1})
    assert json.loads((run / "qat.json").read_text()) == {"scale": 1}
    with pytest.raises(OSError):  # (one line from the CLI, as any OSError)
        Trainer._log(SimpleNamespace(dir=run), {"event": "start"})
    assert victim.read_text() == "keep me\n"


def test_ship_writes_its_record_not_through_a_link_planted_beside_the_weights(tmp_path):
    from vsr.train.ship import ship

    run, victim = _planted(tmp_path, "shipped.json")
    torch.save({"params": {"w": torch.ones(2)}, "params_ema": {"w": torch.ones(2)}, "vsr": {"config": "edvr-tiny"}},
               tmp_path / "latest.pth")
    # (the link is refused without overwrite)
    info = ship(tmp_path / "latest.pth", run / "shipped.pth", which="ema", overwrite=True)
    assert victim.read_text() == "keep me\n"
    assert not (run / "shipped.json").is_symlink() and str(info["sha256"]) in (run / "shipped.json").read_text()


def test_ship_to_a_folder_is_one_line_and_exit_2(tmp_path, capsys):
    """``python -m vsr.train.ship latest.pth --out DIR`` was a traceback (IsADirectoryError from os.replace)."""
    from vsr.train.ship import main

    torch.save({"params": {"w": torch.ones(2)}, "params_ema": {"w": torch.ones(2)}, "vsr": {"config": "edvr-tiny"}},
               tmp_path / "latest.pth")
    (tmp_path / "weights").mkdir()
    assert main([str(tmp_path / "latest.pth"), "--out", str(tmp_path / "weights")]) == 2
    err = capsys.readouterr().err
    assert err == f"vsr: error: cannot write {tmp_path / 'weights'}: Is a directory\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest.pth", "weights"]
