"""MPEG-2 outputs: a program stream (.mpg, .vob) or a raw .m2v holds MPEG video only, and FFmpeg's codec query names
only its muxer's defaults (MPEG-1 video for .mpg), so vsr refused ``-c mpeg2video`` into .mpg, DVD's format, and had no
codec for any of them (vsr.video.codecs.UNLISTED, CONTAINER_CODECS)."""

from __future__ import annotations

import json
import warnings
import subprocess

import av
import pytest

from tests.video.tools import ffmpeg_with, flat_through_sink
from vsr.video import EncoderSettings


def clip(path, frames: int = 10, audio: bool = True):
    """A 176x144 H.264 clip at 25 fps tagged BT.709, with MP2 audio (what a program stream holds as it is)."""
    cmd = [ffmpeg_with("libx264"), "-v", "error", "-f", "lavfi", "-i", f"testsrc2=s=176x144:r=25:d={frames / 25}"]
    cmd += ["-f", "lavfi", "-i", f"sine=r=48000:d={frames / 25}", "-c:a", "mp2"] if audio else []
    cmd += ["-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-color_primaries", "bt709",
            "-color_trc", "bt709", "-colorspace", "bt709", str(path)]
    subprocess.run(cmd, check=True)
    return path


def probe(path) -> dict:
    out = subprocess.run(["ffprobe", "-v", "error", "-show_entries", "format=format_name:stream=codec_name,codec_type,"
                          "color_space,color_primaries,color_transfer,color_range,sample_aspect_ratio,"
                          "display_aspect_ratio", "-of", "json", str(path)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def decoded(path):
    with av.open(str(path)) as c:
        times = [f.time for f in c.decode(video=0)]
    with av.open(str(path)) as c:
        audio = [bytes(p) for p in c.demux(audio=0) if p.size] if c.streams.audio else []
    return times, audio


@pytest.mark.parametrize("name,codec,fmt", [("out.mpg", "mpeg2video", "mpeg"), ("out.mpg", None, "mpeg"),
                                            ("out.vob", None, "mpeg"), ("out.m2v", None, "mpegvideo")])
def test_mpeg2_into_a_program_stream_keeps_colour_timestamps_and_audio(tmp_path, name, codec, fmt):
    src = clip(tmp_path / "in.mp4", audio=name != "out.m2v")
    out = tmp_path / name
    flat_through_sink(src, out, EncoderSettings(codec=codec), scale=2)
    got = probe(out)
    video = next(s for s in got["streams"] if s["codec_type"] == "video")
    assert got["format"]["format_name"] == fmt
    assert video["codec_name"] == "mpeg2video"
    assert (video["color_primaries"], video["color_transfer"], video["color_space"], video["color_range"]) == \
        ("bt709", "bt709", "bt709", "tv")
    times, audio = decoded(out)
    src_times, src_audio = decoded(src)
    assert len(times) == 10
    assert [round(b - a, 6) for a, b in zip(times, times[1:])] == [0.04] * 9
    assert b"".join(audio) == b"".join(src_audio)  # copied as it was (a PES packet is not a frame); none in .m2v


def test_dvds_ac3_audio_is_copied_into_vob(tmp_path):
    src = tmp_path / "in.mkv"
    subprocess.run([ffmpeg_with("libx264", "ac3"), "-v", "error", "-f", "lavfi", "-i", "testsrc2=s=176x144:r=25:d=0.4",
                    "-f", "lavfi", "-i", "sine=r=48000:d=0.4", "-c:v", "libx264", "-preset", "ultrafast", "-c:a", "ac3",
                    str(src)], check=True)
    out = tmp_path / "out.vob"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (no "re-encoding it to mp2")
        flat_through_sink(src, out)
    assert [s["codec_name"] for s in probe(out)["streams"]] == ["mpeg2video", "ac3"]
    assert b"".join(decoded(out)[1]) == b"".join(decoded(src)[1])
