"""The video layer alone on whole real clips: every frame's timestamp and every audio packet survive.

No model here (flat frames at the source's size, encoded fast), so whole clips fit the quick suite; the
model path is covered on their first frames in test_real_clips.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import probe
from tests.data import NEEDS_SHARED, VIDEOS
from vsr.video import EncoderSettings, open_sink, open_source

NAMES = ["h264_256x240_35fps_1s_noaudio.mp4", "h264_aac_320x240_29.97fps_1.2s_realshort.mp4",
         "vp9_320x180_30fps_10s_bbb.webm", "h264yuv444_mp3_1280x720_20fps_14s_cockatoo.mp4",
         "h264_aac51_1920x1080_60fps_2s.mp4"]


@pytest.mark.parametrize("name", NAMES)
def test_whole_clip_timestamps_and_audio_packets_survive(tmp_path, name):
    src = VIDEOS / name
    if not src.exists():
        pytest.skip(NEEDS_SHARED)
    out = tmp_path / ("out" + (".mkv" if src.suffix == ".webm" else src.suffix))
    source = open_source(src)
    fast = (("preset", "ultrafast"),)
    sink = open_sink(out, source.info, EncoderSettings(codec="libx264", options=fast), scale=1)
    flat = np.full((3, source.info.height, source.info.width), 100, sink.plane_dtype())
    for f in source.frames():
        sink.write(flat, f.pts, f.duration)
    sink.commit()
    a, b = probe(src), probe(out)
    assert b["frames"] == a["frames"] > 0
    assert b["video_times"] == a["video_times"]
    audio_in = [s["index"] for s in a["streams"] if s["type"] == "audio"]
    audio_out = [s["index"] for s in b["streams"] if s["type"] == "audio"]
    assert len(audio_in) == len(audio_out)
    for i, o in zip(audio_in, audio_out):
        assert b["packets"][o] == a["packets"][i]  # bytes and times, every packet
    vb = next(s for s in b["streams"] if s["type"] == "video")
    spec = source.info.colour
    assert (vb["matrix"], vb["range"], vb["primaries"], vb["transfer"]) == \
        (spec.matrix, spec.range, spec.primaries, spec.transfer)


def test_big_outputs_get_low_memory_x264_unless_the_user_chooses(tmp_path):
    """1080p x4 is 8K: libx264's defaults would hold 5 GB; vsr bounds it, and the estimate follows."""
    from vsr.video.codecs import BIG_OUTPUT_X264_PARAMS

    src = VIDEOS / "h264_aac51_1920x1080_60fps_2s.mp4"
    if not src.exists():
        pytest.skip(NEEDS_SHARED)
    source = open_source(src)
    try:
        cases = [((), BIG_OUTPUT_X264_PARAMS), ((("x264-params", "ref=4"),), "ref=4"),
                 ((("rc-lookahead", "20"),), None)]
        estimates = []
        for i, (options, params) in enumerate(cases):
            sink = open_sink(tmp_path / f"o{i}.mp4", source.info, EncoderSettings(options=options), scale=4)
            try:
                assert (sink.vs.width, sink.vs.height) == (7680, 4320)
                assert sink.encoder_options.get("x264-params") == params
                estimates.append(sink.memory_estimate_mb())
            finally:
                sink.abort()
        assert 900 < estimates[0] < 1500 < estimates[1]  # measured 1115 MB with the low-memory settings
        small = open_sink(tmp_path / "s.mp4", source.info, EncoderSettings(), scale=1)
        assert "x264-params" not in small.encoder_options  # 1080p output: x264's own defaults
        small.abort()
    finally:
        source.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # aborted sinks leave nothing


def _packets(pairs):
    import av
    from fractions import Fraction

    out = []
    for pts, dts in pairs:
        p = av.Packet(b"x")
        p.pts, p.dts, p.time_base = pts, dts, Fraction(1, 25)
        out.append(p)
    return out


@pytest.mark.parametrize("pairs", [
    [(0, -9570295239278626), (3, -1), (1, 0), (2, 1)],        # seen with libx265 under load: the first packet
    [(0, -2), (3, -1), (1, 9_000_000), (2, 1), (4, 2)],         # one in the middle, dts after its pts
    [(0, -2), (3, -1), (1, 0), (2, -10**15)],                   # the last one, at the flush
    [(0, -10**15), (3, -10**15), (1, 0), (2, 1)],               # two in a row
])
def test_dts_repair_gives_monotonic_dts_not_after_pts(pairs, caplog):
    from vsr.video.dts import DtsRepair

    rep = DtsRepair()
    pk = _packets(pairs)
    got = list(rep.repair(pk[:-1])) + list(rep.repair(pk[-1:], last=True))
    assert sorted(p.pts for p in got) == sorted(p for p, _ in pairs)  # nothing lost
    dts = [p.dts for p in got]
    assert all(a < b for a, b in zip(dts, dts[1:])), dts
    assert all(p.dts <= p.pts for p in got)
    good = [(p, d) for p, d in pairs if d is not None and d <= p and p - d < 1000]
    assert [(p.pts, p.dts) for p in got if (p.pts, p.dts) in good] == [g for g in good]  # good ones untouched
    assert rep.repaired == len(pairs) - len(good)


@pytest.mark.parametrize("name", ["frames", "out.mkv"])
def test_both_sinks_follow_the_sink_protocol(make_clip, tmp_path, name):
    """new_planes -> finish -> write, then commit: the output appears only at commit, with every frame."""
    from vsr.video import Sink
    from vsr.video.planes import plane_views

    source = open_source(make_clip("clip.mp4", frames=3, width=16, height=8))
    encoder = EncoderSettings() if name == "frames" else EncoderSettings(options=(("preset", "ultrafast"),))
    sink = open_sink(tmp_path / name, source.info, encoder, scale=1)
    assert isinstance(sink, Sink) and isinstance(sink.plane_dtype(), np.dtype)
    assert sink.planes.pix_fmt in (sink.pix_fmt, "rgb24", "rgb48le") and sink.memory_estimate_mb() >= 0
    for f in source.frames():
        planes = sink.new_planes(8, 16)
        for plane in plane_views(planes):  # an array's, or the frame's own planes for Y/Cb/Cr
            plane[...] = 90
        sink.write(sink.finish(planes), f.pts, f.duration)
    assert not (tmp_path / name).exists()
    sink.commit()
    source.close()
    assert open_source(tmp_path / name).info.frames_estimate == 3


def flat_run(source, out, settings=None) -> dict:
    """``source``'s frames, flat, into ``out`` (libx264 ultrafast unless ``settings``), read back with probe."""
    settings = settings or EncoderSettings(options=(("preset", "ultrafast"),))
    sink = open_sink(out, source.info, settings, scale=1)
    flat = np.full((3, source.info.height, source.info.width), 100, sink.plane_dtype())
    for f in source.frames():
        sink.write(flat, f.pts, f.duration)
    sink.commit()
    source.close()
    return probe(out)


def test_text_subtitles_become_mov_text_in_mp4(make_clip, tmp_path):
    from tests.conftest import Subtitles

    source = open_source(make_clip("clip.mkv", frames=6, subtitles=[Subtitles()]))
    with pytest.warns(UserWarning, match="converting them to mov_text"):
        b = flat_run(source, tmp_path / "out.mp4")
    sub = next(s for s in b["streams"] if s["type"] == "subtitle")
    assert sub["codec"] == "mov_text"
    assert [d[2:] for _, d in b["packets"][sub["index"]] if d[2:]] == [b"hello", b"world"]  # gaps: empty samples


def test_text_subtitles_become_webvtt_in_webm(make_clip, tmp_path):
    # WebM holds no SubRip or ASS but does hold WebVTT: an anime .mkv's subtitles were dropped from a .webm output
    from tests.conftest import Subtitles

    source = open_source(make_clip("clip.mkv", frames=6, subtitles=[Subtitles()]))
    with pytest.warns(UserWarning, match="converting them to webvtt"):
        b = flat_run(source, tmp_path / "out.webm", EncoderSettings(codec="libvpx-vp9", options=(
            ("deadline", "realtime"), ("cpu-used", "8"))))
    sub = next(s for s in b["streams"] if s["type"] == "subtitle")
    assert sub["codec"] == "webvtt"
    assert [d for _, d in b["packets"][sub["index"]] if d] == [b"hello", b"world"]


def test_track_titles_become_handler_names_in_mp4(make_clip, tmp_path):
    # mp4's muxer writes no track title: a .mkv's named tracks ("English Dub") came out of an .mp4 nameless
    from tests.conftest import Audio

    source = open_source(make_clip("clip.mkv", frames=3, title="Main", audio=[Audio(title="English Dub")]))
    names = [s["metadata"].get("handler_name") for s in flat_run(source, tmp_path / "out.mp4")["streams"]]
    assert names == ["Main", "English Dub"]


def test_audio_an_edit_list_leaves_out_stays_out_of_mkv(tmp_path):
    # an MP4 cut with ffmpeg -ss -c copy holds its audio from the keyframe before the cut (0.3 s here), which its
    # edit list leaves out: all of it went into .mkv, whose video then started 0.32 s after its audio
    import subprocess

    from tests.video.tools import ffmpeg

    whole, cut = tmp_path / "whole.mp4", tmp_path / "cut.mp4"
    subprocess.run([ffmpeg(), "-v", "error", "-f", "lavfi", "-i", "testsrc2=s=64x48:r=25:d=1", "-f", "lavfi", "-i",
                    "sine=d=1", "-c:v", "libx264", "-g", "50", "-c:a", "aac", str(whole)], check=True)
    subprocess.run([ffmpeg(), "-v", "error", "-ss", "0.3", "-i", str(whole), "-c", "copy", "-t", "0.3", str(cut)],
                   check=True)
    b = flat_run(open_source(cut), tmp_path / "out.mkv")
    audio_start = min(t for t, _ in b["packets"][1])
    assert b["video_times"][0] - audio_start < 0.05  # the decoder's pre-roll: a packet, and the one the cut is in
