"""Interlaced sources (vsr.video.interlace): detected from the stream and its frames, deinterlaced as FFmpeg's own
bwdif does, the same frames at the same timestamps in their own pixel format, through ``vsr upscale`` (said in
one line, in the report, off with ``--deinterlace off``) and through a chunked job as through one pass."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import av
import numpy as np
import pytest

from vsr.jobs import JobSpec
from vsr.pipeline.runner import RunnerSettings
from vsr.video import open_source
from vsr.video.interlace import DOUBLE_ARGS, FILTER_ARGS, deinterlaced, field_order

from tests.jobs.helpers import WindowBackend
from tests.jobs.test_chunks import ENCODER, REQUEST, decoded, run_job, single_pass
from tests.video.tools import ffmpeg

REPO = Path(__file__).resolve().parents[2]
TINY = ["--weights", "random", "--config", "edvr-tiny", "--threads", "1"]


def interlaced(path: Path, order: str = "tff", codec: list | None = None, frames: int = 24) -> Path:
    """A 50-fields-a-second test pattern woven into 25 interlaced frames a second (moving: every frame combs)."""
    weave = "interleave_top" if order == "tff" else "interleave_bottom"
    codec = codec or ["-c:v", "libx264", "-flags", "+ilme+ildct", "-x264-params", f"{order}=1", "-pix_fmt",
                      "yuv420p"]
    subprocess.run([ffmpeg(), "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=96x64:rate=50", "-frames:v",
                    str(frames), "-vf", f"tinterlace=mode={weave},setfield={order}", *codec, str(path)], check=True)
    return path


def planes(frame: av.VideoFrame) -> bytes:
    """The frame's picture, plane by plane, without the rows' padding."""
    return b"".join(bytes(np.frombuffer(p, np.uint8).reshape(p.height, p.line_size)[:, :_row_bytes(frame, i)])
                    for i, p in enumerate(frame.planes))


def _row_bytes(frame: av.VideoFrame, i: int) -> int:
    """Bytes of picture in a row of plane ``i`` (the rest of ``line_size`` is padding)."""
    return frame.planes[i].width * (2 if frame.format.name in ("uyvy422", "yuyv422") else 1)


def test_the_field_order_comes_from_the_stream_and_its_frames(tmp_path):
    for order, codec, want in (
            ("tff", None, "top field first"),
            ("bff", ["-c:v", "mpeg2video", "-flags", "+ilme+ildct", "-top", "0"], "bottom field first")):
        path = interlaced(tmp_path / f"{order}.{'mp4' if codec is None else 'ts'}", order, codec)
        with av.open(str(path)) as c:
            st = c.streams.video[0]
            assert field_order(st, next(c.decode(st))) == want
    progressive = tmp_path / "p.mp4"
    subprocess.run([ffmpeg(), "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=96x64:rate=25", "-frames:v", "3",
                    "-c:v", "libx264", "-pix_fmt", "yuv420p", str(progressive)], check=True)
    with av.open(str(progressive)) as c:
        st = c.streams.video[0]
        assert field_order(st, next(c.decode(st))) is None


@pytest.mark.parametrize("order,codec,pix_fmt", [
    ("tff", None, "yuv420p"),
    ("bff", ["-c:v", "mpeg2video", "-flags", "+ilme+ildct", "-top", "0"], "yuv420p"),
    ("tff", ["-c:v", "ffv1", "-pix_fmt", "yuv411p", "-field_order", "tt"], "yuv411p"),  # NTSC DV's sampling
    ("tff", ["-c:v", "rawvideo", "-pix_fmt", "uyvy422", "-field_order", "tt"], "uyvy422"),  # packed: repacked
])
def test_frames_are_deinterlaced_as_ffmpeg_does_it(tmp_path, order, codec, pix_fmt):
    suffix = ".mov" if pix_fmt == "uyvy422" else ".mkv"
    src = interlaced(tmp_path / f"in{suffix}", order, codec)
    with av.open(str(src)) as c:
        woven = [(f.pts, f.duration, planes(f)) for f in c.decode(video=0)]
    with av.open(str(src)) as c:
        st = c.streams.video[0]
        out = [(f.pts, f.duration, f.format.name, planes(f)) for f in deinterlaced(c.decode(st), st)]
    assert [o[:2] for o in out] == [w[:2] for w in woven]  # the same frames at the same times
    assert {o[2] for o in out} == {pix_fmt}
    # FFmpeg's own (the system's ffmpeg, another version of the filter: its first frame's top rows differ)
    ref = subprocess.run([ffmpeg(), "-v", "error", "-i", str(src), "-vf", f"bwdif={FILTER_ARGS}", "-f", "rawvideo",
                          "-pix_fmt", pix_fmt, "-"], capture_output=True, check=True).stdout
    size = len(out[0][3])
    ref = [ref[i:i + size] for i in range(0, len(ref), size)]
    assert len(ref) == len(out) and all(len(r) == size for r in ref)
    assert [o[3] for o in out[1:]] == ref[1:]  # byte for byte
    first, want = (np.frombuffer(x, np.uint8) for x in (out[0][3], ref[0]))
    assert (first != want).mean() < 0.1  # a few top rows
    assert sum(w[2] != r for w, r in zip(woven, ref)) == len(ref)  # the woven frames are not it: this can tell


def vsr(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vsr", *map(str, args)], capture_output=True, text=True, cwd=REPO)


def test_upscale_deinterlaces_says_so_once_and_off_keeps_the_frames(tmp_path):
    src = interlaced(tmp_path / "in.mp4", frames=8)
    outs = {}
    for mode in ("auto", "off"):
        out, report = tmp_path / f"{mode}.mkv", tmp_path / f"{mode}.json"
        p = vsr("upscale", src, out, *TINY, "--frames", "0:4", "--deinterlace", mode, "-c", "ffv1",
                "--report", report)
        assert p.returncode == 0, p.stderr
        said = [line for line in p.stderr.splitlines() if "interlaced" in line]
        source = json.loads(report.read_text())["settings"]["source"]
        assert source["interlaced"] == "top field first"
        assert source["deinterlaced"] is (mode == "auto")
        assert len(said) == (1 if mode == "auto" else 0), p.stderr
        with av.open(str(out)) as c:
            outs[mode] = [(f.pts, f.to_ndarray()) for f in c.decode(video=0)]
    with av.open(str(src)) as c:
        times = [f.pts * f.time_base for f in c.decode(video=0)][:4]
    with av.open(str(tmp_path / "auto.mkv")) as c:
        assert [f.pts * f.time_base for f in c.decode(video=0)] == times
    assert any(np.abs(a[1].astype(int) - b[1]).max() > 8 for a, b in zip(outs["auto"], outs["off"]))
    p = vsr("upscale", src, tmp_path / "x.mkv", *TINY, "--deinterlace", "yes")
    assert p.returncode == 2 and "--deinterlace" in p.stderr and "Traceback" not in p.stderr


def test_a_source_opened_with_off_is_not_deinterlaced(tmp_path):
    src = interlaced(tmp_path / "in.mp4", frames=4)
    for mode, on in (("auto", True), ("off", False)):
        source = open_source(src, deinterlace=mode)
        try:
            assert source.info.interlaced == "top field first" and source.info.deinterlaced is on
        finally:
            source.close()


def test_a_chunked_job_of_an_interlaced_source_equals_one_pass(tmp_path):
    """Keyframes every 15 frames, chunks of 8, 3-frame windows: the chunk 32-40 decodes from frame 30, a
    keyframe, whose deinterlaced picture lacks the neighbour before it; no window holds it (a chunk decodes
    2 * radius frames before its first, a window reaches radius), so the job equals one pass."""
    src = interlaced(tmp_path / "in.mp4", frames=40, codec=[
        "-c:v", "libx264", "-flags", "+ilme+ildct", "-x264-params", "tff=1:keyint=15:min-keyint=15:scenecut=0",
        "-pix_fmt", "yuv420p"])
    runner = RunnerSettings(scene_cuts="off")
    single_pass(src, tmp_path / "single.mkv", WindowBackend(), runner)
    spec = JobSpec.from_settings(src, tmp_path / "job.mkv", REQUEST, ENCODER, runner)
    chunks = run_job(spec, WindowBackend())
    assert decoded(tmp_path / "job.mkv") == decoded(tmp_path / "single.mkv")
    assert [c.decode_from for c in chunks] == [0, 0, 0, 15, 30]  # entries used


def test_an_interlaced_stream_on_standard_input_is_deinterlaced_too(tmp_path):
    src = interlaced(tmp_path / "in.ts", "bff", ["-c:v", "mpeg2video", "-flags", "+ilme+ildct", "-top", "0"],
                     frames=6)
    out, report = tmp_path / "out.mkv", tmp_path / "r.json"
    with open(src, "rb") as stdin:
        p = subprocess.run([sys.executable, "-m", "vsr", "upscale", "-", str(out), *TINY, "--report", str(report)],
                           stdin=stdin, capture_output=True, text=True, cwd=REPO)
    assert p.returncode == 0, p.stderr
    assert "is interlaced (bottom field first)" in p.stderr
    assert json.loads(report.read_text())["settings"]["source"]["deinterlaced"] is True
    with av.open(str(out)) as c:
        assert sum(1 for _ in c.decode(video=0)) == 6


# ---- --deinterlace double: each field a frame -------------------------------------------------------------------

@pytest.mark.parametrize("order,codec", [
    ("tff", None),
    ("bff", ["-c:v", "mpeg2video", "-flags", "+ilme+ildct", "-top", "0"]),
])
def test_double_makes_each_field_a_frame_as_ffmpeg_does_it(tmp_path, order, codec):
    """Two frames out for each in: the first field's at twice its timestamp, the second's half a frame later, in
    half the time base; the pictures FFmpeg's own bwdif=send_field gives, byte for byte but the first two and the
    last (the system's FFmpeg 5.1 is another version of the filter: a few rows at the clip's ends differ)."""
    src = interlaced(tmp_path / "in.mkv", order, codec, frames=10)
    with av.open(str(src)) as c:
        woven = [(f.pts, f.duration) for f in c.decode(video=0)]
    with av.open(str(src)) as c:
        st = c.streams.video[0]
        out = [(f.pts, f.duration, f.time_base, planes(f)) for f in deinterlaced(c.decode(st), st, True, 40)]
        half = st.time_base / 2  # (read while open: PyAV 18.1.1 refuses a closed container's stream)
    assert [o[:3] for o in out] == [t for p, d in woven for t in ((2 * p, d, half), (2 * p + d, d, half))]
    ref = subprocess.run([ffmpeg(), "-v", "error", "-i", str(src), "-vf", f"bwdif={DOUBLE_ARGS}", "-f", "rawvideo",
                          "-pix_fmt", "yuv420p", "-"], capture_output=True, check=True).stdout
    size = len(out[0][3])
    ref = [ref[i:i + size] for i in range(0, len(ref), size)]
    assert len(ref) == len(out) == 20
    assert [o[3] for o in out[2:-1]] == ref[2:-1]
    for o, r in zip(out[:2] + out[-1:], ref[:2] + ref[-1:]):
        assert (np.frombuffer(o[3], np.uint8) != np.frombuffer(r, np.uint8)).mean() < 0.1
    assert out[2][3] != out[3][3]  # two fields, two pictures


def test_upscale_double_keeps_the_fields_times_and_counts_frames_A_B_in_them(tmp_path):
    src = interlaced(tmp_path / "in.mp4", frames=6)
    whole, part, report = tmp_path / "whole.mkv", tmp_path / "part.mkv", tmp_path / "r.json"
    p = vsr("upscale", src, whole, *TINY, "--deinterlace", "double", "-c", "ffv1", "--report", report)
    assert p.returncode == 0, p.stderr
    assert [line for line in p.stderr.splitlines() if "interlaced" in line] == [
        f"vsr: warning: {src} is interlaced (top field first): each field made a frame of its own (bwdif): twice "
        "the frames at twice the rate"]
    assert json.loads(report.read_text())["settings"]["source"]["field_rate"] is True
    with av.open(str(src)) as c:
        times = [f.pts * f.time_base for f in c.decode(video=0)]
    with av.open(str(whole)) as c:
        got = [(f.pts * f.time_base, f.to_ndarray()) for f in c.decode(video=0)]
    step = times[1] - times[0]
    assert [t for t, _ in got] == [x for t in times for x in (t, t + step / 2)]
    p = vsr("upscale", src, part, *TINY, "--deinterlace", "double", "-c", "ffv1", "--frames", "3:7")
    assert p.returncode == 0, p.stderr
    with av.open(str(part)) as c:
        some = [f.to_ndarray() for f in c.decode(video=0)]
    assert len(some) == 4 and all(np.array_equal(a, b) for a, (_, b) in zip(some, got[3:7]))


def test_a_chunked_double_job_equals_one_pass(tmp_path):
    """Chunks of 8 output frames are 4 frames of the file: their entries (keyframes every 5) and checks are
    counted in the file's frames, their frames in fields; each field a window holds has both its neighbours (a
    chunk that decoded from the frame of its first field made that frame's second field differ)."""
    src = interlaced(tmp_path / "in.mp4", frames=20, codec=[
        "-c:v", "libx264", "-flags", "+ilme+ildct", "-x264-params", "tff=1:keyint=5:min-keyint=5:scenecut=0",
        "-pix_fmt", "yuv420p"])
    runner = RunnerSettings(scene_cuts="off", deinterlace="double")
    single_pass(src, tmp_path / "single.mkv", WindowBackend(), runner)
    spec = JobSpec.from_settings(src, tmp_path / "job.mkv", REQUEST, ENCODER, runner)
    chunks = run_job(spec, WindowBackend())
    want = decoded(tmp_path / "single.mkv")
    assert decoded(tmp_path / "job.mkv") == want
    assert len(want[0]["items"]) == 40 and chunks[-1].stop == 40
    # entries used, in the file's frames: the chunk 32-40 decodes output frames from 30, the file's frame 15, and
    # its frame 14 before it (15's first field needs it), so from keyframe 10
    assert [c.decode_from for c in chunks] == [0, 0, 5, 10, 10]
