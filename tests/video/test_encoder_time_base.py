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
