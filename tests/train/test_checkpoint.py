"""Checkpoint files are written atomically."""

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
