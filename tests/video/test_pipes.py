"""`vsr upscale - OUT` and `vsr upscale IN -`: real `ffmpeg` processes on both ends of vsr, frame-exact against the
file-to-file run on the same input.

Inputs are two real clips of the shared data (tests/data.py), cut by ffmpeg to a 32x24 crop of a few frames (EDVR-tiny
stays fast) and made into the stream format under test; the same ffmpeg command writing a file gives the
file-to-file run its input (a container's tags, e.g. Matroska's chroma siting, change the pixels, so both runs
must read the same container)."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from tests.data import VIDEOS
from vsr.cli import main

REALSHORT = VIDEOS / "h264_aac_320x240_29.97fps_1.2s_realshort.mp4"  # H.264 + AAC, 45000/1499 fps
COCKATOO = VIDEOS / "h264yuv444_mp3_1280x720_20fps_14s_cockatoo.mp4"  # H.264 4:4:4 + MP3, 20 fps
FFMPEG = shutil.which("ffmpeg")
# one thread in every run: the in-process file-to-file run and the piped one must sum in the same order
TINY = ["--weights", "random", "--config", "edvr-tiny", "--backend", "torch", "--threads", "1"]
VSR = [sys.executable, "-m", "vsr"]

pytestmark = pytest.mark.skipif(FFMPEG is None,
                                reason="needs the ffmpeg command (Debian's ffmpeg; .ci/run installs it)")

# (clip, its crop, seconds, how ffmpeg streams it into vsr, vsr's --format and codec, how ffmpeg stores vsr's stream)
CASES = {
    "nut-in-nut-out": (REALSHORT, "32:24:140:100", "0.25", ["-c:v", "ffv1", "-c:a", "copy", "-f", "nut"],
                       ["--format", "nut", "-c", "ffv1"], ["-f", "nut", "-i", "-", "-c", "copy"]),
    "y4m-in-y4m-out": (COCKATOO, "32:24:600:300", "0.3", ["-f", "yuv4mpegpipe"],
                       [], ["-i", "-", "-c:v", "ffv1"]),
    "mpegts-in-nut-out": (REALSHORT, "32:24:100:60", "0.25",
                          ["-c:v", "libx264", "-qp", "0", "-preset", "ultrafast", "-c:a", "copy", "-f", "mpegts"],
                          ["--format", "nut", "-c", "ffv1"], ["-f", "nut", "-i", "-", "-c", "copy"]),
    "matroska-in-matroska-out": (COCKATOO, "32:24:400:200", "0.3", ["-c:v", "ffv1", "-c:a", "copy", "-f", "matroska"],
                                 ["--format", "matroska", "-c", "ffv1"], ["-i", "-", "-c", "copy"]),
}


def upstream(clip: Path, crop: str, seconds: str, fmt: list[str]) -> list[str]:
    return [FFMPEG, "-v", "error", "-nostdin", "-i", str(clip), "-t", seconds, "-vf", f"crop={crop}", *fmt]


def read_back(path: Path) -> tuple[list, list, dict]:
    """(video frames as (time in s, YUV arrays), audio packets as (time in s, bytes), the video's colour tags)."""
    frames, audio = [], []
    with av.open(str(path)) as c:
        v = c.streams.video[0]
        tags = {"range": v.codec_context.color_range, "matrix": v.codec_context.colorspace}
        for pkt in c.demux():
            if pkt.stream.type == "video":
                frames += [(Fraction(f.pts) * f.time_base, f.to_ndarray()) for f in pkt.decode()]
            elif pkt.stream.type == "audio" and pkt.pts is not None:
                audio.append((Fraction(pkt.pts) * pkt.time_base, bytes(pkt)))
    return frames, audio, tags


@pytest.mark.parametrize("case", CASES)
def test_ffmpeg_into_vsr_into_ffmpeg_equals_the_file_to_file_run(case, tmp_path, capsys):
    clip, crop, seconds, fmt_in, vsr_out, downstream = CASES[case]
    src = tmp_path / "src.stream"
    subprocess.run([*upstream(clip, crop, seconds, fmt_in), str(src)], check=True)
    base = tmp_path / "base.mkv"
    codec = vsr_out[vsr_out.index("-c") + 1] if "-c" in vsr_out else "ffv1"
    assert main(["upscale", str(src), str(base), *TINY, "-c", codec, "--quiet"]) == 0, capsys.readouterr().err

    out = tmp_path / "piped.mkv"
    up = subprocess.Popen([*upstream(clip, crop, seconds, fmt_in), "-"], stdout=subprocess.PIPE)
    mid = subprocess.Popen([*VSR, "upscale", "-", "-", *TINY, *vsr_out], stdin=up.stdout, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=False)
    up.stdout.close()
    # -copyts: ffmpeg would otherwise move the stream's start (MPEG-TS's 1.4 s) to 0, hiding vsr's timestamps
    down = subprocess.Popen([FFMPEG, "-v", "error", "-nostdin", "-copyts", *downstream, str(out)], stdin=mid.stdout)
    mid.stdout.close()
    err = mid.stderr.read().decode()
    assert (down.wait(120), mid.wait(120), up.wait(120)) == (0, 0, 0), err

    frames, audio, tags = read_back(out)
    base_frames, base_audio, base_tags = read_back(base)
    assert len(frames) == len(base_frames) >= 5
    assert [t for t, _ in frames] == [t for t, _ in base_frames]
    assert all(np.array_equal(a, b) for (_, a), (_, b) in zip(frames, base_frames))
    assert audio == base_audio and bool(audio) == (case != "y4m-in-y4m-out")  # Y4M carries none
    if case.endswith("matroska-out"):  # NUT and Y4M have no field for the matrix
        assert tags == base_tags and tags["matrix"] != 2
    if not case.startswith("matroska"):  # no length in the stream's header: progress counts frames, shows the rate
        # (stderr is a pipe here, not a terminal: whole lines, not a bar's redraws)
        assert re.search(rf"upscale: {len(frames)} frame, [0-9.]+ frame/s", err), err
    assert "Traceback" not in err


def test_mpegts_on_a_pipe_into_ffmpeg_equals_a_ts_file_of_the_same_run(tmp_path, capsys):
    """``--format mpegts`` (what streaming tools read from a pipe): H.264 by default and the AAC audio copied, as
    into a .ts file; frames, timestamps and audio through a real ffmpeg equal to the .ts file's."""
    src = tmp_path / "src.mp4"
    subprocess.run([*upstream(REALSHORT, "32:24:100:60", "0.25", ["-c:v", "libx264", "-qp", "0", "-preset",
                                                                  "ultrafast", "-c:a", "copy"]), str(src)], check=True)
    base = tmp_path / "base.ts"
    assert main(["upscale", str(src), str(base), *TINY, "--quiet"]) == 0, capsys.readouterr().err

    out = tmp_path / "piped.ts"
    mid = subprocess.Popen([*VSR, "upscale", str(src), "-", *TINY, "--format", "mpegts", "--quiet"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # -copyts and mpegts_copyts: ffmpeg would otherwise move the stream's start, hiding vsr's timestamps
    down = subprocess.Popen([FFMPEG, "-v", "error", "-nostdin", "-copyts", "-i", "-", "-c", "copy",
                             "-mpegts_copyts", "1", str(out)], stdin=mid.stdout)
    mid.stdout.close()
    err = mid.stderr.read().decode()
    assert (down.wait(120), mid.wait(120)) == (0, 0), err

    def codecs(path: Path) -> list[str]:
        with av.open(str(path)) as c:
            return [s.codec_context.name for s in c.streams]

    assert codecs(out) == codecs(base) == ["h264", "aac"]
    frames, audio, tags = read_back(out)
    base_frames, base_audio, base_tags = read_back(base)
    assert len(frames) == len(base_frames) >= 5
    assert [t for t, _ in frames] == [t for t, _ in base_frames]
    assert all(np.array_equal(a, b) for (_, a), (_, b) in zip(frames, base_frames))
    assert tags == base_tags
    # (ffmpeg's demuxer cuts a remuxed stream's AAC into other packets than a PES each: the same bytes, start)
    assert audio[0][0] == base_audio[0][0] and b"".join(a for _, a in audio) == b"".join(a for _, a in base_audio)
    assert audio and "Traceback" not in err


def test_a_reader_closing_the_pipe_ends_the_run_with_one_line(tmp_path):
    src = tmp_path / "src.y4m"
    subprocess.run([*upstream(COCKATOO, "32:24:600:300", "0.5", ["-f", "yuv4mpegpipe"]), str(src)], check=True)
    # 10 frames of 128x96 4:4:4 are 360 kB, more than a pipe holds: vsr must wait for its reader, who leaves
    proc = subprocess.Popen([*VSR, "upscale", str(src), "-", *TINY], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    head = proc.stdout.read(1000)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(120) == 141, err
    assert head.startswith(b"YUV4MPEG2 W128 H96 ")
    # (the status lines of the run's preparation, "vsr: loading model..." and on, end with "...")
    lines = [ln for ln in err.splitlines() if ln.startswith("vsr: ") and "random weights" not in ln
             and not ln.endswith("...")]
    assert len(lines) == 1 and re.fullmatch(r"vsr: error: standard output was closed by its reader after \d+ frames.*",
                                            lines[0]), err
    assert "Traceback" not in err and "Exception ignored" not in err and "BrokenPipe" not in err


def test_what_is_not_a_video_on_standard_input_is_one_line(tmp_path):
    proc = subprocess.run([*VSR, "upscale", "-", "out.mkv", *TINY], cwd=tmp_path, input=b"not a video\n" * 50,
                          capture_output=True)
    err = proc.stderr.decode()
    assert proc.returncode == 2 and err.count("\n") == 1 and "not a video stream on standard input" in err, err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args, expect", [
    (["upscale", "in.mkv", "out.mkv", "--format", "nut"], "--format nut is for output - (standard output)"),
    (["upscale", "-", "-", "--format", "avi"], "invalid choice: 'avi'"),
    (["jobs", "add", "-", "--out-dir", "jobs-out", "--store", "q.db"], "a job's input must be a file"),
    (["preview", "-"], "vsr preview needs a file"),
])
def test_pipe_misuse_is_one_line(tmp_path, monkeypatch, capsys, args, expect):
    monkeypatch.chdir(tmp_path)
    shutil.copy(REALSHORT, "in.mkv")
    try:
        code = main([*args, *TINY[:4]])
    except SystemExit as e:  # argparse
        code = e.code
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and expect in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.mkv"]


def test_adts_audio_into_matroska_on_a_pipe_is_refused_in_one_line(tmp_path):
    src = tmp_path / "in.ts"
    subprocess.run([*upstream(REALSHORT, "32:24:0:0", "0.2", ["-c:v", "libx264", "-c:a", "copy", "-f", "mpegts"]),
                    str(src)], check=True)
    proc = subprocess.run([*VSR, "upscale", str(src), "-", "--format", "matroska", *TINY], capture_output=True)
    err = proc.stderr.decode()
    assert proc.returncode == 2 and proc.stdout == b"" and "use --format nut" in err
    assert [ln for ln in err.splitlines() if "random weights" not in ln] == [err.splitlines()[-1]]


def test_a_stop_while_standard_input_sends_nothing_ends_the_run(tmp_path):
    """SIGTERM while the producer on standard input had sent nothing more (a stalled live stream) waited, with
    the temporary output there, until the producer sent more or ended: the decode stage was inside a read of
    standard input, and a stop waits for it.  Now the run stops at once: exit 130, nothing left."""
    src = subprocess.run([FFMPEG, "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=64x48:rate=10", "-frames:v", "20",
                          "-f", "yuv4mpegpipe", "-"], capture_output=True, check=True).stdout
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.Popen([*VSR, "upscale", "-", str(out / "o.mkv"), *TINY], stdin=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        proc.stdin.write(src)  # (not a whole number of reads: the last read of the old code waited for more)
        proc.stdin.flush()
        for _ in range(1200):  # the run is under way once its temporary output is there
            if list(out.iterdir()) or proc.poll() is not None:
                break
            time.sleep(0.1)
        assert list(out.iterdir()), "the run never opened its output"
        time.sleep(1)  # (its frames decoded, the decode stage waits for standard input)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)  # (standard input kept open: communicate() would close it)
        except subprocess.TimeoutExpired:
            pytest.fail("SIGTERM did not stop a run waiting for standard input")
        err = proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()
        proc.stdin.close()
    assert proc.returncode == 130 and err.decode().splitlines()[-1] == "vsr: interrupted", err
    assert list(out.iterdir()) == []


def _file_size_limit(size: int):
    """For preexec_fn: writes past ``size`` bytes of a file fail with EFBIG (a full disk, with no mount)."""
    def limit():
        import resource

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # (else the limit kills the process)
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, resource.RLIM_INFINITY))
    return limit


def test_a_failure_while_standard_input_sends_nothing_ends_the_run(tmp_path):
    """The output's disk full while the producer on standard input had sent nothing more: the error waited, with
    the temporary output there, until the producer sent more or ended (the decode stage, inside a read of
    standard input, was waited for).  Now it is said at once: exit 1, nothing left."""
    src = subprocess.run([FFMPEG, "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=64x48:rate=10", "-frames:v", "20",
                          "-f", "yuv4mpegpipe", "-"], capture_output=True, check=True).stdout
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.Popen([*VSR, "upscale", "-", str(out / "o.nut"), *TINY, "-c", "ffv1"], stdin=subprocess.PIPE,
                            stderr=subprocess.PIPE, preexec_fn=_file_size_limit(30_000))
    try:
        proc.stdin.write(src)
        proc.stdin.flush()
        try:
            proc.wait(timeout=60)  # (standard input kept open)
        except subprocess.TimeoutExpired:
            pytest.fail("a run that failed waited for standard input")
        err = proc.stderr.read().decode()
    finally:
        proc.kill()
        proc.wait()
        proc.stdin.close()
    said = f"vsr: error: cannot write {out / 'o.nut'}: File too large"
    assert proc.returncode == 1 and err.splitlines()[-1] == said, err
    assert list(out.iterdir()) == []
