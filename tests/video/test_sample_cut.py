"""A trimmed run's (``--frames A:B``) audio starts at frame A: the copied packet running there is kept in an .mp4 or
.mov, its head cut by the edit list (it was left out: the audio started up to a packet late); audio re-encoded
for the container is cut to the sample at both ends (it started a packet late and ran a packet past the video).
Measured as a player would: ffprobe's start time, and the samples PyAV's decoders give."""

from __future__ import annotations

import json
import shutil
import subprocess
from contextlib import nullcontext
from fractions import Fraction
from pathlib import Path

import av
import pytest

from vsr.pipeline.runner import RunnerSettings
from vsr.pipeline.upscale import upscale
from vsr.video import EncoderSettings

from tests.data import VIDEOS
from tests.jobs.helpers import WindowBackend

REALSHORT = VIDEOS / "h264_aac_320x240_29.97fps_1.2s_realshort.mp4"  # 2998/90000 s frames; AAC 48 kHz


def run(src: Path, dst: Path, frames: tuple[int, int], codec: str = "ffv1") -> None:
    with pytest.warns(UserWarning, match="re-encoding") if dst.suffix == ".webm" else nullcontext():
        upscale(src, dst, backend=WindowBackend(), encoder=EncoderSettings(codec=codec),
                runner=RunnerSettings(frames=frames))


def audio_start(path: Path) -> float:
    out = json.loads(subprocess.run(["ffprobe", "-v", "error", "-of", "json", "-select_streams", "a",
                                     "-show_entries", "stream=start_time", str(path)],
                                    capture_output=True, text=True, check=True).stdout)
    return float(out["streams"][0]["start_time"])


def decoded(path: Path) -> tuple[Fraction, int]:
    """(the time of the first sample PyAV's decoder gives, how many it gives)."""
    with av.open(str(path)) as c:
        frames = list(c.decode(c.streams.audio[0]))
    return frames[0].pts * frames[0].time_base, sum(f.samples for f in frames)


def source_packets(path: Path) -> list[tuple[int, int]]:
    with av.open(str(path)) as c:
        return [(p.pts, p.pts + p.duration) for p in c.demux(c.streams.audio[0]) if p.size]


@pytest.mark.parametrize("suffix", [".mp4", ".mov"])
def test_copied_audio_starts_at_frame_a(tmp_path, suffix):
    """Frames 5:20: frame A at 0.1666 s is inside the AAC packet 0.1617-0.1830 s; that packet was left out (audio
    from 0.016 s).  Now it is kept, its 233 samples before A skipped by the edit list: the decoder plays from 0,
    every sample from A's to the end of the last packet kept (the mov demuxer does not cut at the list's end)."""
    run(REALSHORT, tmp_path / f"out{suffix}", (5, 20), codec="libx264")
    a, b = Fraction(5 * 2998, 90000) * 48000, Fraction(20 * 2998, 90000) * 48000  # (samples of the source)
    last = max(end for start, end in source_packets(REALSHORT) if start < b)
    first, count = decoded(tmp_path / f"out{suffix}")
    assert audio_start(tmp_path / f"out{suffix}") == pytest.approx(0, abs=1e-6)
    assert first == 0
    assert count == round(last - a)


def test_copied_audio_into_matroska_keeps_the_bound(tmp_path):
    """FFmpeg's Matroska muxer writes no start cut for a copied packet: the one at A is left out, as documented
    (the audio starts within a packet of A, never before it: a block below 0 is an error to Firefox's WebM reader
    and to Chrome's Media Source parser)."""
    run(REALSHORT, tmp_path / "out.mkv", (5, 20))
    assert 0 <= audio_start(tmp_path / "out.mkv") <= 1024 / 48000


@pytest.fixture(scope="module")
def pcm(tmp_path_factory) -> Path:
    """1 s of 25 fps video and stereo 16-bit PCM at 44.1 kHz (packed samples; resampled for Opus)."""
    if shutil.which("ffmpeg") is None:
        pytest.skip("needs ffmpeg")
    out = tmp_path_factory.mktemp("pcm") / "s16.mkv"
    subprocess.run(["ffmpeg", "-v", "error", "-f", "lavfi", "-i", "testsrc=size=64x48:rate=25:duration=1", "-f",
                    "lavfi", "-i", "sine=frequency=440:sample_rate=44100:duration=1", "-ac", "2", "-c:v", "ffv1",
                    "-c:a", "pcm_s16le", str(out)], check=True)
    return out


@pytest.mark.parametrize("case", ["aac", "pcm"])
def test_reencoded_audio_is_cut_to_the_sample(tmp_path, pcm, case):
    """Into .webm the audio becomes Opus (48 kHz), decoded and encoded anyway: cut to [A's time, B's time).
    AAC, frames 5:19 (0.4664 s): it ran from 0.017 s to 0.486 s (22528 samples); PCM, frames 3:17 of 25 fps
    (0.56 s): from 0.020 s, 26750 samples.  Now the decoder plays from 0 the video's length in samples (PCM: within
    the resampler's tail, 15 samples)."""
    src, frames, length = ((REALSHORT, (5, 19), Fraction(14 * 2998, 90000)) if case == "aac" else
                           (pcm, (3, 17), Fraction(14, 25)))
    run(src, tmp_path / "out.webm", frames, codec="libvpx-vp9")
    first, count = decoded(tmp_path / "out.webm")
    assert first == pytest.approx(0, abs=1e-3)  # (Matroska's block times: milliseconds)
    assert count == pytest.approx(float(length * 48000), abs=1 if case == "aac" else 24)
