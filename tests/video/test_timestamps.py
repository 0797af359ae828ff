"""Sources whose frames have no timestamps, or timestamps that do not increase: vsr counts such frames on by
one frame (their duration, else the frame rate) with one warning, writes a valid output, and never seeks in
them (a seek by timestamp cannot tell such frames apart)."""

from __future__ import annotations

import warnings
from fractions import Fraction

import av
import pytest

from tests.conftest import pattern
from vsr.cli import main
from vsr.video import open_source
from vsr.video.seek import scan_video, verify_entry


def one_timestamp_mkv(path, frames: int = 4, same_picture: bool = False):
    """A Matroska clip of lossless intra frames (FFV1) at 25 fps whose packets all have pts = dts = 0 (Matroska's
    muxer accepts that)."""
    with av.open(str(path), "w") as oc:
        vs = oc.add_stream("ffv1", rate=25, options={"g": "1"})
        vs.width, vs.height, vs.pix_fmt = 16, 12, "yuv420p"
        for i in range(frames):
            frame = av.VideoFrame.from_ndarray(pattern(0 if same_picture else i, 16, 12), format="rgb24")
            frame.pts = i
            for pkt in vs.encode(frame):
                pkt.pts = pkt.dts = 0
                oc.mux(pkt)
    return path


def source_times(path) -> list[Fraction]:
    src = open_source(path)
    try:
        return [Fraction(f.pts) * src.info.time_base for f in src.frames()]
    finally:
        src.close()


def test_frames_with_one_timestamp_are_counted_on_from_the_frame_rate(tmp_path):
    p = one_timestamp_mkv(tmp_path / "zero.mkv")
    with av.open(str(p)) as c:
        assert [f.pts for f in c.decode(video=0)] == [0, 0, 0, 0]  # the clip is what the test needs
    with pytest.warns(UserWarning, match=r"zero.mkv: frame 1 has timestamp 0, .*timestamps synthesised") as rec:
        times = source_times(p)
    assert times == [Fraction(i, 25) for i in range(4)]
    assert len(rec) == 1 and "\n" not in str(rec[0].message)


def test_a_raw_stream_without_timestamps_follows_its_frame_durations(tmp_path):
    p = tmp_path / "raw.h264"
    with av.open(str(p), "w", format="h264") as oc:
        vs = oc.add_stream("libx264", rate=20)
        vs.width, vs.height, vs.pix_fmt = 16, 12, "yuv420p"
        for i in range(3):
            frame = av.VideoFrame.from_ndarray(pattern(i, 16, 12), format="rgb24")
            frame.pts = i
            for pkt in vs.encode(frame):
                oc.mux(pkt)
        for pkt in vs.encode(None):
            oc.mux(pkt)
    with pytest.warns(UserWarning, match=r"raw.h264: frame 1 has no timestamp"):
        times = source_times(p)
    assert len(times) == 3 and times[0] == 0 and all(b > a for a, b in zip(times, times[1:]))


def test_increasing_timestamps_are_kept_without_a_warning(make_clip):
    p = make_clip("vfr.mkv", frames=4, time_base=Fraction(1, 1000), pts=[0, 40, 100, 110])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert source_times(p) == [Fraction(t, 1000) for t in (0, 40, 100, 110)]


def test_a_clip_with_one_timestamp_upscales_to_an_increasing_timeline(tmp_path, capsys):
    src, out = one_timestamp_mkv(tmp_path / "zero.mkv"), tmp_path / "out.mp4"
    rc = main(["upscale", str(src), str(out), "--weights", "random", "--config", "edvr-tiny", "--threads", "1",
               "--quiet"])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert [line for line in err.splitlines() if "timestamps synthesised" in line] and "Traceback" not in err
    with av.open(str(out)) as c:
        assert [f.time for f in c.decode(video=0)] == pytest.approx([0, 0.04, 0.08, 0.12])


def test_a_seek_is_never_verified_in_a_clip_with_repeated_timestamps(tmp_path):
    # identical pictures at one timestamp: a seek to frame 2 lands on frame 0, which looks the same
    p = one_timestamp_mkv(tmp_path / "same.mkv", same_picture=True)
    scan, _ = scan_video(p)
    assert scan.keyframes == (0, 1, 2, 3) and not scan.increasing
    assert not verify_entry(p, scan, 2, 4)


@pytest.mark.parametrize("suffix", [".h264", ".hevc"])
def test_a_raw_streams_clock_is_the_sources_frame_rate(make_clip, tmp_path, capsys, suffix):
    """A raw H.264/HEVC stream keeps no timestamps: the rate its VUI says is all a reader has.  The encoder took
    the source's time base, which x264 writes there (x265 its frame rate): a 30 fps MP4's 1/15360 read back as
    15360 fps by ffprobe (remuxed, four frames lasted a millisecond), this one as 25 (FFmpeg's guess when the
    VUI's is out of range).  One frame is now the encoder's tick there."""
    src = make_clip("ntsc.mp4", frames=3, rate=Fraction(30000, 1001))
    out = tmp_path / f"out{suffix}"
    rc = main(["upscale", str(src), str(out), "--weights", "random", "--config", "edvr-tiny", "--threads", "1",
               "--quiet"])
    assert rc == 0, capsys.readouterr().err
    with av.open(str(out)) as c:
        assert c.streams.video[0].guessed_rate == Fraction(30000, 1001)  # (av_guess_frame_rate)
        assert c.streams.video[0].codec_context.name == suffix[1:]
