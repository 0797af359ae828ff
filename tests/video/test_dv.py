"""DV (NTSC, 4:1:1, interlaced, PCM audio, a timecode in its header): PyAV's FFmpeg gives its stream an
"average" rate of 60000 fps (its time base), which made the mov muxer's timecode track fail at the file's end
(a traceback). The rate is now the frames' own, and a muxer that refuses its end is one error line."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from vsr.errors import OutputError
from vsr.video import EncoderSettings, open_source
from vsr.video.sink import VideoSink


@pytest.fixture(scope="module")
def dv(tmp_path_factory) -> Path:
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        pytest.skip("needs ffmpeg")
    path = tmp_path_factory.mktemp("dv") / "ntsc.dv"
    subprocess.run([ffmpeg, "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=720x480:rate=30000/1001", "-f",
                    "lavfi", "-i", "sine=sample_rate=48000", "-t", "0.3", "-c:v", "dvvideo", "-pix_fmt", "yuv411p",
                    "-c:a", "pcm_s16le", "-ar", "48000", "-ac", "2", "-f", "dv", str(path)], check=True)
    return path


def probe(path: Path) -> list[dict]:
    out = subprocess.run(["ffprobe", "-v", "error", "-show_entries", "stream=codec_type,codec_tag_string,"
                          "avg_frame_rate,sample_aspect_ratio:stream_tags=timecode", "-of", "json", str(path)],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)["streams"]


def write(src: Path, dst: Path, **change) -> None:
    """``src``'s frames (flat ones, at its size) into ``dst`` through a sink, as a run writes them."""
    source = open_source(src)
    try:
        sink = VideoSink(dst, replace(source.info, **change), EncoderSettings(), scale=1)
        flat = np.full((3, 480, 720), 100, sink.plane_dtype())
        try:
            for f in source.frames():
                sink.write(flat, f.pts, f.duration)
            sink.commit()
        except BaseException:
            sink.abort()
            raise
    finally:
        source.close()


@pytest.mark.parametrize("suffix", [".mov", ".mp4"])
def test_dv_goes_into_quicktime_and_mp4_at_its_own_rate(dv, tmp_path, suffix):
    source = open_source(dv)
    try:
        assert source.info.rate == Fraction(30000, 1001) and source.info.interlaced is not None
    finally:
        source.close()
    out = tmp_path / f"out{suffix}"
    write(dv, out)
    streams = probe(out)
    assert (streams[0]["avg_frame_rate"], streams[0]["sample_aspect_ratio"]) == ("30000/1001", "8:9")
    if suffix == ".mov":  # its video, PCM audio, and the timecode track of DV's header timecode
        assert [s.get("codec_tag_string") for s in streams] == ["avc1", "sowt", "tmcd"]


def test_a_muxer_that_refuses_its_end_is_an_output_error(dv, tmp_path):
    """The rate vsr used to take (60000 fps) makes QuickTime's timecode track fail when the file is closed."""
    with pytest.raises(OutputError, match=r"cannot finish .*out\.mov: the mov muxer refused to write its end"):
        write(dv, tmp_path / "out.mov", rate=Fraction(60000))
    assert list(tmp_path.iterdir()) == []  # nothing half-written left

