"""What a file holds besides its video and sound: Matroska attachments (the fonts of ASS subtitles) and cover art
come out byte for byte where the output holds them (mkv: both; mp4: the cover), named in one line where not; a
picture track before the film's is not taken for the video; audio re-encoded for a container keeps its length."""

from __future__ import annotations

import shutil
import subprocess
import warnings
import zlib
from pathlib import Path

import av
import numpy as np
import pytest

from vsr.video import EncoderSettings, open_sink, open_source

FONT = bytes(range(256)) * 12  # stands for a font: the bytes must come back as they are


def png(width: int, height: int) -> bytes:
    """A real PNG: a red square (written here, byte for byte the cover's data)."""
    import struct
    raw = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


@pytest.fixture(scope="module")
def extras(tmp_path_factory) -> dict[str, Path]:
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        pytest.skip("needs ffmpeg")
    d = tmp_path_factory.mktemp("extras")
    (d / "font.ttf").write_bytes(FONT)
    (d / "cover.png").write_bytes(png(40, 30))
    video = [ffmpeg, "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=32x24:rate=25", "-f", "lavfi", "-i",
             "sine=frequency=300:sample_rate=44100"]
    out = {"mkv": d / "in.mkv", "first": d / "picture_first.mkv"}
    subprocess.run([*video, "-t", "1", "-attach", str(d / "font.ttf"), "-metadata:s:t:0",
                    "mimetype=application/x-truetype-font", "-attach", str(d / "cover.png"), "-metadata:s:t:1",
                    "mimetype=image/png", "-map", "0", "-map", "1", "-c:v", "libx264", "-c:a", "aac",
                    str(out["mkv"])], check=True)
    subprocess.run([ffmpeg, "-v", "error", "-i", str(d / "cover.png"), "-f", "lavfi", "-i",
                    "testsrc2=size=32x24:rate=25", "-t", "1", "-map", "0", "-map", "1", "-c:v:0", "copy",
                    "-c:v:1", "libx264", str(out["first"])], check=True)
    return out


def write(src, dst: Path, opener=open_source) -> list[str]:
    """``src`` (a path; ``opener``'s: a file object) into ``dst`` through a sink, flat frames at the source's
    size; the warnings said."""
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        source = opener(src)
        try:
            sink = open_sink(dst, source.info, EncoderSettings(), scale=1)
            flat = np.full((3, source.info.height, source.info.width), 100, sink.plane_dtype())
            for f in source.frames():
                sink.write(flat, f.pts, f.duration)
            sink.commit()
        finally:
            source.close()
    return [str(w.message) for w in said]


def contents(path: Path) -> dict:
    """Attachments (name -> (mimetype, bytes)) and cover pictures (bytes), as PyAV reads the file."""
    out = {"attachments": {}, "covers": []}
    with av.open(str(path)) as c:
        for st in c.streams:
            if st.type == "attachment":
                out["attachments"][st.name] = (st.mimetype, bytes(st.data))
            elif st.type == "video" and int(st.disposition) & 0x400:
                out["covers"].append(next(bytes(p) for p in c.demux(st) if p.size))
    return out


def test_matroska_keeps_the_fonts_and_the_cover(extras, tmp_path):
    said = write(extras["mkv"], tmp_path / "out.mkv")
    assert not [s for s in said if "cannot hold" in s], said
    got = contents(tmp_path / "out.mkv")
    assert got["attachments"] == {"font.ttf": ("application/x-truetype-font", FONT)}
    assert got["covers"] == [(extras["mkv"].parent / "cover.png").read_bytes()]


def test_matroska_on_standard_input_keeps_its_fonts(extras, tmp_path):
    """A stream's attachments are in its header, read with it (were dropped without a word); its cover is a
    packet among the others, which a pipe cannot demux twice: not kept, and said (was not)."""
    from vsr.video.pipe_source import StreamSource

    with open(extras["mkv"], "rb") as f:
        said = write(f, tmp_path / "out.mkv", opener=StreamSource)
    assert [w for w in said if "cannot hold" in w or "cover" in w] == [
        "the cover art of the video on standard input is not kept (its picture is a packet among the others): give "
        "the file as IN to keep it"]
    assert contents(tmp_path / "out.mkv") == {"attachments": {"font.ttf": ("application/x-truetype-font", FONT)},
                                              "covers": []}


def test_mp4_keeps_the_cover_and_names_the_font_it_drops(extras, tmp_path):
    said = write(extras["mkv"], tmp_path / "out.mp4")
    assert [s for s in said if "cannot hold" in s] == [
        "mp4 cannot hold the source's attachments: dropped font.ttf (a .mkv output keeps attachments and covers, "
        ".mp4 a cover)"]
    got = contents(tmp_path / "out.mp4")
    assert got == {"attachments": {}, "covers": [(extras["mkv"].parent / "cover.png").read_bytes()]}


def test_webm_names_both_and_its_opus_audio_keeps_the_length(extras, tmp_path):
    """WebM holds no attachment and no AAC: the audio becomes Opus at 48 kHz (Opus takes no 44.1 kHz)."""
    said = write(extras["mkv"], tmp_path / "out.webm")
    assert [s for s in said if "cannot hold the source's" in s] == [
        "webm cannot hold the source's attachments and cover art: dropped font.ttf, cover.png (cover) (a .mkv "
        "output keeps attachments and covers, .mp4 a cover)"]

    def audio(path):
        with av.open(str(path)) as c:
            a = c.streams.audio[0]
            frames = list(c.decode(a))
            return a.codec_context.name, a.codec_context.sample_rate, sum(f.samples for f in frames)
    name, rate, n = audio(tmp_path / "out.webm")
    _, src_rate, src_n = audio(extras["mkv"])
    assert (name, rate, src_rate) == ("opus", 48000, 44100)
    assert abs(n / rate - src_n / src_rate) < 0.005  # the same length, within Opus's 2.5 ms frames


def test_a_picture_track_before_the_film_is_not_the_video(extras):
    source = open_source(extras["first"])
    try:
        assert source.info.width == 32 and sum(1 for _ in source.frames()) == 25
    finally:
        source.close()


def test_another_video_is_named_and_a_timecode_track_is_not(tmp_path):
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        pytest.skip("needs ffmpeg")
    two, tc = tmp_path / "two.mkv", tmp_path / "tc.mov"
    subprocess.run([ffmpeg, "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=32x24:rate=25", "-f", "lavfi", "-i",
                    "testsrc=size=16x12:rate=25", "-t", "0.4", "-map", "0", "-map", "1", "-c:v", "libx264", str(two)],
                   check=True)
    subprocess.run([ffmpeg, "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=32x24:rate=25", "-t", "0.4",
                    "-c:v", "libx264", "-timecode", "01:00:00:00", str(tc)], check=True)
    said = write(two, tmp_path / "two_out.mkv")
    assert [s for s in said if "cannot follow" in s] == [
        "the source's stream 1 (another video, h264 16x12) cannot follow: vsr writes one video, with the audio, "
        "subtitles, attachments and cover"]
    assert not [s for s in write(tc, tmp_path / "tc_out.mov") if "cannot follow" in s]  # its tag makes it again


def test_a_dvds_navigation_packets_are_not_named(tmp_path):
    """An MPEG-PS from a DVD holds a data stream of navigation packets, meaningless outside the disc."""
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        pytest.skip("needs ffmpeg")
    dvd = tmp_path / "dvd.mpg"
    subprocess.run([ffmpeg, "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=720x480:rate=30000/1001", "-f",
                    "lavfi", "-i", "sine=sample_rate=48000", "-t", "0.3", "-target", "ntsc-dvd", str(dvd)], check=True)
    with av.open(str(dvd)) as c:
        assert [s.name for s in c.streams if s.type == "data"] == ["dvd_nav_packet"]
    assert not [s for s in write(dvd, tmp_path / "out.mkv") if "cannot follow" in s]


def test_audio_of_no_stated_channel_order_is_re_encoded_and_an_encoder_that_refuses_is_named(tmp_path):
    """WMA (and PCM in AVI) come with channels in no stated order ("1 channels"), which AAC and AC-3 refuse:
    re-encoded as the default layout of as many channels (mono), every sample of it. Nine such channels Opus cannot map: the error
    names the audio encoder, not the video's."""
    from vsr.errors import InputError

    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        pytest.skip("needs ffmpeg")
    wmv, nine = tmp_path / "a.wmv", tmp_path / "nine.mkv"
    subprocess.run([ffmpeg, "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=32x24:rate=25", "-f", "lavfi", "-i",
                    "sine=sample_rate=44100:duration=1", "-t", "1", "-c:v", "wmv2", "-c:a", "wmav2", str(wmv)],
                   check=True)
    def seconds(path: Path) -> tuple[str, str, float]:
        with av.open(str(path)) as c:
            a = c.streams.audio[0]
            n = sum(f.samples for f in c.decode(a))
            return a.codec_context.name, a.codec_context.layout.name, n / a.codec_context.sample_rate

    codec, layout, source_s = seconds(wmv)
    assert layout == "1 channels"
    for suffix, codec in ((".mp4", "aac"), (".mkv", "ac3")):
        write(wmv, tmp_path / f"out{suffix}")
        name, layout, out_s = seconds(tmp_path / f"out{suffix}")
        assert (name, layout) == (codec, "mono")
        # every sample: the decoder's last frame too (WMA holds 2048 samples until it is flushed; they were lost);
        # at most the encoder's last frame filled up with silence (AC-3: 1536 samples) more. AC-3 keeps back its
        # last 256 (its transform's overlap: FFmpeg's own re-encode ends there too)
        assert -256 / 44100 - 1e-9 <= out_s - source_s <= 1536 / 44100, (suffix, source_s, out_s)
    chans = "|".join(["sin(440*2*PI*t)"] * 9)
    subprocess.run([ffmpeg, "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=32x24:rate=25", "-f", "lavfi", "-i",
                    f"aevalsrc={chans}:s=48000:d=0.4", "-t", "0.4", "-c:v", "libx264", "-c:a", "pcm_s16le", str(nine)],
                   check=True)
    with pytest.raises(InputError, match=r"^the libopus encoder cannot take the source's audio: .* \(an \.mkv "
                                         r"output keeps the source's audio as it is\)$"):
        write(nine, tmp_path / "out.webm")
    write(nine, tmp_path / "out.mkv")  # (as the hint says: its 9 channels copied)
    with av.open(str(tmp_path / "out.mkv")) as c:
        assert (c.streams.audio[0].codec_context.name, c.streams.audio[0].codec_context.channels) == ("pcm_s16le", 9)


def _samples(path: Path) -> tuple[str, np.ndarray]:
    """The audio's codec and its samples as interleaved 32-bit integers (any depth, planar or not)."""
    with av.open(str(path)) as c:
        a = c.streams.audio[0]
        to32 = av.AudioResampler(format="s32", layout="stereo", rate=a.codec_context.sample_rate)
        frames = [g for f in c.decode(a) for g in to32.resample(f)] + to32.resample(None)
        return a.codec_context.name, np.concatenate([f.to_ndarray().reshape(-1) for f in frames])


@pytest.mark.parametrize("codec,suffix", [("flac", ".mov"), ("pcm_s24le", ".mp4")])
def test_lossless_audio_a_muxer_refuses_goes_in_as_alac_sample_for_sample(tmp_path, codec, suffix):
    """FFmpeg's codec query says .mov holds FLAC and .mp4 24-bit stereo PCM; their muxers then refuse them (at
    the header, at the end). A muxer in memory tries each copy first; a lossless track that cannot go in as
    it is goes in as ALAC, every sample as it was."""
    from vsr.video.passthrough import copy_works

    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        pytest.skip("needs ffmpeg")
    src = tmp_path / "in.mkv"
    subprocess.run([ffmpeg, "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=32x24:rate=25", "-f", "lavfi", "-i",
                    "sine=sample_rate=48000:duration=1", "-t", "1", "-ac", "2", "-c:v", "libx264", "-c:a", codec,
                    str(src)], check=True)
    with av.open(str(src)) as c, av.open(str(tmp_path / f"probe{suffix}"), "w") as oc:
        a = c.streams.audio[0]
        sample = next(p for p in c.demux(a) if p.size)
        assert a.codec_context.name in oc.supported_codecs and not copy_works(a, oc, sample)
    said = write(src, tmp_path / f"out{suffix}")
    assert any("re-encoding it to alac" in s for s in said), said
    name, got = _samples(tmp_path / f"out{suffix}")
    _, want = _samples(src)
    assert name == "alac" and len(got) == len(want) and np.array_equal(got, want)


def test_pcm_goes_into_mp4_as_alac_which_players_read_and_into_mov_as_it_is(tmp_path):
    """The mp4 muxer takes 16-bit PCM, written as ISO 'ipcm', which QuickTime and FFmpeg before 6 do not read:
    vsr re-encodes it to ALAC, sample for sample, and says why; .mov holds PCM as QuickTime reads it: copied."""
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        pytest.skip("needs ffmpeg")
    src = tmp_path / "in.mkv"
    subprocess.run([ffmpeg, "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=32x24:rate=25", "-f", "lavfi", "-i",
                    "sine=sample_rate=48000:duration=1", "-t", "1", "-ac", "2", "-c:v", "libx264", "-c:a",
                    "pcm_s16le", str(src)], check=True)
    _, want = _samples(src)
    said = write(src, tmp_path / "out.mp4")
    assert [s for s in said if "audio" in s] == [
        "mp4 holds pcm_s16le audio only as ISO 'ipcm', which QuickTime and FFmpeg before 6 do not read (stream 1): "
        "re-encoding it to alac"]
    name, got = _samples(tmp_path / "out.mp4")
    assert name == "alac" and np.array_equal(got, want)
    read = subprocess.run([ffmpeg, "-v", "error", "-i", str(tmp_path / "out.mp4"), "-map", "0:a", "-f", "null", "-"],
                          capture_output=True, text=True)
    assert read.returncode == 0 and not read.stderr  # (the system's FFmpeg, any version, reads it)
    assert not [s for s in write(src, tmp_path / "out.mov") if "audio" in s]
    name, got = _samples(tmp_path / "out.mov")
    assert name == "pcm_s16le" and np.array_equal(got, want)


def test_mp4_text_subtitles_go_into_matroska_as_subrip(tmp_path):
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        pytest.skip("needs ffmpeg")
    srt = tmp_path / "s.srt"
    srt.write_text("1\n00:00:00,000 --> 00:00:00,400\nHello world\n\n2\n00:00:00,400 --> 00:00:00,800\nSecond\n")
    src = tmp_path / "in.mp4"
    subprocess.run([ffmpeg, "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=32x24:rate=25", "-i", str(srt),
                    "-t", "1", "-c:v", "libx264", "-c:s", "mov_text", str(src)], check=True)
    said = write(src, tmp_path / "out.mkv")
    assert [s for s in said if "subtitles" in s] == [
        "matroska cannot hold mov_text subtitles (stream 1): converting them to subrip (plain text, styling "
        "dropped)"]
    out = subprocess.run([ffmpeg, "-v", "error", "-i", str(tmp_path / "out.mkv"), "-map", "0:s", "-f", "srt", "-"],
                         capture_output=True, text=True, check=True).stdout
    assert out.split() == srt.read_text().split()


def test_audio_that_says_no_channels_is_dropped_in_one_line_not_the_run(tmp_path):
    """A damaged MPEG-TS whose demuxer finds an MP3 stream of no sample rate and no channels: Matroska would take
    MP3 as it is, but no encoder takes nothing; the stream is dropped, said in one line, the video written."""
    src = Path(__file__).parents[1] / "fixtures" / "damaged" / "mp3_without_channels.ts"
    with av.open(str(src)) as c:
        a = c.streams.audio[0]
        assert (a.codec_context.sample_rate, a.codec_context.layout.nb_channels) == (0, 0)
    said = write(src, tmp_path / "out.mkv")
    assert [s for s in said if "audio" in s] == [
        "the source's mp3 audio (stream 1) says no sample rate or channels (damaged?) and matroska cannot take it "
        "as it is: dropped"]
    with av.open(str(tmp_path / "out.mkv")) as c:
        assert [s.type for s in c.streams] == ["video"] and len(list(c.decode(video=0))) > 0
