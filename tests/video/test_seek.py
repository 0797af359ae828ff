"""Entry points (:mod:`vsr.video.seek`): a keyframe is used only where a seek to it decodes exactly as a decode
from the top, checked on real clips; the cockatoo clip's later IDR frames decode wrongly after a seek and are
refused, at planning and again when a source is entered there."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from vsr.video.seek import EntryPoint, scan_video, verify_entry
from vsr.video.source import VideoSource

from tests.data import VIDEOS

COCKATOO = VIDEOS / "h264yuv444_mp3_1280x720_20fps_14s_cockatoo.mp4"
SHORT = VIDEOS / "h264_aac_320x240_29.97fps_1.2s_realshort.mp4"
BBB = VIDEOS / "vp9_320x180_30fps_10s_bbb.webm"


def need(path):
    if not path.exists():
        pytest.skip(f"{path} not here")
    return path


def frames_at(path, entry, start, n):
    src = VideoSource(path, entry)
    try:
        out = []
        for f in src.frames(start):
            out.append(f)
            if len(out) == n:
                return out
        return out
    finally:
        src.close()


def assert_same(got, ref):
    assert [(f.index, f.pts, f.duration) for f in got] == [(f.index, f.pts, f.duration) for f in ref]
    for a, b in zip(got, ref):
        np.testing.assert_array_equal(a.rgb, b.rgb)


@pytest.mark.parametrize("path, keyframes", [(SHORT, (0, 30)), (BBB, (0, 128, 256))])
def test_keyframes_of_clean_clips_verify_and_enter_exactly(path, keyframes):
    scan, _ = scan_video(need(path))
    assert scan.keyframes == keyframes
    for k in keyframes[1:]:
        assert verify_entry(path, scan, k, min(k + 40, scan.frames))
    k = keyframes[-1]
    got = frames_at(path, scan.entry(k), k + 2, 3)
    assert_same(got, frames_at(path, None, k + 2, 3))


def test_cockatoo_idr_frames_decode_wrongly_after_a_seek_and_are_refused(caplog):
    scan, _ = scan_video(need(COCKATOO))
    assert scan.frames == 280 and scan.keyframes == (0, 76, 145)
    assert not verify_entry(COCKATOO, scan, 76, 90)
    assert not verify_entry(COCKATOO, scan, 145, 150)
    # a source entered there anyway (a plan made elsewhere) sees the wrong picture and decodes from the top
    with caplog.at_level(logging.WARNING, logger="vsr.video.seek"):
        got = frames_at(COCKATOO, scan.entry(145), 146, 2)
    assert "decodes differently after a seek" in caplog.text
    assert_same(got, frames_at(COCKATOO, None, 146, 2))


def test_an_entry_whose_picture_differs_is_not_used(caplog):
    scan, _ = scan_video(need(SHORT))
    wrong = EntryPoint(30, scan.pts[30], "0" * 24)  # as if another FFmpeg build decoded it differently
    with caplog.at_level(logging.WARNING, logger="vsr.video.seek"):
        got = frames_at(SHORT, wrong, 31, 2)
    assert "decodes differently after a seek" in caplog.text
    assert_same(got, frames_at(SHORT, None, 31, 2))
