"""A trimmed output's SMPTE timecode is its frame A's (QuickTime tmcd and tag, Matroska's TIMECODE), counted as
timecode counts, drop-frame included; a whole run keeps the source's."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from vsr.video.timecode import from_frames, shifted, to_frames

REPO = Path(__file__).resolve().parents[2]
TINY = ["--weights", "random", "--config", "edvr-tiny", "--backend", "torch", "--threads", "1", "--quiet"]
NTSC, NTSC60, PAL = Fraction(30000, 1001), Fraction(60000, 1001), Fraction(25)


def test_drop_frame_counts_as_smpte_does():
    """SMPTE 12M's figures: 29.97 drop-frame skips ;00 and ;01 each minute but every tenth: 10 minutes are
    17,982 frames and an hour 107,892; 59.94 skips four."""
    assert to_frames("00:01:00;02", NTSC) == (1800, True)
    assert shifted("00:00:59;29", 1, NTSC) == "00:01:00;02"
    assert shifted("00:09:59;29", 1, NTSC) == "00:10:00;00"
    assert to_frames("00:10:00;00", NTSC) == (17982, True)
    assert to_frames("01:00:00;00", NTSC) == (107892, True)
    assert from_frames(107892 * 24, NTSC, True) == "00:00:00;00"  # a day wraps
    assert shifted("00:00:59;59", 1, NTSC60) == "00:01:00;04"
    assert shifted("00:00:59:29", 1, NTSC) == "00:01:00:00"  # non-drop at 29.97 counts every number
    rng = random.Random(5)
    for rate in (NTSC, NTSC60):
        for n in rng.sample(range(107892 * 24 * (2 if rate == NTSC60 else 1)), 300):
            assert to_frames(from_frames(n, rate, True), rate) == (n, True)


def test_non_drop_timecode_and_what_is_not_one():
    assert shifted("01:00:00:00", 30, PAL) == "01:00:01:05"
    assert shifted("23:59:59:24", 1, PAL) == "00:00:00:00"
    assert shifted("10:00:00:00", 24 * 3600, Fraction(24)) == "11:00:00:00"  # an hour of 24 fps
    for odd in ("", "1:2:3", "01:00:00:25", "aa:bb:cc:dd", "01:61:00:00"):
        assert shifted(odd, 10, PAL) == odd  # not a timecode of this rate: kept as it is


def tags(path: Path) -> list:
    out = subprocess.run(["ffprobe", "-v", "error", "-show_entries", "stream=codec_tag_string:stream_tags=timecode"
                          ":format_tags=timecode", "-of", "json", str(path)], capture_output=True, text=True,
                         check=True).stdout
    d = json.loads(out)
    def tc(t: dict):
        return {k.lower(): v for k, v in t.items()}.get("timecode")
    return ([(s.get("codec_tag_string"), tc(s.get("tags", {}))) for s in d["streams"]]
            + [tc(d.get("format", {}).get("tags", {}))])


@pytest.mark.parametrize("suffix", [".mov", ".mkv"])
def test_a_trimmed_run_starts_at_its_first_frames_timecode(tmp_path, suffix):
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        pytest.skip("needs ffmpeg")
    src = tmp_path / f"in{suffix}"
    subprocess.run([ffmpeg, "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=32x24:rate=25", "-t", "2",
                    "-c:v", "libx264", "-timecode", "01:00:00:00", str(src)], check=True)
    whole, part = tmp_path / f"whole{suffix}", tmp_path / f"part{suffix}"
    for out, extra in ((whole, []), (part, ["--frames", "30:40"])):
        p = subprocess.run([sys.executable, "-m", "vsr", "upscale", str(src), str(out), *TINY, *extra],
                           capture_output=True, text=True, cwd=REPO)
        assert p.returncode == 0, p.stderr
    if suffix == ".mov":  # the video's tag and its tmcd track
        assert tags(src) == tags(whole) == [("avc1", "01:00:00:00"), ("tmcd", "01:00:00:00"), None]
        assert tags(part) == [("avc1", "01:00:01:05"), ("tmcd", "01:00:01:05"), None]
    else:  # Matroska's file-wide tag
        assert tags(src)[-1] == tags(whole)[-1] == "01:00:00:00"
        assert tags(part)[-1] == "01:00:01:05"


def test_a_trimmed_job_writes_the_timecode_of_one_pass(tmp_path):
    from vsr.jobs import JobSpec
    from vsr.pipeline.runner import RunnerSettings

    from tests.jobs.helpers import WindowBackend
    from tests.jobs.test_chunks import ENCODER, REQUEST, run_job, single_pass

    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        pytest.skip("needs ffmpeg")
    src = tmp_path / "in.mov"
    subprocess.run([ffmpeg, "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=32x24:rate=25", "-t", "2",
                    "-c:v", "libx264", "-timecode", "01:00:00:00", str(src)], check=True)
    runner = RunnerSettings(frames=(30, 40), scene_cuts="off")
    single_pass(src, tmp_path / "single.mkv", WindowBackend(), runner)  # (the tests' lossless FFV1: .mkv)
    run_job(JobSpec.from_settings(src, tmp_path / "job.mkv", REQUEST, ENCODER, runner), WindowBackend(), 4)
    assert tags(tmp_path / "job.mkv")[0][1] == tags(tmp_path / "single.mkv")[0][1] == "01:00:01:05"
