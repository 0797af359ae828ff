"""A source's chapters come out at the times the output plays them: as they are in a whole run, moved back and cut
to the span of a ``--frames A:B`` run, the same through a batch job's join; read back by the system's ffprobe."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from vsr.jobs import JobSpec
from vsr.pipeline.runner import RunnerSettings
from vsr.video.chapters import CHAPTER_MUXERS

from tests.jobs.helpers import WindowBackend
from tests.jobs.test_chunks import ENCODER, REQUEST, run_job, single_pass

REPO = Path(__file__).resolve().parents[2]
TINY = ["--weights", "random", "--config", "edvr-tiny", "--backend", "torch", "--threads", "1", "--quiet"]
CHAPTERS = [(0, 2000, "Intro"), (2000, 3000, "Main part"), (3000, 4000, "Credits — ünïcode")]


@pytest.fixture(scope="module")
def chaptered(tmp_path_factory) -> Path:
    """4 s of 25 fps video with AAC audio and three chapters (ffmpeg's metadata file), in Matroska."""
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        pytest.skip("needs ffmpeg")
    d = tmp_path_factory.mktemp("chapters")
    meta = d / "chapters.txt"
    meta.write_text(";FFMETADATA1\n" + "".join(f"[CHAPTER]\nTIMEBASE=1/1000\nSTART={a}\nEND={b}\ntitle={t}\n"
                                               for a, b, t in CHAPTERS), encoding="utf-8")
    path = d / "in.mkv"
    subprocess.run([ffmpeg, "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=32x24:rate=25", "-f", "lavfi", "-i",
                    "sine=frequency=300:sample_rate=48000", "-i", str(meta), "-map", "0", "-map", "1",
                    "-map_chapters", "2", "-t", "4", "-c:v", "libx264", "-g", "10", "-c:a", "aac", str(path)],
                   check=True)
    return path


def chapters(path: Path) -> list[tuple[Fraction, Fraction, str]]:
    out = subprocess.run(["ffprobe", "-v", "error", "-show_chapters", "-of", "json", str(path)], capture_output=True,
                         text=True, check=True).stdout
    return [(Fraction(c["start_time"]), Fraction(c["end_time"]), c.get("tags", {}).get("title"))
            for c in json.loads(out)["chapters"]]


def first_pts_s(path: Path) -> Fraction:
    out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries", "frame=pts_time",
                          "-read_intervals", "%+#1", "-of", "csv=p=0", str(path)], capture_output=True, text=True,
                         check=True).stdout
    return Fraction(out.split()[0].strip(","))


def vsr(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vsr", *map(str, args)], capture_output=True, text=True, cwd=REPO)


@pytest.mark.parametrize("suffix", [".mkv", ".mp4"])
def test_a_whole_run_keeps_the_chapters(chaptered, tmp_path, suffix):
    out = tmp_path / f"out{suffix}"
    p = vsr("upscale", chaptered, out, *TINY)
    assert p.returncode == 0, p.stderr
    assert chapters(out) == chapters(chaptered) == [(Fraction(a, 1000), Fraction(b, 1000), t)
                                                    for a, b, t in CHAPTERS]
    if suffix == ".mp4":  # an MP4's chapters are also a text track, hidden by FFmpeg's reader: not "left out"
        again = vsr("upscale", out, tmp_path / "again.mp4", *TINY[:-1])
        assert again.returncode == 0 and "cannot follow" not in again.stderr, again.stderr
        assert chapters(tmp_path / "again.mp4") == chapters(out)


@pytest.mark.parametrize("suffix", [".mkv", ".mp4"])
def test_a_trimmed_run_moves_them_back_and_cuts_them_to_its_span(chaptered, tmp_path, suffix):
    """Frames 30:80 (source 1.2 s + the first frame's time, for 2 s): Intro's last 0.8 s (from 0, as the source's
    first chapter), Main part, Credits' first 0.2 s; the output starts where the source starts."""
    out = tmp_path / f"out{suffix}"
    p = vsr("upscale", chaptered, out, *TINY, "--frames", "30:80")
    assert p.returncode == 0, p.stderr
    t0 = first_pts_s(chaptered)  # the source's first frame (after the audio's priming)
    assert first_pts_s(out) == t0
    a = t0 + Fraction(30, 25)  # frame 30's time in the source: the output's t0
    end = a + 2
    want = [(Fraction(s, 1000) - a + t0 if Fraction(s, 1000) >= a else 0, min(Fraction(e, 1000), end) - a + t0, t)
            for s, e, t in CHAPTERS]
    got = chapters(out)
    assert [c[2] for c in got] == [c[2] for c in want]
    tick = Fraction(1, 1000)  # mp4 keeps milliseconds
    assert all(abs(g[0] - w[0]) <= tick and abs(g[1] - w[1]) <= tick for g, w in zip(got, want)), (got, want)


@pytest.mark.parametrize("frames", [(0, None), (30, 80)])
def test_a_chunked_job_writes_the_chapters_of_one_pass(chaptered, tmp_path, frames):
    runner = RunnerSettings(frames=frames, scene_cuts="off")
    single_pass(chaptered, tmp_path / "single.mkv", WindowBackend(), runner)
    spec = JobSpec.from_settings(chaptered, tmp_path / "job.mkv", REQUEST, ENCODER, runner)
    run_job(spec, WindowBackend(), chunk_frames=16)
    assert chapters(tmp_path / "job.mkv") == chapters(tmp_path / "single.mkv")
    assert len(chapters(tmp_path / "job.mkv")) == 3


def to_stream(src: Path, saved: Path, *args, stdin: bool = False) -> str:
    """``vsr upscale SRC - ARGS`` into a real pipe (``stdin``: SRC through one, ``-``), what comes out saved as
    ``saved``; its stderr."""
    up = subprocess.Popen(["cat", str(src)], stdout=subprocess.PIPE) if stdin else None
    proc = subprocess.Popen([sys.executable, "-m", "vsr", "upscale", "-" if stdin else str(src), "-", *TINY, *args],
                            stdin=up.stdout if up else None, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    if up is not None:
        up.stdout.close()
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0 and (up is None or up.wait(60) == 0), err.decode()
    saved.write_bytes(out)
    return err.decode()


@pytest.mark.parametrize("fmt, codec", [("matroska", "libx264"), ("nut", "ffv1")])
@pytest.mark.parametrize("frames", [None, "30:80", "30:"])
def test_a_stream_has_the_chapters_of_the_file_run(chaptered, tmp_path, fmt, codec, frames):
    """A stream's header is written first and never again (a trimmed one had none: Matroska's muxer, given them at
    the end, writes them after the last cluster, where ffprobe does not look): a trimmed stream's are cut to the
    span its file's packets say, as the file run's are to the span its frames had."""
    trim = ["--frames", frames] if frames else []
    p = vsr("upscale", chaptered, tmp_path / "file.mkv", *TINY, "-c", codec, *trim)
    assert p.returncode == 0, p.stderr
    err = to_stream(chaptered, tmp_path / "stream.out", "--format", fmt, "-c", codec, *trim)
    assert "chapters" not in err, err
    want = chapters(tmp_path / "file.mkv")
    assert chapters(tmp_path / "stream.out") == want and len(want) == 3


def test_a_trimmed_stream_from_a_stream_says_its_chapters_are_left_out(chaptered, tmp_path):
    """Read once from a pipe, the source cannot say its span's times before the output's header: one line."""
    err = to_stream(chaptered, tmp_path / "stream.mkv", "--format", "matroska", "--frames", "30:80", stdin=True)
    said = [ln for ln in err.splitlines() if "chapters" in ln]
    assert said == ["vsr: warning: the source's chapters are left out: a trimmed matroska stream holds them in its "
                    "header, written before its frames, and where its span starts and ends cannot be known then (the "
                    "source is a stream, read once); a file output keeps them"], err
    assert chapters(tmp_path / "stream.mkv") == []
    # untrimmed, the source's own are written
    to_stream(chaptered, tmp_path / "whole.mkv", "--format", "matroska", stdin=True)
    assert chapters(tmp_path / "whole.mkv") == chapters(chaptered)


@pytest.mark.parametrize("suffix", [".ts", ".avi"])
def test_an_output_that_cannot_hold_chapters_says_they_are_dropped(chaptered, tmp_path, suffix):
    """MPEG-TS, AVI (and Y4M, FLV, MXF...) drop a source's chapters: that was said of its audio and subtitles, never
    of its chapters."""
    out = tmp_path / f"out{suffix}"
    p = vsr("upscale", chaptered, out, *TINY)
    assert p.returncode == 0, p.stderr
    said = [ln for ln in p.stderr.splitlines() if "chapters" in ln]
    muxer = {".ts": "mpegts", ".avi": "avi"}[suffix]
    assert said == [f"vsr: warning: {muxer} cannot hold the source's chapters: dropped 3 chapters (.mkv and .mp4 "
                    "keep them)"], p.stderr
    assert chapters(out) == []


def test_a_y4m_stream_says_its_chapters_are_dropped(chaptered, tmp_path):
    err = to_stream(chaptered, tmp_path / "stream.y4m")
    assert [ln for ln in err.splitlines() if "chapters" in ln] == [
        "vsr: warning: yuv4mpegpipe cannot hold the source's chapters: dropped 3 chapters (.mkv and .mp4 keep them)"]


@pytest.mark.parametrize("suffix, codec", [(".mkv", "libx264"), (".webm", "libvpx-vp9"), (".mp4", "libx264"),
                                           (".mov", "libx264"), (".3gp", "libx264"), (".3g2", "libx264"),
                                           (".m4v", "libx264"), (".ismv", "libx264"), (".f4v", "libx264"),
                                           (".nut", "libx264"), (".wmv", "wmv2"), (".avi", "mpeg4"),
                                           (".ts", "libx264"), (".flv", "libx264"), (".mxf", "mpeg2video"),
                                           (".mpg", "mpeg2video"), (".gif", "gif")])
def test_the_muxers_said_to_hold_chapters_are_those_that_write_them(tmp_path, suffix, codec):
    """:data:`CHAPTER_MUXERS` against FFmpeg itself: a file with two chapters, read back."""
    path = tmp_path / f"c{suffix}"
    tb = Fraction(1, 1000)
    with av.open(str(path), "w") as oc:
        s = oc.add_stream(codec, rate=25)
        s.width, s.height, s.pix_fmt = 64, 48, "rgb8" if codec == "gif" else "yuv420p"
        oc.set_chapters([{"id": i + 1, "start": i * 100, "end": i * 100 + 100, "time_base": tb, "metadata": {}}
                         for i in range(2)])
        for i in range(10):
            frame = av.VideoFrame.from_ndarray(np.zeros((48, 64, 3), np.uint8), format="rgb24")
            frame.pts = i
            oc.mux(s.encode(frame))
        oc.mux(s.encode())
        muxer = oc.format.name
    with av.open(str(path)) as c:
        kept = len(c.chapters())
    assert (kept == 2) == (muxer in CHAPTER_MUXERS), (muxer, kept)
