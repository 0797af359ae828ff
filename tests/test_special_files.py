"""A file that is not a regular one where vsr reads a small file or a frame: ``/dev/zero`` read until the
kernel's OOM killer stopped vsr (24 GB), a named pipe in a folder of PNG frames waited for ever for a writer and
no Ctrl-C could stop it.  Each is one line naming it, exit 2, at once (a test that hung would time out)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
TINY = ["--weights", "random", "--config", "edvr-tiny", "--backend", "torch", "--quiet"]


def vsr(cwd: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vsr", *map(str, args)], capture_output=True, text=True, cwd=cwd,
                          timeout=120, stdin=subprocess.DEVNULL)


@pytest.fixture
def frames(tmp_path) -> Path:
    folder = tmp_path / "frames"
    folder.mkdir()
    for i in range(1, 4):
        cv2.imwrite(str(folder / f"{i:03d}.png"), np.full((16, 24, 3), 40 * i, np.uint8))
    return folder


@pytest.mark.parametrize("kind, said", [("fifo", "is a named pipe, not a PNG frame"),
                                        ("zero", "is a character device, not a PNG frame")])
def test_a_special_file_among_png_frames(tmp_path, frames, kind, said):
    odd = frames / "004.png"
    os.mkfifo(odd) if kind == "fifo" else odd.symlink_to("/dev/zero")
    res = vsr(tmp_path, "upscale", frames, tmp_path / "o.mp4", *TINY)
    assert res.returncode == 2 and res.stderr.strip() == f"vsr: error: {odd} {said}", res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["frames"]
    res = vsr(tmp_path, "eval", "--gt", frames, *TINY[:6])  # (it skipped /dev/zero: "mean over 3 frames")
    assert res.returncode == 2 and f"{odd} {said}" in res.stderr, res.stderr


@pytest.mark.parametrize("command", [["report", "{odd}"], ["report", "{real}", "{odd}"],
                                     ["upscale", "{frames}", "{out}", *TINY, "--scene-cuts", "{odd}"],
                                     ["jobs", "add", "{odd}", "--store", "{store}"]])
@pytest.mark.parametrize("kind", ["zero", "fifo"])
def test_a_special_file_where_vsr_reads_a_small_file(tmp_path, frames, command, kind):
    odd = tmp_path / ("odd.toml" if "jobs" in command else "odd.json")
    os.mkfifo(odd) if kind == "fifo" else odd.symlink_to("/dev/zero")
    real = tmp_path / "r.json"
    if "{real}" in command:
        assert vsr(tmp_path, "upscale", frames, tmp_path / "r.mp4", *TINY, "--report", real).returncode == 0
    args = [a.format(odd=odd, real=real, frames=frames, out=tmp_path / "o.mp4", store=tmp_path / "q.db")
            for a in command]
    res = vsr(tmp_path, *args)
    what = "a named pipe" if kind == "fifo" else "a character device"
    assert res.returncode == 2 and res.stderr.startswith(f"vsr: error: {odd} is {what}, not a "), res.stderr
    assert len(res.stderr.splitlines()) == 1 and not (tmp_path / "o.mp4").exists()
