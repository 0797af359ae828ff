"""``VideoSource.frames(start)`` seeks: the frames it gives are exactly those a decode from the top gives at
the same indices (pixels, timestamps, durations), on real clips with several GOPs and B-frames, and on VFR."""

from __future__ import annotations

import logging
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from vsr.video.source import VideoSource

VIDEOS = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "videos"
# the cockatoo clip's later keyframes decode as corrupt after a seek (FFmpeg flags them): its frames must still
# come out right, through the fallback to a decode from the top
CLIPS = [("h264yuv444_mp3_1280x720_20fps_14s_cockatoo.mp4", True), ("vp9_320x180_30fps_10s_bbb.webm", False),
         ("h264_aac_320x240_29.97fps_1.2s_realshort.mp4", False)]


def full_decode(path: Path, wanted: set[int]) -> dict[int, tuple]:
    src = VideoSource(path)
    try:
        return {f.index: (f.pts, f.duration, f.rgb) for f in src.frames() if f.index in wanted}
    finally:
        src.close()


def check_seek(path: Path, starts: list[int], caplog, n: int = 3, fallback_ok: bool = False) -> None:
    wanted = {s + k for s in starts for k in range(n)}
    ref = full_decode(path, wanted)
    for start in starts:
        src = VideoSource(path)
        with caplog.at_level(logging.INFO, logger="vsr.video.source"):
            got = []
            for f in src.frames(start):
                got.append(f)
                if len(got) == n:
                    break
        src.close()
        if not fallback_ok:
            assert "not reproducible" not in caplog.text, caplog.text  # the seek itself was right, no fallback
        expect = [i for i in range(start, start + n) if i in ref]
        assert [f.index for f in got] == expect
        for f in got:
            pts, dur, rgb = ref[f.index]
            assert (f.pts, f.duration) == (pts, dur)
            np.testing.assert_array_equal(f.rgb, rgb)


@pytest.mark.parametrize("name,fallback_ok", CLIPS)
def test_seek_equals_decode_from_the_top_on_real_clips(name, fallback_ok, caplog):
    path = VIDEOS / name
    if not path.exists():
        pytest.skip(f"{path} not here")
    total = VideoSource(path).info.frames or 30
    check_seek(path, sorted({1, total // 3, total // 2 + 1, total - 2}), caplog, fallback_ok=fallback_ok)


def test_seek_on_variable_frame_rate_with_b_frames(make_clip, caplog):
    pts = [0, 1, 3, 4, 8, 9, 10, 15, 16, 20, 21, 22, 30, 31, 33, 40, 41, 42, 50, 55]
    clip = make_clip("vfr.mp4", width=32, height=24, frames=len(pts), pts=pts, time_base=Fraction(1, 50))
    check_seek(clip, [1, 7, 18], caplog)


def test_start_beyond_the_end_gives_nothing(make_clip):
    clip = make_clip("short.mp4", frames=5)
    src = VideoSource(clip)
    assert list(src.frames(9)) == []
    src.close()
