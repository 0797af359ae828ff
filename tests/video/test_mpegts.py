"""MPEG-TS outputs (.ts, .m2ts): FFmpeg's codec query names only MPEG-2 video and MP2 audio for its muxer, so
vsr refused H.264 into .ts (and a batch job of a .ts input, which keeps its container). The muxer writes H.264,
HEVC, AAC, AC-3 and more (vsr.video.codecs.UNLISTED): an upscale into .ts is H.264 with the audio copied, at the
source's timestamps."""

from __future__ import annotations

import shutil
import subprocess
from collections import deque
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace

import av
import pytest

from vsr.cli import main
from vsr.video.codecs import codecs_held
from vsr.video.joins import JoinedPackets
from tests.video.tools import flat_through_sink


def ts_clip(path: Path, audio: str) -> Path:
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        pytest.skip("needs ffmpeg")
    subprocess.run([ffmpeg, "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=32x24:rate=25", "-f", "lavfi", "-i",
                    "sine=sample_rate=48000", "-t", "1", "-c:v", "libx264", "-c:a", audio, str(path)], check=True)
    return path


def test_the_muxer_holds_what_it_writes():
    held = codecs_held("mpegts")
    assert {"libx264", "h264", "libx265", "aac", "ac3", "mp2", "mpeg2video", "dvb_subtitle"} <= held
    assert "ffv1" not in held and "prores_ks" not in held


@pytest.mark.parametrize("audio", ["aac", "ac3"])
def test_into_ts_h264_with_the_audio_copied_at_the_sources_times(tmp_path, audio):
    src = ts_clip(tmp_path / "in.ts", audio)
    out = tmp_path / "out.ts"
    flat_through_sink(src, out)

    def streams(path):
        with av.open(str(path)) as c:
            v = c.streams.video[0]
            times = [f.time for f in c.decode(v)]
            a = c.streams.audio[0]
            packets = [(p.pts, bytes(p)) for p in c.demux(a) if p.size]
            return v.codec_context.name, times, a.codec_context.name, packets
    codec, times, acodec, packets = streams(out)
    _, src_times, _, src_packets = streams(src)
    assert (codec, acodec) == ("h264", audio)
    assert times == src_times and len(times) == 25
    assert packets == src_packets  # copied packet for packet


def joined_ts(tmp_path: Path) -> Path:
    """Two MPEG-TS files of 5 frames of H.264 at 10 fps and AAC, joined end to end (``cat``): at frame 5 the
    second file's clock starts again, 0.5 s back, in the video and the audio."""
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        pytest.skip("needs ffmpeg")
    one = tmp_path / "one.ts"
    subprocess.run([ffmpeg, "-v", "error", "-f", "lavfi", "-i", "testsrc2=s=32x24:r=10:d=0.5", "-f", "lavfi", "-i",
                    "sine=d=0.5", "-c:v", "libx264", "-c:a", "aac", str(one)], check=True)
    joined = tmp_path / "joined.ts"
    joined.write_bytes(one.read_bytes() * 2)
    return joined


def halves(path: Path) -> tuple[list[list[Fraction]], list[list[Fraction]], Fraction]:
    """The video frames' and the audio packets' times (seconds, in file order) of each of a joined file's two
    parts (split where the video's dts goes back), and an audio packet's duration."""
    video, audio, last, part, frame = [[], []], [[], []], None, 0, Fraction(0)
    with av.open(str(path)) as c:
        for pkt in c.demux():
            if pkt.dts is None or not pkt.size:
                continue
            if pkt.stream.type == "video":
                part += last is not None and pkt.dts < last
                last = pkt.dts
                video[part].append(pkt.pts * pkt.time_base)
            else:
                audio[min(part, 1)].append(pkt.pts * pkt.time_base)
                frame = pkt.duration * pkt.time_base
    return [sorted(v) for v in video], audio, frame


def output_times(path: Path) -> tuple[list[Fraction], list[Fraction]]:
    with av.open(str(path)) as c:
        video = sorted(f.pts * f.time_base for f in c.decode(c.streams.video[0]))
    with av.open(str(path)) as c:
        audio = [p.pts * p.time_base for p in c.demux(c.streams.audio[0]) if p.size]
    return video, audio


@pytest.mark.parametrize("ext", ["mkv", "mp4", "ts"])
def test_ts_files_joined_end_to_end_keep_their_audio_in_sync_across_the_join(tmp_path, capsys, ext):
    """The video after the join is timed on from the frame before it (0.5 s later than its clock says): the copied
    audio follows it by the same shift, in sync with the picture (it crashed the muxer: its packets went back)."""
    src, out = joined_ts(tmp_path), tmp_path / f"out.{ext}"
    (v1, v2), (a1, a2), frame = halves(src)
    assert len(v1) == len(v2) == 5 and v2[0] < v1[-1] and a2[0] < a1[-1]  # (the clip is what the test needs)
    rc = main(["upscale", str(src), str(out), "--weights", "random", "--config", "edvr-tiny", "--backend", "torch",
               "--threads", "1", "--quiet"])
    err = capsys.readouterr().err
    assert rc == 0 and "Traceback" not in err, err
    assert "timestamps synthesised" in err
    assert len([line for line in err.splitlines() if "go back at a join" in line]) == 1, err
    video, audio = output_times(out)
    assert len(video) == 10 and all(b > a for a, b in zip(video, video[1:]))
    shift = (video[5] - video[0]) - (v2[0] - v1[0])  # how far the video after the join moved
    assert shift > 0
    tolerance = Fraction(1, 500)  # MP4 and Matroska keep milliseconds
    # the audio before the join where it was against the picture; after it, moved by the video's shift
    assert len(audio) >= len(a1) + len(a2) - 2  # (at most the overlap of the two parts' audio is dropped)
    assert all(abs((b - video[0]) - (a - v1[0])) <= tolerance for a, b in zip(a1, audio))
    after = audio[len(a1):]
    assert all(abs((b - video[0]) - (a - v1[0] + shift)) <= tolerance for a, b in zip(a2[-len(after):], after))
    # continuous: each packet after the one before it, no gap (one frame apart at most)
    assert all(0 < b - a <= frame + tolerance for a, b in zip(audio, audio[1:]))


def test_a_copied_packet_the_muxer_refuses_is_dropped_with_one_warning(tmp_path, capsys, monkeypatch):
    """Packets that go back other than at a join (here: the join not followed) are refused by the muxer: dropped,
    said once for the stream, the output written; never a traceback."""
    import vsr.video.sink

    monkeypatch.setattr(vsr.video.sink, "CLOCKED", ())
    src, out = joined_ts(tmp_path), tmp_path / "out.mkv"
    rc = main(["upscale", str(src), str(out), "--weights", "random", "--config", "edvr-tiny", "--backend", "torch",
               "--threads", "1", "--quiet"])
    err = capsys.readouterr().err
    assert rc == 0 and "Traceback" not in err, err
    assert len([line for line in err.splitlines() if "muxer refused a packet of the source's aac audio" in line]) == 1
    assert len(output_times(out)[0]) == 10

def test_a_chunked_job_of_ts_files_joined_end_to_end_equals_a_single_pass(tmp_path, tiny_backend):
    from tests.jobs.test_chunks import check_job_equals_single_pass

    check_job_equals_single_pass(joined_ts(tmp_path), tmp_path, ".mkv", tiny_backend)


def test_audio_read_past_a_join_before_the_video_waits_for_the_videos_shift():
    """In file order the audio after a join can come before the video's first packet after it: those packets
    wait (read ahead) for the video's shift, not a guess from the audio's own end."""
    video = SimpleNamespace(index=0, type="video", average_rate=Fraction(10), codec_context=None)
    audio = SimpleNamespace(index=1, type="audio", codec_context=SimpleNamespace(name="aac"))

    def packet(st, ts, duration):
        return SimpleNamespace(stream=st, pts=ts, dts=ts, duration=duration, time_base=Fraction(1, 1000))

    # two parts: video 0..500 ms (5 frames), audio 0..550 ms (a padded end); the second part's audio first
    first = [packet(video, t, 100) for t in range(0, 500, 100)] + [packet(audio, t, 50) for t in range(0, 550, 50)]
    second = [packet(audio, t, 50) for t in range(0, 500, 50)] + [packet(video, t, 100) for t in range(0, 500, 100)]
    queue = deque(first + second)
    feed = SimpleNamespace(streams=[audio], ended=False, select=lambda i: None, close=lambda: None)

    def next_packet():
        if queue:
            return queue.popleft()
        feed.ended = True
        return None
    feed.next_packet = next_packet
    joined = JoinedPackets(feed, video=0)
    with pytest.warns(UserWarning, match=r"stream 1 \(aac audio\) go back at a join.*moved on by 0.5 s.*1 packet "):
        out = [p.dts for p in iter(joined.next_packet, None)]
    assert joined.ended
    # the video after the join moved by 500 ms (on from its end): the audio too (not 550 ms, on from its own
    # end), its first packet, which starts inside the first part's last, dropped
    assert out == list(range(0, 550, 50)) + list(range(550, 1000, 50))


def test_joined_ts_files_on_standard_input_keep_their_audio_in_sync_across_the_join(tmp_path):
    """Read from a pipe, the stream's audio after a join followed its own audio before it (34 ms off the picture
    on this clip): the pipe's demuxer gives the video's packet times beside the audio, and the audio moves by the
    video's own shift, as a file's does."""
    import sys

    src, out = joined_ts(tmp_path), tmp_path / "out.mkv"
    (v1, v2), (a1, a2), frame = halves(src)
    with open(src, "rb") as f:
        r = subprocess.run([sys.executable, "-m", "vsr", "upscale", "-", str(out), "--weights", "random", "--config",
                            "edvr-tiny", "--backend", "torch", "--threads", "1", "--quiet"], stdin=f,
                           capture_output=True, text=True, timeout=600, cwd=Path(__file__).resolve().parents[2])
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert len([line for line in r.stderr.splitlines() if "go back at a join" in line]) == 1, r.stderr
    video, audio = output_times(out)
    assert len(video) == 10
    shift = (video[5] - video[0]) - (v2[0] - v1[0])
    tolerance = Fraction(1, 500)  # Matroska keeps milliseconds
    assert all(abs((b - video[0]) - (a - v1[0])) <= tolerance for a, b in zip(a1, audio))
    after = audio[len(a1):]
    assert after and all(abs((b - video[0]) - (a - v1[0] + shift)) <= tolerance
                         for a, b in zip(a2[-len(after):], after))
