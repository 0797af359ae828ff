"""A trimmed run (``--frames A:B``, and a batch job's join of one) is its span: a subtitle cue still on screen at
frame B's end is cut to end with the video, so the file lasts as long as its video (it lasted until the cue's
end); read back by the system's ffprobe, for SubRip, ASS and mov_text, copied or converted."""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import av
import pytest

from vsr.jobs import JobSpec
from vsr.pipeline.runner import RunnerSettings
from vsr.pipeline.upscale import upscale

from tests.data import VIDEOS
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


def _segments(pts: int, *segments: tuple[int, bytes]) -> bytes:
    """PGS segments as a .sup file holds them: "PG", the 90 kHz time, the segment's type and length."""
    return b"".join(b"PG" + struct.pack(">IIBH", pts, 0, kind, len(data)) + data for kind, data in segments)


def _display_set(seconds: float, state: int, x: int = 0, width: int = 0) -> bytes:
    """One PGS display set at ``seconds``: its presentation (``state`` 0x80: an epoch start; 0: an update), a
    window; where ``width`` is given, a palette and a ``width`` x 8 object of colour 1 drawn at ``x``; where only
    ``x`` is, the epoch's object 0 drawn again there; neither: the screen cleared."""
    pts = round(seconds * 90000)
    shown = bool(width or x)
    pcs = struct.pack(">HHBHBBBB", 64, 48, 0x10, pts // 1000, state, 0, 0, int(shown))
    pcs += struct.pack(">HBBHH", 0, 0, 0, x, 8) if shown else b""
    segments = [(0x16, pcs), (0x17, struct.pack(">BBHHHH", 1, 0, 0, 8, 64, 8))]
    if width:
        rle = bytes([0x00, 0x80 | width, 1, 0x00, 0x00]) * 8  # (a run of `width` of colour 1, the line's end)
        segments += [(0x14, bytes([0, 0, 1, 235, 128, 128, 255])),
                     (0x15, struct.pack(">HBB", 0, 0, 0xC0) + (len(rle) + 4).to_bytes(3, "big")
                      + struct.pack(">HH", width, 8) + rle)]
    return _segments(pts, *segments, (0x80, b""))


# a 16-wide picture from 0.5 s, cleared at 1.5 s; a 24-wide one from 2.0 s, its object drawn again at x=20 by an
# update at 2.6 s (a display set that needs the epoch's object), cleared at 3.4 s
PGS_SETS = [(0.5, 0x80, 0, 16), (1.5, 0, 0, 0), (2.0, 0x80, 0, 24), (2.6, 0, 20, 0), (3.4, 0, 0, 0)]


@pytest.fixture(scope="module")
def pgs(tmp_path_factory) -> Path:
    """4 s of 25 fps video with PGS subtitles in Matroska (PGS_SETS), muxed by FFmpeg from a .sup file."""
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        pytest.skip("needs ffmpeg")
    d = tmp_path_factory.mktemp("pgs")
    (d / "subs.sup").write_bytes(b"".join(_display_set(*s) for s in PGS_SETS))
    subprocess.run([ffmpeg, "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=64x48:rate=25", "-copyts", "-i",
                    str(d / "subs.sup"), "-t", "4", "-c:v", "libx264", "-g", "10", "-c:s", "copy", str(d / "pgs.mkv")],
                   check=True)
    return d / "pgs.mkv"


def pictures(path: Path) -> list[tuple[Fraction, list[tuple[int, int]]]]:
    """The PGS display sets of ``path`` as FFmpeg decodes them: (time, the (x, width) of each picture shown)."""
    with av.open(str(path)) as c:
        st = c.streams.subtitles[0]
        return [(p.pts * p.time_base, [(r.x, r.width) for r in p.decode()]) for p in c.demux(st) if p.size]


@pytest.mark.parametrize("frames, want", [
    ((30, 75), [(0, [(0, 16)]), (Fraction(3, 10), []), (Fraction(4, 5), [(0, 24)]), (Fraction(7, 5), [(20, 24)])]),
    # from 2.8 s: the update at 2.6 s is on screen, drawn with the object of the epoch's start at 2.0 s
    ((70, 95), [(0, [(0, 24)]), (0, [(20, 24)]), (Fraction(3, 5), [])]),
])
def test_a_pgs_picture_on_screen_at_frame_a_starts_there(pgs, tmp_path, frames, want):
    """It was left out (a display set has no duration: only the set after it takes it off), the output starting
    without the picture the source showed at frame A."""
    assert pictures(pgs)[0] == (Fraction(1, 2), [(0, 16)])  # (the source's, as FFmpeg reads them)
    single_pass(pgs, tmp_path / "out.mkv", WindowBackend(), RunnerSettings(frames=frames))
    assert pictures(tmp_path / "out.mkv") == want


def test_a_chunked_jobs_join_carries_the_pgs_picture_as_one_pass_does(pgs, tmp_path):
    runner = RunnerSettings(frames=(30, 75), scene_cuts="off")
    spec = JobSpec.from_settings(pgs, tmp_path / "job.mkv", REQUEST, ENCODER, runner)
    run_job(spec, WindowBackend(), chunk_frames=16)
    assert pictures(tmp_path / "job.mkv")[:2] == [(0, [(0, 16)]), (Fraction(3, 10), [])]


def test_a_pgs_epoch_too_long_to_keep_is_said_in_one_line(pgs, tmp_path, monkeypatch):
    """Memory stays bounded: display sets before frame A past MAX_HELD are not kept, and the picture they drew
    is said to be dropped."""
    monkeypatch.setattr("vsr.video.trimmed.MAX_HELD", 1)
    with pytest.warns(UserWarning, match=r"^the PGS subtitle picture on screen at the first frame \(stream 1\) is "
                                         r"dropped: its display sets before it run over 1 packets$"):
        upscale(pgs, tmp_path / "out.mkv", backend=WindowBackend(), encoder=ENCODER,
                runner=RunnerSettings(frames=(70, 95)))
    assert pictures(tmp_path / "out.mkv") == [(Fraction(3, 5), [])]



def stream_ends(path: Path) -> dict[str, Fraction]:
    """Where each stream of ``path`` ends by ffprobe: its start plus its duration (Matroska: its DURATION tag, the
    end of its latest packet), and where its decoded audio ends (``audio decoded``: what a player plays)."""
    out = json.loads(subprocess.run(
        ["ffprobe", "-v", "error", "-of", "json", "-show_entries",
         "stream=codec_type,start_time,duration,sample_rate:stream_tags=DURATION", str(path)],
        capture_output=True, text=True, check=True).stdout)
    ends = {}
    for st in out["streams"]:
        tag = st.get("tags", {}).get("DURATION")
        h, m, s = tag.split(":") if tag else (0, 0, Fraction(st["start_time"]) + Fraction(st["duration"]))
        ends[st["codec_type"]] = 3600 * int(h) + 60 * int(m) + Fraction(s)
    frames = json.loads(subprocess.run(
        ["ffprobe", "-v", "error", "-of", "json", "-select_streams", "a", "-show_entries",
         "frame=pts_time,nb_samples", str(path)], capture_output=True, text=True, check=True).stdout)
    last, [rate] = frames["frames"][-1], [int(st["sample_rate"]) for st in out["streams"] if "sample_rate" in st]
    ends["audio decoded"] = Fraction(last["pts_time"]) + Fraction(last["nb_samples"], rate)
    return ends


@pytest.mark.parametrize("suffix", [".mp4", ".mkv"])
def test_a_trimmed_runs_audio_ends_with_its_video(tmp_path, suffix):
    """Frames 5:19 (14 frames of 2998/90000 s, 0.4664 s; AAC at 48 kHz, 1024-sample packets): the last audio
    packet kept, which starts before the video's end, ran 19 ms past it.  Now it is cut there: the MP4 edit list
    ends there (to its millisecond), Matroska's DiscardPadding drops the samples past it, which FFmpeg's decoder
    plays (its block times: milliseconds)."""
    src = VIDEOS / "h264_aac_320x240_29.97fps_1.2s_realshort.mp4"
    single_pass(src, tmp_path / f"out{suffix}", WindowBackend(), RunnerSettings(frames=(5, 19)))
    ends, video_end = stream_ends(tmp_path / f"out{suffix}"), Fraction(14 * 2998, 90000)
    assert ends["video"] == pytest.approx(video_end, abs=1e-3)
    assert ends["audio"] == pytest.approx(video_end, abs=1e-3)
    if suffix == ".mkv":  # (FFmpeg's mov demuxer does not cut the decoded samples to the edit list's end)
        assert ends["audio decoded"] == pytest.approx(video_end, abs=1e-3)


def test_a_chunked_jobs_join_cuts_the_audio_as_one_pass_does(tmp_path):
    spec = JobSpec.from_settings(VIDEOS / "h264_aac_320x240_29.97fps_1.2s_realshort.mp4", tmp_path / "job.mkv",
                                 REQUEST, ENCODER, RunnerSettings(frames=(5, 19), scene_cuts="off"))
    run_job(spec, WindowBackend(), chunk_frames=6)
    ends = stream_ends(tmp_path / "job.mkv")
    video_end = Fraction(14 * 2998, 90000)
    assert (ends["audio"], ends["audio decoded"]) == pytest.approx((video_end, video_end), abs=1e-3)
