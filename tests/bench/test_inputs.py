"""The frames ``vsr bench`` runs on by default: the Big Buck Bunny clip of the project's data, found where
``VSR_DATA`` says as ``vsr train`` and the tests find it (bench looked only beside the checkout)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from vsr.bench.inputs import DEFAULT_CLIP, bench_input


def test_the_default_clip_is_found_in_vsr_data(tmp_path, monkeypatch):
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        pytest.skip("needs ffmpeg")
    clip = tmp_path / "data" / DEFAULT_CLIP
    clip.parent.mkdir(parents=True)
    subprocess.run([ffmpeg, "-v", "error", "-f", "lavfi", "-i", "testsrc2=s=32x24:r=30", "-frames:v", "4", "-c:v",
                    "libvpx-vp9", str(clip)], check=True)
    monkeypatch.setenv("VSR_DATA", str(tmp_path / "data"))
    frames = bench_input(None, (16, 16), 2, 3)
    assert frames.source.startswith(str(clip)) and frames.frames.shape == (4, 3, 16, 16)
    monkeypatch.setenv("VSR_DATA", str(tmp_path / "elsewhere"))  # no clip there: seeded random frames
    assert bench_input(None, (16, 16), 2, 3).source == "random (seed 0)"
