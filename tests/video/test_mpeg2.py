"""MPEG-2 outputs: a program stream (.mpg, .vob) or a raw .m2v holds MPEG video only, and FFmpeg's codec query names
only its muxer's defaults (MPEG-1 video for .mpg), so vsr refused ``-c mpeg2video`` into .mpg, DVD's format, and had no
codec for any of them (vsr.video.codecs.UNLISTED, CONTAINER_CODECS)."""

from __future__ import annotations

import json
import subprocess
import warnings
from fractions import Fraction

import av
import numpy as np
import pytest
from PIL import Image

from tests.data import VID4
from tests.video.tools import ffmpeg_with, flat_through_sink
from vsr.video import EncoderSettings, open_sink, open_source
from vsr.video.planes import encode_planes


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


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float(10 * np.log10(255 ** 2 / mse))


def test_mpeg2_runs_at_a_fixed_quantiser_not_ffmpegs_200_kbps(tmp_path):
    """Vid4's calendar (fine detail) at x4, 720x576, through the sink into .mpg: at FFmpeg's 200 kb/s a blur."""
    frames = tmp_path / "frames"
    frames.mkdir()
    for i in range(6):
        (frames / f"{i:08d}.png").symlink_to(VID4 / "calendar" / "lr" / f"{i:08d}.png")
    out = tmp_path / "out.mpg"
    source = open_source(frames)
    want = []
    try:
        sink = open_sink(out, source.info, EncoderSettings(), scale=4)
        assert sink.choice.quantiser == 3
        for f in source.frames():
            small = Image.fromarray(np.round(f.rgb.transpose(1, 2, 0) * 255).astype(np.uint8))
            want.append(np.asarray(small.resize((small.width * 4, small.height * 4), Image.BICUBIC)))
            rgb = np.ascontiguousarray(want[-1].transpose(2, 0, 1), np.float32) / 255
            sink.write(encode_planes(rgb, sink.pix_fmt, sink.colour), f.pts, f.duration)
        sink.commit()
    finally:
        source.close()
    with av.open(str(out)) as c:
        got = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
    assert len(got) == 6
    assert min(psnr(a, b) for a, b in zip(got, want)) > 35  # (at 200 kb/s: 30.4 dB; at q 3: 36.7)


def rate_clip(path, rate: str, seconds: float = 0.4):
    """A 176x144 H.264 clip at frame ``rate`` (ffmpeg's syntax: 35, 45000/1499), no audio."""
    subprocess.run([ffmpeg_with("libx264"), "-v", "error", "-f", "lavfi", "-i", f"testsrc2=s=176x144:r={rate}",
                    "-t", str(seconds), "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", str(path)],
                   check=True)
    return path


@pytest.mark.parametrize("rate,name,codec,said", [
    ("35", "out.mpg", None, "the source is 35 fps: use an .mp4, .mkv or .ts output (H.264)"),
    ("45000/1499", "out.vob", None, "the source is 30.02 (45000/1499) fps: use an .mp4, .mkv or .ts output"),
    ("35", "out.ts", "mpeg2video", "the source is 35 fps: use -c libx264"),
    ("35", "out.mkv", "mpeg1video", "MPEG-1 codes only 23.976, 24, 25, 29.97, 30, 50, 59.94 and 60 fps; the source"),
])
def test_a_frame_rate_mpeg2_cannot_code_is_said_as_such_before_anything_is_written(tmp_path, rate, name, codec, said):
    from vsr.errors import InputError

    src = rate_clip(tmp_path / "in.mp4", rate)
    with pytest.raises(InputError) as e:
        flat_through_sink(src, tmp_path / name, EncoderSettings(codec=codec))
    assert said in str(e.value) and "rejected its options" not in str(e.value)
    if codec != "mpeg1video":
        assert str(e.value).startswith("MPEG-2 codes only 23.976, 24, 25, 29.97, 30, 50, 59.94 and 60 fps, or one")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.mp4"]


@pytest.mark.parametrize("rate", ["25/2", "15", "100"])
def test_mpeg2_codes_a_standard_rate_times_its_extension(tmp_path, rate):
    """12.5, 15 and 100 fps are 25/2, 30/2 and 50x2: MPEG-2's frame_rate_extension holds them, not refused."""
    src = rate_clip(tmp_path / "in.mp4", rate)
    out = tmp_path / "out.mpg"
    flat_through_sink(src, out)
    times = decoded(out)[0]
    assert len(times) >= 5
    assert {round(b - a, 6) for a, b in zip(times, times[1:])} == {round(1 / float(Fraction(rate)), 6)}


def surround_clip(path):
    """A 176x144 H.264 clip at 25 fps with 5.1 AAC (a film's download), an 80 Hz tone in every channel: the LFE's
    too, which AC-3 cuts above 120 Hz."""
    subprocess.run([ffmpeg_with("libx264", "aac"), "-v", "error", "-f", "lavfi", "-i", "testsrc2=s=176x144:r=25:d=0.4",
                    "-f", "lavfi", "-i", "sine=f=80:r=48000:d=0.4", "-filter_complex",
                    "[1:a]pan=5.1|c0=c0|c1=c0|c2=c0|c3=c0|c4=c0|c5=c0[a]", "-map", "0:v", "-map", "[a]",
                    "-c:v", "libx264", "-preset", "ultrafast", "-c:a", "aac", str(path)], check=True)
    return path


def audio_of(path) -> tuple[str, int, np.ndarray]:
    with av.open(str(path)) as c:
        st = c.streams.audio[0]
        samples = np.concatenate([f.to_ndarray().reshape(st.codec_context.channels, -1) for f in c.decode(st)], 1)
        return st.codec_context.name, st.codec_context.channels, samples


def run_warned(src, out) -> list[str]:
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        flat_through_sink(src, out)
    return [str(w.message) for w in said]


def test_5_1_audio_into_vob_is_re_encoded_to_ac3_keeping_its_channels(tmp_path):
    src = surround_clip(tmp_path / "in.mp4")
    said = run_warned(src, tmp_path / "out.vob")
    assert [s["codec_name"] for s in probe(tmp_path / "out.vob")["streams"]] == ["mpeg2video", "ac3"]
    codec, channels, samples = audio_of(tmp_path / "out.vob")
    assert (codec, channels) == ("ac3", 6) and samples.shape[1] >= 0.4 * 48000
    assert all(np.sqrt(np.mean(ch.astype(np.float64) ** 2)) > 0.05 for ch in samples)  # a tone in each, not silence
    assert [s for s in said if "audio" in s] == [s for s in said if "re-encoding it to ac3 (DVD's audio: it keeps the "
                                                 "5.1 channels, mp2 takes 2 at most)" in s] != []


def test_5_1_audio_into_mpg_is_downmixed_to_stereo_mp2_with_one_warning(tmp_path):
    src = surround_clip(tmp_path / "in.mp4")
    said = run_warned(src, tmp_path / "out.mpg")
    codec, channels, samples = audio_of(tmp_path / "out.mpg")
    assert (codec, channels) == ("mp2", 2) and samples.shape[1] >= 0.4 * 48000
    assert all(np.sqrt(np.mean(ch.astype(np.float64) ** 2)) > 0.05 for ch in samples)
    assert [s for s in said if "audio" in s] == [
        "mpeg cannot hold aac audio (stream 1): re-encoding it to mp2, its 5.1 channels downmixed to stereo (mp2 takes "
        "2 at most; a .vob (AC-3) or .mkv output keeps them)"]
