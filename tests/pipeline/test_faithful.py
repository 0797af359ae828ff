"""`upscale` keeps what the source has: frames, timestamps, audio packets, subtitles, metadata, colour."""

from __future__ import annotations

import warnings
from fractions import Fraction

import av
import pytest

from tests.conftest import Audio, Subtitles, ffprobe_frames, probe
from vsr.pipeline import RunnerSettings, upscale
from vsr.video import EncoderSettings


def run(src, dst, backend, **kw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = upscale(src, dst, backend=backend, **kw)
    return report, [str(w.message) for w in caught]


def video(p):
    return next(s for s in p["streams"] if s["type"] == "video")


def test_vfr_10bit_full_range_rotation_audio_and_subtitles_survive_into_mkv(make_clip, tmp_path, tiny_backend):
    src = make_clip("vfr.mkv", width=22, height=14, pts=[0, 33, 70, 100, 180, 200, 233, 300],
                    time_base=Fraction(1, 1000), rate=Fraction(30), pix_fmt="yuv420p10le", matrix=1, range=2,
                    primaries=1, transfer=1, rotation=90, sar=Fraction(4, 3), title="main", language="eng",
                    audio=[Audio("aac", "stereo", language="fre", title="commentary"),
                           Audio("libopus", "mono", language="ger")],
                    subtitles=[Subtitles(language="spa")])
    out = tmp_path / "out.mkv"
    report, _ = run(src, out, tiny_backend, runner=RunnerSettings(batch=3))
    a, b = probe(src), probe(out)
    assert b["frames"] == a["frames"] == 8 == report.frames
    assert b["video_times"] == a["video_times"]
    va, vb = video(a), video(b)
    assert (vb["width"], vb["height"]) == (4 * va["width"], 4 * va["height"])
    assert vb["pix_fmt"] == "yuv420p10le"
    assert (vb["matrix"], vb["range"], vb["primaries"], vb["transfer"]) == (1, 2, 1, 1)
    assert b["frame_colour"] == (1, 2)
    assert vb["sar"] == Fraction(4, 3)
    assert b["rotation"] == 90
    assert vb["metadata"].get("title") == "main" and vb["metadata"].get("language") == "eng"
    def kinds(p):
        return [(s["type"], s["codec"], s["metadata"].get("language")) for s in p["streams"][1:]]
    assert kinds(b) == kinds(a) == [("audio", "aac", "fre"), ("audio", "opus", "ger"), ("subtitle", "srt", "spa")]
    assert b["streams"][1]["metadata"].get("title") == "commentary"
    for i in (1, 2, 3):  # packet payloads and times identical: copied, not re-encoded
        assert b["packets"][i] == a["packets"][i]
    n = ffprobe_frames(out)
    assert n is None or n == 8


@pytest.mark.parametrize("ext", ["mp4", "mov", "mkv"])
def test_a_variable_rate_clip_ends_where_its_last_frame_does_whatever_the_b_frames(make_clip, tmp_path,
                                                                                   tiny_backend, ext):
    """The last frame lasts 200 ms; x264's B-frames put the packet of the frame shown last three before the end,
    and the MP4 muxer ended the edit list at that frame's time plus the 40 ms it guessed (1.04 s, not 1.2)."""
    pts = [0, 40, 80, 200, 240, 400, 440, 480, 700, 740, 900, 1000]
    src = make_clip("vfr.mkv", width=64, height=48, pts=pts, durations=[b - a for a, b in zip(pts, pts[1:])] + [200],
                    time_base=Fraction(1, 1000), rate=Fraction(12))
    out = tmp_path / f"out.{ext}"
    run(src, out, tiny_backend)
    with av.open(str(src)) as a, av.open(str(out)) as b:
        assert a.duration == 1_200_000  # microseconds: where the last frame ends
        st = b.streams.video[0]
        packets = [p for p in b.demux(st) if p.size]
        assert max(p.pts for p in packets) != packets[-1].pts  # (B-frames: the last frame's packet not last)
        if ext == "mkv":
            assert b.duration == 1_200_000
    if ext != "mkv":  # what a player shows: the movie's and the edit list's durations, read from the boxes
        # (FFmpeg 8's reader gives the track's decode span, 1.02 s here, which B-frames keep short of the end)
        assert presentation_s(out) == (1.2, 1.2)
    assert probe(out)["video_times"] == probe(src)["video_times"]


@pytest.mark.parametrize("ext, gap_ms, b_frames", [("mp4", 5000, True), ("mp4", 100_000_000, True),
                                                    ("mp4", 5000, False), ("mkv", 5000, True)])
def test_a_gap_in_the_timestamps_is_no_frame_s_duration(make_clip, tmp_path, tiny_backend, ext, gap_ms, b_frames):
    """Frames at 0, 0.1, 0.2 s, then a gap, then three more 0.1 s apart.  In an MP4 with B-frames a decoded frame
    lasts as long as its sample, until the next sample in decode order: the frame decoded before the gap, shown
    after it, said it lasted the gap, and a 5 s gap made the clip 10.4 s long (its last sample 4.9 s)."""
    pts = [0, 100, 200] + [gap_ms + t for t in (300, 400, 500)]
    src = make_clip("gap.mp4", width=32, height=24, pts=pts, time_base=Fraction(1, 1000), rate=Fraction(10),
                    options={"preset": "medium"} if b_frames else None)
    with av.open(str(src)) as a:
        said = [(f.pts * f.time_base, f.duration * f.time_base) for f in a.decode(video=0)]
    assert any(t + d > u for (t, d), (u, _) in zip(said, said[1:])) == b_frames  # (what the source's frames say)
    out = tmp_path / f"out.{ext}"
    run(src, out, tiny_backend)
    end = (gap_ms + 600) / 1000
    assert probe(out)["video_times"] == probe(src)["video_times"]
    if ext == "mkv":  # each frame's own duration, none past the next frame
        with av.open(str(out)) as b:
            assert b.duration == round(end * 1e6)
            times = sorted((p.pts, p.duration) for p in b.demux(video=0) if p.size)
        assert all(t + d <= u for (t, d), (u, _) in zip(times, times[1:])) and times[-1][1] == 100
    else:  # the last sample lasts its 0.1 s; the movie and the edit list end with it
        assert last_sample_s(out) == 0.1
        assert presentation_s(out) == (end, end)


def last_sample_s(path) -> float:
    """The duration of an MP4/MOV's last video sample, in seconds: its ``stts`` box's last entry (one track)."""
    import struct

    data = path.read_bytes()
    i = data.index(b"mdhd")
    scale, = struct.unpack(">I", data[i + 24:i + 28] if data[i + 4] == 1 else data[i + 16:i + 20])
    j = data.index(b"stts")
    count, = struct.unpack(">I", data[j + 8:j + 12])
    _, delta = struct.unpack(">II", data[j + 4 + 8 * count:j + 12 + 8 * count])
    return delta / scale


def presentation_s(path) -> tuple[float, float]:
    """An MP4/MOV's movie header duration and its one video edit's duration, in seconds (version 0 boxes)."""
    import struct

    data = path.read_bytes()
    i = data.index(b"mvhd")
    scale, movie = struct.unpack(">II", data[i + 16:i + 24])
    j = data.index(b"elst")
    count, edit = struct.unpack(">II", data[j + 8:j + 16])
    assert count == 1
    return movie / scale, edit / scale


MIRRORED = (-65536, 0, 0, 0, 65536, 0, 0, 0, 1 << 30)  # a front camera's, or `ffmpeg -display_hflip`
TRANSPOSED = (0, 65536, 0, 65536, 0, 0, 0, 0, 1 << 30)  # a rotation by 90 degrees and a mirror
ROTATED_ABOUT = (0, 65536, 0, -65536, 0, 0, 14 << 16, 0, 1 << 30)  # 90 degrees, moved back into view (MP4)


@pytest.mark.parametrize("ext, matrix, written", [
    ("mp4", MIRRORED, MIRRORED), ("mkv", MIRRORED, MIRRORED), ("mov", TRANSPOSED, TRANSPOSED),
    ("mp4", ROTATED_ABOUT, ROTATED_ABOUT[:6] + (56 << 16,) + ROTATED_ABOUT[7:]),  # the move is in pixels: x4
    ("mkv", ROTATED_ABOUT, ROTATED_ABOUT[:6] + (0,) + ROTATED_ABOUT[7:])])  # Matroska keeps no move
def test_a_mirrored_or_transposed_picture_is_shown_as_the_source_is(make_clip, tmp_path, tiny_backend, ext, matrix,
                                                                    written):
    """The display matrix whole, not its angle: a mirrored clip (angle 180 to FFmpeg) came out upside down."""
    from vsr.video.orientation import read_matrix

    src = make_clip(f"m.{ext}", width=22, height=14, frames=3, display_matrix=matrix)
    out = tmp_path / f"out.{ext}"
    run(src, out, tiny_backend)
    with av.open(str(src)) as a, av.open(str(out)) as b:
        fa, fb = next(a.decode(video=0)), next(b.decode(video=0))
        assert read_matrix(fb) == written and read_matrix(fa)[:6] == written[:6]
        assert (fb.width, fb.height) == (88, 56) and fb.rotation == fa.rotation


@pytest.mark.parametrize("ext, kept", [("ts", False), ("nut", False), ("gif", False), ("", False), ("mkv", True),
                                       ("mp4", True)])
def test_a_rotation_no_output_can_hold_is_said(make_clip, tmp_path, tiny_backend, ext, kept):
    """A phone's portrait clip into .ts, .nut, .gif or PNG frames came out lying on its side without a word."""
    src = make_clip("r.mp4", width=22, height=14, frames=2, rotation=90)
    _, warned = run(src, tmp_path / (f"out.{ext}" if ext else "frames"), tiny_backend)
    said = [w for w in warned if "display rotation (90 degrees)" in w]
    assert said == ([] if kept else [said[0]]) and (kept or "players will show the picture as stored" in said[0])
    _, warned = run(make_clip("m.mp4", width=22, height=14, frames=2, display_matrix=MIRRORED), tmp_path / "m.ts",
                    tiny_backend)
    assert [w for w in warned if "display mirror cannot be written into this mpegts output" in w]


@pytest.mark.parametrize("ext", ["mkv", "webm"])
def test_the_video_track_is_the_default_one(make_clip, tmp_path, tiny_backend, ext):
    """Matroska's muxer wrote FlagDefault 0 on the video track (FFmpeg leaves the flag to its caller)."""
    out = tmp_path / f"out.{ext}"
    run(make_clip("in.mkv", frames=2, audio=[Audio("libopus", "mono")]), out, tiny_backend)
    with av.open(str(out)) as c:
        assert c.streams.video[0].disposition & av.stream.Disposition.default


def test_mp4_output_converts_srt_to_mov_text_and_keeps_exact_timestamps(make_clip, tmp_path, tiny_backend):
    src = make_clip("sub.mkv", pts=[0, 40, 80, 200, 240], time_base=Fraction(1, 1000),
                    audio=[Audio("aac", "mono", language="fre")], subtitles=[Subtitles(language="spa")])
    out = tmp_path / "out.mp4"
    _, warned = run(src, out, tiny_backend)
    a, b = probe(src), probe(out)
    assert b["video_times"] == a["video_times"]
    assert b["packets"][1] == a["packets"][1]
    assert [s["codec"] for s in b["streams"]] == ["h264", "aac", "mov_text"]
    assert b["streams"][2]["metadata"].get("language") == "spa"
    cues = [(t, d[2:]) for t, d in b["packets"][2] if d != b"\0\0"]  # movenc fills gaps with empty samples
    assert cues == a["packets"][2]
    assert any("mov_text" in w for w in warned)


def test_fractional_rate_odd_size_untagged_sd_source_is_tagged_bt601(make_clip, tmp_path, tiny_backend):
    src = make_clip("ntsc.mp4", width=33, height=25, frames=5, rate=Fraction(30000, 1001), pix_fmt="yuv444p")
    out = tmp_path / "out.mp4"
    run(src, out, tiny_backend)
    a, b = probe(src), probe(out)
    assert b["video_times"] == a["video_times"]
    assert b["video_times"][1] - b["video_times"][0] == Fraction(1001, 30000)
    vb = video(b)
    assert (vb["width"], vb["height"], vb["pix_fmt"]) == (132, 100, "yuv444p")
    # untagged SD: read as BT.601 limited, and the output says so (a player would guess BT.709 for its size)
    assert (vb["matrix"], vb["range"], vb["primaries"], vb["transfer"]) == (6, 1, 6, 6)


@pytest.mark.parametrize("pix_fmt,matrix", [("yuv422p", 9), ("yuv420p", 5)])
def test_chroma_layouts_and_matrices_are_kept(make_clip, tmp_path, tiny_backend, pix_fmt, matrix):
    # FFV1 source: it takes odd sizes in 4:2:0 / 4:2:2, which H.264 does not
    src = make_clip("c.mkv", frames=3, width=23, height=15, codec="ffv1", pix_fmt=pix_fmt, matrix=matrix, range=1,
                    primaries=9 if matrix == 9 else 5, transfer=14 if matrix == 9 else 6)
    out = tmp_path / "out.mkv"
    run(src, out, tiny_backend)
    va, vb = video(probe(src)), video(probe(out))
    assert (va["width"], va["height"]) == (23, 15) and (vb["width"], vb["height"]) == (92, 60)
    assert vb["pix_fmt"] == pix_fmt
    assert (vb["matrix"], vb["range"], vb["primaries"], vb["transfer"]) == \
        (va["matrix"], va["range"], va["primaries"], va["transfer"])


def test_ten_bit_output_on_request_from_8bit_source(make_clip, tmp_path, tiny_backend):
    src = make_clip("8.mp4", frames=3)
    out = tmp_path / "out.mp4"
    run(src, out, tiny_backend, encoder=EncoderSettings(pix_fmt="yuv420p10le", crf=18, preset="ultrafast"))
    b = probe(out)
    assert video(b)["pix_fmt"] == "yuv420p10le" and b["frames"] == 3


def test_audio_the_container_cannot_hold_is_reencoded_with_a_warning(make_clip, tmp_path, tiny_backend):
    src = make_clip("a.mkv", frames=3, audio=[Audio("aac", "stereo", language="fre")])
    out = tmp_path / "out.webm"
    _, warned = run(src, out, tiny_backend, encoder=EncoderSettings(codec="libvpx-vp9", options=(
        ("deadline", "realtime"), ("cpu-used", "8"))))
    b = probe(out)
    assert [s["codec"] for s in b["streams"]] == ["vp9", "opus"]
    assert b["streams"][1]["metadata"].get("language") == "fre"
    assert b["video_times"] == probe(src)["video_times"]
    assert any("re-encoding" in w for w in warned)


def test_frames_range_starts_output_at_the_source_start_and_trims_audio(make_clip, tmp_path, tiny_backend):
    src = make_clip("r.mkv", frames=10, rate=Fraction(25), audio=[Audio("aac", "mono")])
    out = tmp_path / "out.mkv"
    report, _ = run(src, out, tiny_backend, runner=RunnerSettings(frames=(4, 7)))
    a, b = probe(src), probe(out)
    assert b["frames"] == report.frames == 3
    assert b["video_times"] == [t - a["video_times"][4] for t in a["video_times"][4:7]]
    src_audio = [d for t, d in a["packets"][1] if a["video_times"][4] <= t < a["video_times"][7]]
    assert [d for _, d in b["packets"][1]] == src_audio and src_audio


@pytest.mark.parametrize("codec,suffix,pix_fmt", [("libx265", ".mp4", "yuv420p"), ("libsvtav1", ".mkv", "yuv420p"),
                                                  ("ffv1", ".mkv", "yuv420p"), ("prores_ks", ".mov", "yuv422p10le")])
def test_other_encoders(make_clip, tmp_path, tiny_backend, codec, suffix, pix_fmt):
    src = make_clip("e.mp4", width=16, height=16, frames=2)
    out = tmp_path / f"out{suffix}"
    opts = (("preset", "ultrafast"),) if codec == "libx265" else (("preset", "12"),) if codec == "libsvtav1" else ()
    run(src, out, tiny_backend, encoder=EncoderSettings(codec=codec, options=opts))
    b = probe(out)
    assert b["frames"] == 2 and video(b)["pix_fmt"] == pix_fmt and video(b)["width"] == 64


@pytest.mark.parametrize("codec", ["aac", "libmp3lame"])
def test_an_avi_keeps_every_frames_time_beside_audio_with_priming(make_clip, tmp_path, tiny_backend, codec):
    """AAC's and MP3's priming start the audio before 0; FFmpeg moved every stream later to make up for it, and
    in AVI's one-frame time base every video frame after the first landed a frame late (an empty index entry at
    frame 1, 11 entries for 10 frames)."""
    src = make_clip("a.mp4", width=24, height=16, frames=10, audio=[Audio(codec, "stereo", rate=44100)])
    out = tmp_path / "o.avi"
    run(src, out, tiny_backend)
    a, b = probe(src), probe(out)
    assert b["frames"] == 10 and b["video_times"] == a["video_times"]
    with av.open(str(out)) as c:
        assert c.streams.video[0].frames == 10  # the index: one entry a frame
        assert [s.type for s in c.streams] == ["video", "audio"]
    n = ffprobe_frames(out)
    assert n is None or n == 10


@pytest.mark.parametrize("suffix", [".mkv", ".mp4"])
def test_a_trimmed_run_keeps_the_subtitle_on_screen_at_its_first_frame(make_clip, tmp_path, tiny_backend, suffix):
    """`--frames 5:12`: "hello" runs from 0.12 to 0.32 s and frame 5 is at 0.2: it was dropped; it shows from
    the output's start for the 0.12 s it had left (as a chapter running at frame A does); "world", 0.37 to 0.57 s,
    ends with frame 11 at 0.48 s (it ran 0.09 s past the video)."""
    src = make_clip("s.mkv", frames=14, rate=Fraction(25), subtitles=[Subtitles(
        cues=((0.0, 0.1, "gone"), (0.12, 0.32, "hello"), (0.37, 0.57, "world")))])
    out = tmp_path / f"out{suffix}"
    run(src, out, tiny_backend, runner=RunnerSettings(frames=(5, 12)))
    with av.open(str(out)) as c:
        st = c.streams.subtitles[0]
        cues = [(round(float(p.pts * p.time_base), 3), round(float(p.duration * p.time_base), 3),
                 bytes(p).decode()[-5:]) for p in c.demux(st) if p.size > 2]
    assert cues == [(0.0, 0.12, "hello"), (0.17, 0.11, "world")]
