"""A source's sample aspect ratio in a Matroska/WebM output whose codec holds none in its stream (AV1, VP9, FFV1):
FFmpeg's muxer writes the track's display size only from the stream's aspect, which PyAV cannot set, so vsr
writes it into the closed file (vsr.video.track_metadata.display_metadata)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import warnings
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from tests.video.tools import ffmpeg_with, flat_through_sink
from vsr.video import EncoderSettings


def anamorphic(tmp_path, sar: str):
    """A 176x144 PAL-shaped H.264 clip of 3 frames whose samples are ``sar`` wide."""
    src = tmp_path / "src.mkv"
    subprocess.run([ffmpeg_with("libx264"), "-v", "error", "-f", "lavfi", "-i", "testsrc2=s=176x144:r=25:d=0.12",
                    "-vf", f"setsar={sar}", "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p",
                    str(src)], check=True)
    return src


def probed(path) -> dict:
    out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v", "-show_entries",
                          "stream=codec_name,sample_aspect_ratio,display_aspect_ratio", "-of", "json", str(path)],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)["streams"][0]


@pytest.mark.parametrize("name,codec", [("out.mkv", "ffv1"), ("out.mkv", "libvpx-vp9"), ("out.mkv", "libsvtav1"),
                                        ("out.webm", "libvpx-vp9")])
def test_a_codec_without_an_aspect_keeps_the_sources_in_matroska(tmp_path, name, codec):
    ffmpeg_with(codec)
    out = tmp_path / name
    flat_through_sink(anamorphic(tmp_path, "16/15"), out, EncoderSettings(codec=codec), scale=2)
    got = probed(out)
    sar = Fraction(got["sample_aspect_ratio"].replace(":", "/"))
    if name.endswith(".webm"):  # a size in whole pixels: 352 * 16/15 = 375.47 shown 375 wide
        assert sar == Fraction(375, 352), got
    else:  # Matroska's display aspect ratio: exact
        assert sar == Fraction(16, 15), got
        assert got["display_aspect_ratio"] == "176:135", got


def test_square_samples_get_no_display_size(tmp_path):
    out = tmp_path / "out.mkv"
    flat_through_sink(anamorphic(tmp_path, "1"), out, EncoderSettings(codec="ffv1"), scale=2)
    assert probed(out).get("sample_aspect_ratio", "N/A") in ("N/A", "1:1", "0:1")


def clip_of(tmp_path, size: str, sar: str):
    src = tmp_path / "src.mp4"
    subprocess.run([ffmpeg_with("libx264"), "-v", "error", "-f", "lavfi", "-i", f"testsrc2=s={size}:r=25:d=0.12",
                    "-vf", f"setsar={sar}", "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p",
                    str(src)], check=True)
    return src


@pytest.mark.parametrize("size,sar,shown,said", [
    ("370x200", "1", "37:20", None),  # 1.85:1 in square samples: MPEG-2's aspect code 1, exact
    ("176x120", "40/33", "16:9", None),  # NTSC 16:9: coded exactly
    ("180x144", "37/25", "16:9", "the source's 1.85:1 is shown as 16:9 (4% narrower)"),
    ("180x144", "65/34", "221:100", "the source's 2.39:1 is shown as 2.21:1 (8% narrower)"),
    ("180x144", "12/11", "4:3", "the source's 1.36:1 is shown as 4:3 (2% narrower)")])
@pytest.mark.parametrize("name", ["out.mpg", "out.ts"])
def test_mpeg2_says_where_it_cannot_code_the_sources_display_aspect(tmp_path, size, sar, shown, said, name):
    out = tmp_path / name
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        flat_through_sink(clip_of(tmp_path, size, sar), out, EncoderSettings(codec="mpeg2video"), scale=2)
    lines = [str(w.message) for w in caught if "MPEG-2" in str(w.message)]
    assert probed(out)["display_aspect_ratio"] == shown  # what the warning names is what a player shows
    if said is None:
        assert lines == []
    else:
        assert len(lines) == 1 and said in lines[0] and "-c libx264" in lines[0], lines


def piped(src, codec: str) -> subprocess.CompletedProcess:
    """``vsr upscale - - --format matroska -c CODEC`` (a tiny random model) with ``src`` on standard input."""
    with open(src, "rb") as f:
        return subprocess.run([sys.executable, "-m", "vsr", "upscale", "-", "-", "--format", "matroska", "-c", codec,
                               "--weights", "random", "--config", "edvr-tiny", "--backend", "torch", "--threads", "1",
                               "--quiet"], stdin=f, capture_output=True, cwd=Path(__file__).resolve().parents[2])


@pytest.mark.parametrize("codec", ["ffv1", "libvpx-vp9"])
def test_matroska_on_a_pipe_keeps_the_sources_display_shape(tmp_path, codec):
    """The header of a stream is written once, before its frames, and never rewritten: the display size goes into it
    on its way to the pipe (vsr.video.matroska.stream_header)."""
    ffmpeg_with(codec)
    src = tmp_path / "src.mkv"
    subprocess.run([ffmpeg_with("libx264"), "-v", "error", "-f", "lavfi", "-i", "testsrc2=s=64x48:r=25:d=0.2",
                    "-vf", "setsar=16/15", "-c:v", "libx264", "-preset", "ultrafast", str(src)], check=True)
    done = piped(src, codec)
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out.mkv"
    out.write_bytes(done.stdout)
    got = probed(out)
    assert (got["sample_aspect_ratio"], got["display_aspect_ratio"]) == ("16:15", "64:45"), got
    assert [ln for ln in done.stderr.splitlines() if b"random weights" not in ln] == []
    read = subprocess.run(["ffmpeg", "-v", "error", "-xerror", "-i", "-", "-f", "null", "-"], input=done.stdout,
                          capture_output=True)  # the whole stream reads back, from a pipe too
    assert read.returncode == 0 and not read.stderr, read.stderr
    with av.open(str(out)) as c:
        assert sum(1 for _ in c.decode(video=0)) == 5


def test_matroska_on_a_pipe_of_square_samples_is_as_the_muxer_writes_it(tmp_path):
    src = tmp_path / "src.mkv"
    subprocess.run([ffmpeg_with("libx264"), "-v", "error", "-f", "lavfi", "-i", "testsrc2=s=64x48:r=25:d=0.2",
                    "-c:v", "libx264", "-preset", "ultrafast", str(src)], check=True)
    done = piped(src, "ffv1")
    out = tmp_path / "out.mkv"
    out.write_bytes(done.stdout)
    assert done.returncode == 0 and probed(out).get("sample_aspect_ratio", "N/A") in ("N/A", "1:1", "0:1")


class _Stream(io.BytesIO):
    def seekable(self) -> bool:  # as a pipe: FFmpeg's muxer writes a live layout (a Segment of unknown size)
        return False


@pytest.mark.parametrize("chunk", [1, 7, 1 << 20])
def test_the_header_of_a_stream_is_held_until_whole_however_it_is_written(tmp_path, chunk):
    from vsr.video.matroska import display_size
    from vsr.video.pipe_sink import _HeaderPipe

    raw = _Stream()
    with av.open(raw, "w", format="matroska") as oc:
        vs = oc.add_stream("ffv1", rate=25)
        vs.width, vs.height, vs.pix_fmt = 64, 48, "yuv420p"
        for i in range(3):
            frame = av.VideoFrame.from_ndarray(np.full((48, 64, 3), 40 * i, np.uint8), format="rgb24")
            frame.pts = i
            for p in vs.encode(frame.reformat(format="yuv420p")):
                oc.mux(p)
        for p in vs.encode():
            oc.mux(p)
    data = raw.getvalue()
    out = tmp_path / "out.mkv"
    with open(out, "wb") as f:
        pipe = _HeaderPipe(f.fileno())
        pipe.extra = display_size(False, Fraction(16, 15), 64, 48)
        for i in range(0, len(data), chunk):
            assert pipe.write(data[i:i + chunk]) == len(data[i:i + chunk])
        pipe.finish()
    assert pipe.problem is None
    got = probed(out)
    assert (got["sample_aspect_ratio"], got["display_aspect_ratio"]) == ("16:15", "64:45"), got
    with av.open(str(out)) as c:
        assert [f.to_ndarray()[0, 0] for f in c.decode(video=0)] == [f.to_ndarray()[0, 0]
                                                                    for f in av.open(io.BytesIO(data)).decode(video=0)]
