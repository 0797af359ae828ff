"""A file or folder name that is not UTF-8 (bytes a Linux file system allows: a Latin-1 ``é``): OpenCV, handed
such a name as ``str``, crashed the process (segmentation fault, no message, exit 139) for a folder of PNG frames
given to ``vsr upscale``, ``vsr eval``, ``vsr train`` or as int8 calibration.  Every reader is run in a process
of its own, so that a crash fails the test rather than the test run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
NAME = os.fsdecode(b"caf\xe9")  # 'caf\udce9': a lone surrogate in Python's str

READERS = {  # code that reads the folder ``d``, and what it prints
    "png folder": ("from vsr.video.frame_source import FrameFolderSource; s = FrameFolderSource(d); "
                   "print(sum(1 for _ in s.frames()))", "2"),
    "eval": ("from vsr.quality.evaluate import read_rgb; print(read_rgb(d / '002.png').shape)", "(16, 24, 3)"),
    "train": ("from vsr.train.data import read_image; print(read_image(d / '002.png').shape)", "(16, 24, 3)"),
    "blockiness": ("from vsr.video.compression import measure_png_folder; "
                   "print(measure_png_folder(sorted(d.glob('*.png'))).frames)", "1"),
}


@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_frame_under_a_name_that_is_not_utf8_is_read(tmp_path, reader):
    folder = tmp_path / NAME
    folder.mkdir()
    for i in range(1, 3):
        noise = np.random.default_rng(i).integers(0, 256, (16, 24, 3), np.uint8)  # (detail: blockiness measures it)
        cv2.imwrite(str(tmp_path / "x.png"), noise)
        os.replace(tmp_path / "x.png", folder / f"{i:03d}.png")
    read, said = READERS[reader]
    code = f"import os; from pathlib import Path; d = Path(os.fsdecode({os.fsencode(folder)!r})); {read}"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == said
