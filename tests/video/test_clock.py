"""Times on a source's clock (vsr.video.clock): the parser `--start`, `--end` and `vsr preview --at` share, and the
frames a span of times names, checked against ffprobe's own timestamps of each frame (an independent reader)."""

from __future__ import annotations

import subprocess
from fractions import Fraction
from pathlib import Path

import pytest

from vsr.errors import InputError
from vsr.video import open_source
from vsr.video.clock import PAST, frame_times, frames_between, parse_time, say_time

# 10 frames at 10 fps, then 20 at 20 fps: a variable-frame-rate clip, in a millisecond time base
VFR = "settb=1/1000,setpts='if(lt(N,10),N*0.1,1+(N-10)*0.05)/TB'"


def clip(path: Path, vf: str | None = None, frames: int = 30) -> Path:
    """``frames`` frames of 64x48 at 10 fps (``vf``: their timestamps rewritten), H.264 with B-frames."""
    cmd = ["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc=size=64x48:rate=10", "-frames:v", str(frames),
           "-pix_fmt", "yuv420p"]
    if vf:
        cmd += ["-vf", vf, "-fps_mode", "passthrough", "-enc_time_base:v", "1/1000"]
    subprocess.run([*cmd, str(path)], check=True)
    return path


def ffprobe_times(path: Path) -> list[float]:
    """Each decoded frame's presentation time from the first frame's, as ffprobe shows them."""
    out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries", "frame=pts_time",
                          "-of", "csv=p=0", str(path)], check=True, capture_output=True, text=True).stdout
    times = [float(line.strip().strip(",")) for line in out.splitlines() if line.strip().strip(",")]
    return [t - times[0] for t in times]


@pytest.mark.parametrize("text, seconds", [("90", 90), ("90.5", Fraction(181, 2)), ("1:30", 90),
                                           ("01:30:00.25", Fraction(21601, 4)), ("12.5s", Fraction(25, 2)),
                                           ("0", 0), ("0:00.1", Fraction(1, 10))])
def test_a_time_is_seconds_or_hours_minutes_seconds(text, seconds):
    assert parse_time(text, "--start") == seconds
    assert parse_time(say_time(seconds), "--start") == seconds  # what vsr says of a time reads back the same


@pytest.mark.parametrize("text", ["", "soon", "-5", "+5", "1:2:3:4", "1:75", "1::2", "nan", "inf", "1e999",
                                  "5 s", "1:-5"])
def test_anything_else_is_one_line_naming_the_option(text):
    with pytest.raises(InputError, match=r"^--end must be a time: seconds \(90, 90.5\) or \[H:\]M:S"):
        parse_time(text, "--end")


def _expected(times: list[float], start: float | None, end: float | None) -> tuple[int, int | None]:
    kept = [i for i, t in enumerate(times) if (start is None or t >= start - 1e-9) and (end is None or t < end - 1e-9)]
    return kept[0], None if kept[-1] == len(times) - 1 else kept[-1] + 1


@pytest.mark.parametrize("vf", [None, VFR], ids=["cfr", "vfr"])
@pytest.mark.parametrize("start, end", [("1", "1.5"), (None, "2"), ("0.95", None), ("1.02", "1.26"),
                                        ("0", "0:00.1"), ("1.9", "99")])
def test_the_frames_are_those_shown_from_start_to_before_end(tmp_path, vf, start, end):
    """By each frame's own timestamp: on the VFR clip, 1 s to 1.5 s is frames 10:20 (10 frames at 20 fps), where
    index x average rate would say 15 or so."""
    path = clip(tmp_path / ("v.mkv" if vf else "c.mp4"), vf)
    times = ffprobe_times(path)
    assert len(times) == 30 and (vf is None) == (times[15] == pytest.approx(1.5))
    source = open_source(path)
    try:
        got = frames_between(source, *(None if t is None else parse_time(t, "-") for t in (start, end)), "said")
    finally:
        source.close()
    assert got == _expected(times, *(None if t is None else float(parse_time(t, "-")) for t in (start, end)))
    if vf and (start, end) == ("1", "1.5"):
        assert got == (10, 20)


def test_a_start_past_the_last_frame_names_the_length(tmp_path):
    source = open_source(clip(tmp_path / "c.mp4"))
    try:
        with pytest.raises(InputError) as e:
            frames_between(source, Fraction(3), None, "--start 3")
        with pytest.raises(InputError, match=r"^--start 1.01 --end 1.05: no frame starts between them \(frames at "
                                             r"1s and 1.1s\)$"):
            frames_between(source, Fraction("1.01"), Fraction("1.05"), "--start 1.01 --end 1.05")
        assert frames_between(source, Fraction("2.9"), None, "-") == (29, None)  # the last frame alone
    finally:
        source.close()
    assert str(e.value) == "--start 3: the source is only 3s long (its last frame starts at 2.9s)"


def test_each_field_a_frame_has_its_own_time(tmp_path):
    """`--deinterlace double`: 1 s to 1.5 s of a 10 fps interlaced clip is 10 fields' frames, 20:30, the times the
    run's own frames have (the stream's time base, not the finer one of the fields)."""
    path = tmp_path / "i.mkv"
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc=size=64x48:rate=10", "-frames:v",
                    "30", "-pix_fmt", "yuv420p", "-flags", "+ildct+ilme", "-c:v", "libx264", "-x264-params", "tff=1",
                    str(path)], check=True)
    with pytest.warns(UserWarning, match="each field made a frame"):
        source = open_source(path, deinterlace="double")
    try:
        assert frames_between(source, Fraction(1), Fraction(3, 2), "-") == (20, 30)
        run = [(f.index, (f.pts - source.info.start_pts) * source.info.time_base) for f in source.frames(20)][:2]
    finally:
        source.close()
    assert run == [(20, 1), (21, Fraction(21, 20))]


@pytest.mark.parametrize("start, end", [("1", "2"), (None, "3.05"), ("4.2", None), ("30", "39.9"), ("39.9", None)])
def test_a_span_near_the_top_reads_the_packets_only_past_it(tmp_path, start, end):
    """A span a minute into a film is not a read of the whole file: the packets' timestamps are read until
    PAST of them lie past the span's last time, and the frames it names are still those ffprobe's times give."""
    path = clip(tmp_path / "long.mp4", frames=400)
    times = ffprobe_times(path)
    span = [None if t is None else parse_time(t, "-") for t in (start, end)]
    source = open_source(path)
    try:
        got = frames_between(source, *span, "said")
        read = frame_times(source, max(t for t in span if t is not None))
    finally:
        source.close()
    assert got == _expected(times, *(None if t is None else float(t) for t in span))
    last = float(max(t for t in span if t is not None))
    before = sum(t < last - 1e-9 for t in times)
    if before + PAST < 400:  # (the read stopped: every frame before the span's end and PAST after it, give or
        assert before + PAST <= len(read) <= before + PAST + 16  # take a decoder's reordering)
        assert sorted(read)[:before + 1] == [Fraction(round(t * 10), 10) for t in times[:before + 1]]
    else:
        assert len(read) == 400
