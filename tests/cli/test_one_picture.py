"""One picture in, one picture out: ``vsr upscale photo.jpg big.png`` upscales the photo as a one-frame folder of
frames and writes one PNG file (it was "big.png is the name of one picture, and vsr writes a video")."""

from __future__ import annotations

import shutil
import subprocess

import cv2
import numpy as np
import pytest

from tests.video.test_frame_folders import frames_of
from vsr.cli import main

TINY = ["--weights", "random", "--config", "edvr-tiny", "--threads", "1", "--quiet"]


def test_a_photo_becomes_one_png_upright(tmp_path, capsys):
    """A phone's portrait JPEG (orientation 6): the PNG is upright, as viewers show the photo, x4."""
    if shutil.which("exiftool") is None:
        pytest.skip("needs exiftool")
    photo = frames_of(tmp_path / "f", ".jpg", 1) / "0001.jpg"
    subprocess.run(["exiftool", "-q", "-overwrite_original", "-Orientation=6", "-n", str(photo)], check=True)
    out = tmp_path / "big.png"
    assert main(["upscale", str(photo), str(out), *TINY]) == 0, capsys.readouterr().err
    png = cv2.imread(str(out), cv2.IMREAD_UNCHANGED)
    assert out.read_bytes()[:4] == b"\x89PNG" and png.shape == (256, 192, 3) and png.dtype == np.uint8
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.png", "f"]  # (no temporary left)
    assert main(["upscale", str(photo), str(out), *TINY]) == 2  # an existing one: as a video's
    assert "output exists" in capsys.readouterr().err


def test_a_picture_to_another_picture_kind_is_one_line(tmp_path, capsys):
    photo = frames_of(tmp_path / "f", ".jpg", 1) / "0001.jpg"
    assert main(["upscale", str(photo), str(tmp_path / "big.jpg"), *TINY]) == 2
    assert capsys.readouterr().err == (f"vsr: error: {tmp_path / 'big.jpg'}: vsr writes one picture as PNG (give "
                                       f"big.png), or a video (.mp4, .mkv, ...)\n")


def test_a_video_to_a_png_is_still_refused(make_clip, tmp_path, capsys):
    src = make_clip("in.mp4", width=16, height=12, frames=2)
    assert main(["upscale", str(src), str(tmp_path / "big.png"), *TINY]) == 2
    assert "is the name of one picture (.png), and vsr writes a video" in capsys.readouterr().err


def test_a_job_of_a_picture_to_a_png_is_refused(tmp_path, capsys):
    """A job's chunks are video: its .png output was queued, then written by a video muxer."""
    photo = frames_of(tmp_path / "f", ".jpg", 1) / "0001.jpg"
    assert main(["jobs", "add", str(photo), "--out-dir", str(tmp_path / "o"), "--ext", "png", "--store",
                 str(tmp_path / "q.db"), *TINY[:4]]) == 2
    assert capsys.readouterr().err == (f"vsr: error: {tmp_path / 'o' / '0001.png'}: a job writes a video; upscale "
                                       f"the picture {photo} with vsr upscale\n")
