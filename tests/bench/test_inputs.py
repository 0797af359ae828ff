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


def test_a_folder_of_jpeg_frames_is_an_input_and_said_so(tmp_path):
    """``--input`` takes any folder of frames (its help and docs/cli.md said "PNG folder"); the source that reads
    one is named for what it is, FrameFolderSource, its old name an alias."""
    from pathlib import Path

    from tests.video.test_frame_folders import frames_of
    from vsr.cli import build_parser
    from vsr.video import FrameFolderSource, PngFolderSource, open_source

    folder = frames_of(tmp_path / "f", ".jpg", 4)
    assert bench_input(str(folder), (16, 16), 2, 3).frames.shape == (4, 3, 16, 16)
    assert PngFolderSource is FrameFolderSource and isinstance(open_source(folder), FrameFolderSource)
    bench = build_parser()._subparsers._group_actions[0].choices["bench"]
    said = [a.help for a in bench._actions if "--input" in a.option_strings][0]
    row = next(line for line in (Path(__file__).parents[2] / "docs" / "cli.md").read_text().splitlines()
               if line.startswith("| `vsr bench"))
    assert "PNG folder" not in said + row and "folder of frames" in said and "folder of frames" in row
