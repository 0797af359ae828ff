"""The bench's files are written under temporary names of the process's own and renamed together."""

from __future__ import annotations

import os

from vsr.bench.output import _write_all


def test_a_link_planted_at_a_temporary_name_is_replaced_not_written_through(tmp_path):
    target = tmp_path / "victim.txt"
    target.write_text("keep\n")
    out = tmp_path / "summary.json"
    (tmp_path / f".summary.json.vsr-partial-{os.getpid()}").symlink_to(target)  # (the bench failed: FileExistsError)
    _write_all({out: "{}\n"})
    assert out.read_text() == "{}\n" and not out.is_symlink() and target.read_text() == "keep\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json", "victim.txt"]
