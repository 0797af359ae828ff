"""The encoder's time base: MPEG-4 Part 2 (the default codec of ``.avi``) refuses a time base finer than 1/65535 and
MPEG-1/2 read a standard frame rate from it, so a source in 1/90000 (MPEG-TS, QuickTime, many MP4s) failed as
``vsr: error: mpeg4 rejected its options ...: timebase 1/90000 not supported by MPEG 4 standard``.  The frames go
to such an encoder in one frame's time base where every frame is on the rate's grid (exact), else in the finest
time base it takes that the source's ticks fall on."""

from __future__ import annotations

import shutil
import subprocess
from fractions import Fraction
from pathlib import Path

import av
import pytest

from vsr.errors import InputError
from vsr.video import EncoderSettings
from vsr.video.grid import encoder_time_base
from tests.video.tools import flat_through_sink


def clip(path: Path, rate: str, vfr: bool = False) -> Path:
    """8 frames of H.264 in an MP4 whose track counts 1/90000 s; ``vfr``: the frames at uneven times."""
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        pytest.skip("needs ffmpeg")
    timing = ["-vf", r"settb=1/90000,setpts=N/TB/25+gte(N\,4)*0.013/TB", "-fps_mode", "passthrough",
              "-enc_time_base:v", "1/90000"] if vfr else []
    subprocess.run([ffmpeg, "-v", "error", "-f", "lavfi", "-i", f"testsrc2=s=32x24:r={rate}", "-frames:v", "8",
                    *timing, "-c:v", "libx264", "-video_track_timescale", "90000", str(path)], check=True)
    return path


def frame_times(path: Path) -> list[Fraction]:
    with av.open(str(path)) as c:
        return sorted(f.pts * f.time_base for f in c.decode(c.streams.video[0]))


def upscale_flat(src: Path, out: Path, codec: str | None = None) -> str:
    """``src`` through the sink at scale 1 (flat grey frames at the source's times); the codec written."""
    flat_through_sink(src, out, EncoderSettings(codec=codec))
    with av.open(str(out)) as c:
        return c.streams.video[0].codec_context.name


@pytest.mark.parametrize("out, codec", [("out.avi", None), ("out.mov", "mpeg4"), ("out.mkv", "mpeg4"),
                                        ("out.mkv", "mpeg2video")])
def test_a_90000_tick_source_into_mpeg4_and_mpeg2_keeps_every_frame_time(tmp_path, out, codec):
    src = clip(tmp_path / "in.mp4", "30000/1001" if codec != "mpeg2video" else "25")
    with av.open(str(src)) as c:
        assert c.streams.video[0].time_base == Fraction(1, 90000)  # (the clip is what the test needs)
    written = upscale_flat(src, tmp_path / out, codec)
    assert written == (codec or "mpeg4")
    before, after = frame_times(src), frame_times(tmp_path / out)
    tolerance = Fraction(1, 1000) if out.endswith(".mkv") else 0  # Matroska keeps milliseconds
    assert len(after) == len(before) == 8
    assert all(abs(a - b) <= tolerance for a, b in zip(before, after)), (before, after)


def test_a_variable_rate_90000_tick_source_into_mpeg4_keeps_its_uneven_times(tmp_path):
    src = clip(tmp_path / "in.mp4", "25", vfr=True)
    before = frame_times(src)
    assert before[4] - before[3] != before[1] - before[0]  # (uneven)
    upscale_flat(src, tmp_path / "out.mkv", "mpeg4")
    after = frame_times(tmp_path / "out.mkv")
    assert len(after) == 8 and all(abs(a - b) <= Fraction(1, 1000) for a, b in zip(before, after)), (before, after)
    with pytest.raises(InputError, match="variable frame rate, which mpeg2video"):
        upscale_flat(src, tmp_path / "out2.mkv", "mpeg2video")
    assert not (tmp_path / "out2.mkv").exists()


def test_the_time_base_each_encoder_takes(tmp_path):
    stream = tmp_path / "-"  # (not a file: a stream read once, its rate all there is)
    ntsc = Fraction(30000, 1001)
    assert encoder_time_base("libx264", stream, "video", Fraction(1, 90000), ntsc) == Fraction(1, 90000)
    assert encoder_time_base("mpeg4", stream, "video", Fraction(1, 30000), ntsc) == Fraction(1, 30000)
    assert encoder_time_base("mpeg4", stream, "video", Fraction(1, 90000), ntsc) == Fraction(1001, 30000)
    assert encoder_time_base("mpeg2video", stream, "video", Fraction(1, 1000), Fraction(25)) == Fraction(1, 25)
    # no rate: the finest the encoder takes that the source's ticks fall on
    assert encoder_time_base("mpeg4", stream, "video", Fraction(1, 90000), None) == Fraction(1, 45000)
    assert encoder_time_base("mpeg4", stream, "video", Fraction(1, 1000000), None) == Fraction(1, 62500)
    assert encoder_time_base("mpeg4", stream, "video", Fraction(1, 65537), None) == Fraction(1, 65535)  # (a prime)


def test_an_inverse_telecined_film_into_mpeg2_is_on_its_grid(tmp_path):
    """The film's frames are on 23.976's grid whatever the telecined file's are (29.97): not a variable rate."""
    from tests.video.test_telecine import film_and_telecined, vsr

    _, tc = film_and_telecined(tmp_path, 24)
    out = tmp_path / "o.mkv"
    r = vsr("upscale", tc, out, "--deinterlace", "film", "-c", "mpeg2video", "--weights", "random", "--config",
            "edvr-tiny", "--backend", "torch", "--threads", "1", "--quiet")
    assert r.returncode == 0, r.stderr
    times = frame_times(out)
    step = Fraction(1001, 24000)
    assert len(times) == 24 and all(abs(t - n * step) <= Fraction(1, 1000) for n, t in enumerate(times)), times


def test_an_inverse_telecined_film_into_avi(tmp_path):
    """AVI keeps one frame rate: the film's frames have it (23.976), though the telecined file's do not (it was
    refused as a variable frame rate)."""
    from tests.video.test_telecine import film_and_telecined, vsr

    _, tc = film_and_telecined(tmp_path, 24)
    out = tmp_path / "o.avi"
    r = vsr("upscale", tc, out, "--deinterlace", "film", "--weights", "random", "--config", "edvr-tiny",
            "--backend", "torch", "--threads", "1", "--quiet")
    assert r.returncode == 0, r.stderr
    times = frame_times(out)
    assert len(times) == 24 and times == [n * Fraction(1001, 24000) for n in range(24)], times


def mkv_clip(path: Path, rate: str, frames: int = 24) -> Path:
    """H.264 in Matroska, which counts milliseconds (1/1000): 23.976 and 29.97 fps frames at rounded times."""
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        pytest.skip("needs ffmpeg")
    subprocess.run([ffmpeg, "-v", "error", "-f", "lavfi", "-i", f"testsrc2=s=32x24:r={rate}", "-frames:v",
                    str(frames), "-c:v", "libx264", str(path)], check=True)
    return path


def raw_stream_rate(path: Path, tmp_path: Path) -> Fraction:
    """The rate a reader finds in ``path``'s video copied into a raw H.264 stream (no timestamps: the stream's
    own clock, its VUI, is all there is; as ``ffmpeg -i path -c copy x.h264``)."""
    raw = tmp_path / f"{path.name}.h264"
    with av.open(str(path)) as c, av.open(str(raw), "w", format="h264") as o:
        out = o.add_stream_from_template(c.streams.video[0])
        for pkt in c.demux(c.streams.video[0]):
            if pkt.size:
                pkt.stream = out
                o.mux(pkt)
    with av.open(str(raw)) as c:
        return c.streams.video[0].guessed_rate


def packet_times(path: Path) -> list[tuple]:
    """Each video packet's (pts, dts, duration) as the container has them; MPEG-TS keeps no durations (FFmpeg's
    demuxer makes them from the stream's clock), so there (pts, dts)."""
    with av.open(str(path)) as c:
        times = [(p.pts, p.dts, p.duration) for p in c.demux(c.streams.video[0]) if p.size]
        return [t[:2] for t in times] if c.format.name == "mpegts" else times


@pytest.mark.parametrize("source, rate", [("in.mkv", "24000/1001"), ("in.mkv", "30000/1001"),
                                          ("in.mp4", "30000/1001")])
@pytest.mark.parametrize("out", ["out.mkv", "out.mp4", "out.ts"])
def test_the_streams_own_clock_says_a_constant_rate_sources_frame_rate(tmp_path, source, rate, out):
    """x264 wrote the encoder's time base into the stream's VUI: a Matroska source's 1/1000 read as 1000 fps once
    the stream was copied out of its container (a remux played at the wrong speed), and ffprobe 5.1 gave an
    MP4's packets no duration (a frame rate of 1000 fps is one it takes for no rate).  A source whose every frame
    is on its rate's grid is now said constant-rate to x264 (force-cfr), which writes the frame rate there; the
    container's timestamps are those of before, frame for frame, B-frames reordered as they were."""
    src = (mkv_clip if source.endswith(".mkv") else clip)(tmp_path / source, rate)
    with av.open(str(src)) as c:  # (the clip is what the test needs)
        assert c.streams.video[0].time_base == (Fraction(1, 1000) if source.endswith(".mkv") else Fraction(1, 90000))
    new, before = tmp_path / out, tmp_path / f"before.{out}"
    flat_through_sink(src, new)
    # the user's own force-cfr=0 is left as it is: today's encoder, as before this change
    flat_through_sink(src, before, EncoderSettings(options=(("x264-params", "force-cfr=0"),)))
    assert raw_stream_rate(new, tmp_path) == Fraction(rate)
    assert raw_stream_rate(before, tmp_path) != Fraction(rate)  # (what the comparison is against)
    times = packet_times(new)
    assert times == packet_times(before)
    assert len(times) == len(frame_times(src)) and any(t[0] != t[1] for t in times)  # (B-frames: decode order is not display order)


def test_a_variable_rate_source_keeps_the_encoders_clock(tmp_path):
    """A variable frame rate has no one rate to say: x264 is not told the input is constant-rate (its rate
    control goes by the timestamps), as before."""
    from vsr.video import open_source
    from vsr.video.grid import clock_options

    src = clip(tmp_path / "vfr.mp4", "25", vfr=True)
    source = open_source(src)
    try:
        info = source.info
    finally:
        source.close()
    assert info.rate  # (a nominal rate it is not on)
    opts = {"crf": "18", "x264-params": "ref=2"}
    assert clock_options("libx264", opts, info, info.time_base) == opts
    cfr = clip(tmp_path / "cfr.mp4", "25")
    source = open_source(cfr)
    try:
        info = source.info
    finally:
        source.close()
    assert clock_options("libx264", opts, info, info.time_base)["x264-params"] == "force-cfr=1:ref=2"
    assert clock_options("libx265", opts, info, info.time_base) == opts  # (x265 writes the frame rate anyway)
    user = {"x264-params": "force-cfr=0"}
    assert clock_options("libx264", user, info, info.time_base) == user


def test_ffprobe_gives_an_mp4_outputs_packets_their_durations(tmp_path):
    """ffprobe (FFmpeg 5.1's, as installed here) gives an MP4 packet with a composition offset (B-frames) no
    duration of its own but one frame of the stream's clock, which it takes for none at 1000 fps: every packet of
    an MP4 made from a Matroska source read N/A.  The clock now says 23.976 fps: each lasts one frame."""
    ffprobe = shutil.which("ffprobe")
    if ffprobe is None:
        pytest.skip("needs ffprobe")
    src = mkv_clip(tmp_path / "in.mkv", "24000/1001")
    flat_through_sink(src, tmp_path / "out.mp4")
    said = subprocess.run([ffprobe, "-v", "error", "-select_streams", "v", "-show_entries",
                           "packet=duration_time", "-of", "csv=p=0", str(tmp_path / "out.mp4")],
                          capture_output=True, text=True, check=True).stdout.split()
    assert len(said) == 24 and all(abs(float(d) - 1001 / 24000) < 1e-3 for d in said if d != "N/A"), said
    assert "N/A" not in said
