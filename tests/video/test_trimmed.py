"""A trimmed run (``--frames A:B``, and a batch job's join of one) is its span: a subtitle cue still on screen at
frame B's end is cut to end with the video, so the file lasts as long as its video (it lasted until the cue's
end); read back by the system's ffprobe, for SubRip, ASS and mov_text, copied or converted."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import av
import pytest

from vsr.jobs import JobSpec
from vsr.pipeline.runner import RunnerSettings

from tests.jobs.helpers import WindowBackend
from tests.jobs.test_chunks import ENCODER, REQUEST, run_job, single_pass

REPO = Path(__file__).resolve().parents[2]
TINY = ["--weights", "random", "--config", "edvr-tiny", "--backend", "torch", "--threads", "1", "--quiet"]
CUES = [("00:00:00,500", "00:00:01,500", "first"), ("00:00:02,800", "00:00:03,600", "crossing"),
        ("00:00:03,700", "00:00:03,900", "after")]
# frames 30:75 of 25 fps from 0: source 1.2 s to 3.0 s, the output 0 to 1.8 s; "first" is on at its start (for the
# 0.3 s it had left), "crossing" runs past its end (cut to 0.2 s), "after" is after it
WANT = [(Fraction(0), Fraction(3, 10), "first"), (Fraction(8, 5), Fraction(1, 5), "crossing")]


@pytest.fixture(scope="module")
def subtitled(tmp_path_factory) -> dict[str, Path]:
    """4 s of 25 fps video (no audio: the file's length is its video's and its subtitles') with three cues, as
    SubRip and ASS in Matroska and mov_text in MP4."""
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        pytest.skip("needs ffmpeg")
    d = tmp_path_factory.mktemp("subtitled")
    srt = d / "cues.srt"
    srt.write_text("".join(f"{i}\n{a} --> {b}\n{t}\n\n" for i, (a, b, t) in enumerate(CUES, 1)))
    out = {}
    for name, codec in (("srt.mkv", "srt"), ("ass.mkv", "ass"), ("mov_text.mp4", "mov_text")):
        out[name] = d / name
        subprocess.run([ffmpeg, "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=32x24:rate=25", "-i", str(srt),
                        "-t", "4", "-c:v", "libx264", "-g", "10", "-c:s", codec, str(out[name])], check=True)
    return out


def probed(path: Path) -> tuple[Fraction, Fraction, list[tuple[Fraction, Fraction, str]]]:
    """(the file's duration by ffprobe, where its video ends, its subtitle cues as (start, duration, last word))."""
    out = subprocess.run(["ffprobe", "-v", "error", "-of", "json", "-show_entries", "format=duration", str(path)],
                         capture_output=True, text=True, check=True).stdout
    with av.open(str(path)) as c:
        packets = [p for p in c.demux(c.streams.video[0], c.streams.subtitles[0]) if p.size]
        end = max((p.pts + p.duration) * p.time_base for p in packets if p.stream.type == "video")
        cues = [(p.pts * p.time_base, p.duration * p.time_base, re.findall(r"[a-z]+", bytes(p).decode())[-1])
                for p in packets if p.stream.type == "subtitle" and p.size > 2]  # (mp4's gaps: empty samples)
    return Fraction(json.loads(out)["format"]["duration"]), end, cues


def vsr(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vsr", *map(str, args)], capture_output=True, text=True, cwd=REPO)


@pytest.mark.parametrize("src, suffix", [("srt.mkv", ".mkv"), ("ass.mkv", ".mkv"), ("mov_text.mp4", ".mp4"),
                                         ("srt.mkv", ".mp4")])  # (the last: converted to mov_text)
def test_a_cue_past_the_last_frame_ends_with_the_video(subtitled, tmp_path, src, suffix):
    out = tmp_path / f"out{suffix}"
    p = vsr("upscale", subtitled[src], out, *TINY, "--frames", "30:75")
    assert p.returncode == 0, p.stderr
    duration, end, cues = probed(out)
    assert end == Fraction(9, 5) and duration == end  # (it was 2.4 s: the cue's end)
    assert cues == WANT


def test_a_cue_the_frames_reach_is_kept_whole(subtitled, tmp_path):
    """Frames 30:95 end at 3.8 s: "crossing" ends before, kept as it is; "after" (3.7 to 3.9 s) is cut."""
    out = tmp_path / "out.mkv"
    p = vsr("upscale", subtitled["srt.mkv"], out, *TINY, "--frames", "30:95")
    assert p.returncode == 0, p.stderr
    duration, end, cues = probed(out)
    assert end == duration == Fraction(13, 5)
    assert cues == [WANT[0], (Fraction(8, 5), Fraction(4, 5), "crossing"), (Fraction(5, 2), Fraction(1, 10), "after")]


def test_a_chunked_jobs_join_cuts_the_cue_as_one_pass_does(subtitled, tmp_path):
    runner = RunnerSettings(frames=(30, 75), scene_cuts="off")
    single_pass(subtitled["srt.mkv"], tmp_path / "single.mkv", WindowBackend(), runner)
    spec = JobSpec.from_settings(subtitled["srt.mkv"], tmp_path / "job.mkv", REQUEST, ENCODER, runner)
    run_job(spec, WindowBackend(), chunk_frames=16)
    assert probed(tmp_path / "job.mkv") == probed(tmp_path / "single.mkv") == (Fraction(9, 5), Fraction(9, 5), WANT)


def test_past_the_cap_a_cue_goes_in_as_it_is(subtitled, tmp_path, monkeypatch):
    """Memory stays bounded: past MAX_HELD held cues the oldest is muxed whole, as before."""
    monkeypatch.setattr("vsr.video.trimmed.MAX_HELD", 0)
    single_pass(subtitled["srt.mkv"], tmp_path / "out.mkv", WindowBackend(), RunnerSettings(frames=(30, 75)))
    assert probed(tmp_path / "out.mkv")[2] == [WANT[0], (Fraction(8, 5), Fraction(4, 5), "crossing")]
