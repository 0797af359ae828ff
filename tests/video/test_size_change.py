"""A stream that changes its size or pixel format part-way (broadcast SD/HD programmes, MPEG-TS files joined end
to end) is upscaled at its first frame's size, the later frames scaled to it as ffmpeg does, said once; it used
to end in a traceback from the first stage that met two sizes."""

from __future__ import annotations

import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from vsr.video import open_source

REPO = Path(__file__).resolve().parents[2]
TINY = ["--weights", "random", "--config", "edvr-tiny", "--backend", "torch", "--threads", "1", "--quiet"]


def joined(tmp_path: Path, *parts: tuple[str, str]) -> Path:
    """MPEG-TS parts (size, pixel format) of 10 frames each, joined byte for byte."""
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        pytest.skip("needs ffmpeg")
    data = b""
    for i, (size, pix) in enumerate(parts):
        part = tmp_path / f"part{i}.ts"
        subprocess.run([ffmpeg, "-v", "error", "-f", "lavfi", "-i", f"testsrc2=size={size}:rate=25", "-frames:v",
                        "10", "-c:v", "libx264", "-pix_fmt", pix, str(part)], check=True)
        data += part.read_bytes()
    out = tmp_path / "joined.ts"
    out.write_bytes(data)
    return out


def test_later_frames_come_at_the_first_size_and_format(tmp_path):
    src = joined(tmp_path, ("64x48", "yuv420p"), ("80x64", "yuv420p"), ("64x48", "yuv444p"))
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        source = open_source(src)
        try:
            frames = list(source.frames())
        finally:
            source.close()
    assert len(frames) == 30 and {f.rgb.shape for f in frames} == {(3, 48, 64)}
    assert np.isfinite(np.stack([f.rgb for f in frames])).all()
    lines = [str(w.message) for w in said if "scaled to" in str(w.message)]
    assert len(lines) == 1 and "frame 10 is 80x64 yuv420p, not 64x48 yuv420p" in lines[0]
    # the scaled frames are the source's picture, not noise: the same test pattern at the same place
    assert np.abs(frames[12].rgb.mean(axis=(1, 2)) - frames[2].rgb.mean(axis=(1, 2))).max() < 0.1


def test_upscale_writes_every_frame_with_no_traceback(tmp_path):
    src = joined(tmp_path, ("64x48", "yuv420p"), ("80x64", "yuv420p"))
    out = tmp_path / "out.mkv"
    p = subprocess.run([sys.executable, "-m", "vsr", "upscale", str(src), str(out), *TINY], capture_output=True,
                       text=True, cwd=REPO)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    assert sum("scaled to 64x48" in line for line in p.stderr.splitlines()) == 1
    import av
    with av.open(str(out)) as c:
        sizes = {(f.width, f.height) for f in c.decode(video=0)}
        assert sizes == {(256, 192)} and c.streams.video[0].frames in (0, 20)
