"""The real clips of the shared data (``tests.data.VIDEOS``; all but the 1080p one ship in tests/fixtures/real):
frame count, timestamps, audio packets, colour tags, x4 size.

The quick suite upscales the first frames of each small clip (EDVR-tiny on a 2-core CPU takes seconds per
320x240 frame); ``VSR_FULL_CLIPS=1`` runs whole clips.  The HD clips (one tiled frame each: ~6 min for 720p
on the shared 2-core machine) run only with ``VSR_HD_CLIPS=1``; their whole-clip timestamps and audio are
checked without the model in test_sink_real.py.
"""

from __future__ import annotations

import os
import warnings
from fractions import Fraction

import pytest

from tests.conftest import ffprobe_frames, probe
from tests.data import NEEDS_SHARED, VIDEOS
from vsr.pipeline import RunnerSettings, upscale
from vsr.video import open_source

FULL = os.environ.get("VSR_FULL_CLIPS") == "1"
HD = pytest.mark.skipif(os.environ.get("VSR_HD_CLIPS") != "1" and not FULL,
                        reason="HD clips through EDVR take minutes per frame on CPU: set VSR_HD_CLIPS=1")

CLIPS = [
    pytest.param("h264_256x240_35fps_1s_noaudio.mp4", 1, 0, id="256x240"),
    pytest.param("h264_aac_320x240_29.97fps_1.2s_realshort.mp4", 2, 0, id="320x240-aac-ntsc"),
    pytest.param("vp9_320x180_30fps_10s_bbb.webm", 1, 0, id="320x180-vp9-webm"),
    pytest.param("h264yuv444_mp3_1280x720_20fps_14s_cockatoo.mp4", 1, 128, id="720p-yuv444-mp3",
                 marks=[pytest.mark.slow, HD]),
    pytest.param("h264_aac51_1920x1080_60fps_2s.mp4", 1, 192, id="1080p-aac51", marks=[pytest.mark.slow, HD]),
]


@pytest.mark.parametrize("name,frames,tile", CLIPS)
def test_real_clip_is_upscaled_faithfully(tmp_path, tiny_backend, name, frames, tile):
    src = VIDEOS / name
    if not src.exists():
        pytest.skip(NEEDS_SHARED)
    out = tmp_path / ("out" + src.suffix)
    window = (0, None) if FULL else (0, frames)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = upscale(src, out, backend=tiny_backend, runner=RunnerSettings(frames=window, tile=tile, memory_budget_mb=8192))
    info = open_source(src).info
    a, b = probe(src), probe(out)
    n = a["frames"] if FULL else frames
    assert b["frames"] == report.frames == n
    assert b["video_times"] == a["video_times"][:n]
    va = next(s for s in a["streams"] if s["type"] == "video")
    vb = next(s for s in b["streams"] if s["type"] == "video")
    assert (vb["width"], vb["height"]) == (4 * va["width"], 4 * va["height"])
    assert vb["pix_fmt"] == va["pix_fmt"]
    spec = info.colour
    assert (vb["matrix"], vb["range"], vb["primaries"], vb["transfer"]) == \
        (spec.matrix, spec.range, spec.primaries, spec.transfer)
    # every audio packet inside the written span, byte for byte, same times
    end = a["video_times"][n] if n < len(a["video_times"]) else None
    audio_in = [s["index"] for s in a["streams"] if s["type"] == "audio"]
    audio_out = [s["index"] for s in b["streams"] if s["type"] == "audio"]
    assert len(audio_in) == len(audio_out)
    for i, o in zip(audio_in, audio_out):
        want = [p for p in a["packets"][i] if end is None or p[0] < end]
        assert b["packets"][o] == want and want
    count = ffprobe_frames(out)
    assert count is None or count == n


def test_real_clip_durations_are_read(tmp_path):
    src = VIDEOS / "vp9_320x180_30fps_10s_bbb.webm"
    if not src.exists():
        pytest.skip(NEEDS_SHARED)
    info = open_source(src).info
    assert info.frames is None and info.frames_estimate == 300  # WebM has no frame count in its header
    assert info.rate == Fraction(30)


@pytest.mark.parametrize("name", [p.values[0] for p in CLIPS])
def test_frames_estimate_is_the_decoded_count(name):
    """The progress bar's total: from the header, the duration or a demux count, it must be the real count."""
    import av

    src = VIDEOS / name
    if not src.exists():
        pytest.skip(NEEDS_SHARED)
    with av.open(str(src)) as c:
        st = c.streams.video[0]
        st.thread_type = "AUTO"
        decoded = sum(1 for _ in c.decode(st))
    assert open_source(src).info.frames_estimate == decoded
