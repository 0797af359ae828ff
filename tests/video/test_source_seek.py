"""``VideoSource.frames(start)`` gives exactly the frames a decode from the top gives at the same indices
(pixels, timestamps, durations), on real clips with several GOPs and B-frames, and on VFR; starting at the
cockatoo clip at frame 80, where a seek to that frame makes FFmpeg decode a wrong picture, included."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from tests.data import VIDEOS
from vsr.video.source import VideoSource

COCKATOO = VIDEOS / "h264yuv444_mp3_1280x720_20fps_14s_cockatoo.mp4"
CLIPS = ["h264yuv444_mp3_1280x720_20fps_14s_cockatoo.mp4", "vp9_320x180_30fps_10s_bbb.webm",
         "h264_aac_320x240_29.97fps_1.2s_realshort.mp4"]


def full_decode(path: Path, wanted: set[int]) -> dict[int, tuple]:
    src = VideoSource(path)
    try:
        return {f.index: (f.pts, f.duration, f.rgb) for f in src.frames() if f.index in wanted}
    finally:
        src.close()


def check_start(path: Path, starts: list[int], n: int = 3) -> None:
    wanted = {s + k for s in starts for k in range(n)}
    ref = full_decode(path, wanted)
    for start in starts:
        src = VideoSource(path)
        got = []
        for f in src.frames(start):
            got.append(f)
            if len(got) == n:
                break
        src.close()
        assert [f.index for f in got] == [i for i in range(start, start + n) if i in ref]
        for f in got:
            pts, dur, rgb = ref[f.index]
            assert (f.pts, f.duration) == (pts, dur)
            np.testing.assert_array_equal(f.rgb, rgb)


@pytest.mark.parametrize("name", CLIPS)
def test_start_equals_decode_from_the_top_on_real_clips(name):
    path = VIDEOS / name
    if not path.exists():
        pytest.skip(f"{path} not here")
    total = VideoSource(path).info.frames or 30
    idr = {80} if path == COCKATOO else set()
    check_start(path, sorted({1, total // 3, total // 2 + 1, total - 2} | idr))


def test_start_on_variable_frame_rate_with_b_frames(make_clip):
    pts = [0, 1, 3, 4, 8, 9, 10, 15, 16, 20, 21, 22, 30, 31, 33, 40, 41, 42, 50, 55]
    clip = make_clip("vfr.mp4", width=32, height=24, frames=len(pts), pts=pts, time_base=Fraction(1, 50))
    check_start(clip, [1, 7, 18])


def test_start_beyond_the_end_gives_nothing(make_clip):
    clip = make_clip("short.mp4", frames=5)
    src = VideoSource(clip)
    assert list(src.frames(9)) == []
    src.close()
