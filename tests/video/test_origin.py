"""A transport stream's clock is not carried into an MP4's or Matroska's timeline (vsr.video.origin): a TS
source 10 s into its clock came out with a 11.4 s lead-in (an empty edit) that players show as a black picture.
Checked against the source's own timestamps as PyAV reads them, and ``ffmpeg -c copy``'s rule: every stream moves
back by the source's start, their spacing kept."""

from __future__ import annotations

import warnings
from fractions import Fraction

import av
import numpy as np
import pytest

from tests.conftest import pattern
from vsr.pipeline import RunnerSettings, upscale
from vsr.video import EncoderSettings

CLOCK = 10  # seconds into the source's clock where its first frame is


def times(path) -> dict[str, list[Fraction]]:
    """Each stream kind's packet start times (seconds), in presentation order."""
    out: dict[str, list[Fraction]] = {}
    with av.open(str(path)) as c:
        for pkt in c.demux():
            if pkt.size and pkt.pts is not None:
                out.setdefault(pkt.stream.type, []).append(pkt.pts * pkt.time_base)
    return {k: sorted(v) for k, v in out.items()}


def start(path) -> Fraction:
    return min(t[0] for t in times(path).values())


@pytest.fixture
def ts_clip(tmp_path):
    """8 frames of 25 fps H.264 and AAC stereo in MPEG-TS, CLOCK seconds into their clock (as a capture is)."""
    path = tmp_path / "cam.ts"
    with av.open(str(path), "w") as oc:
        vs = oc.add_stream("libx264", rate=25)
        vs.width, vs.height, vs.pix_fmt = 32, 16, "yuv420p"
        vs.options = {"preset": "ultrafast"}
        aus = oc.add_stream("aac", rate=48000)
        aus.layout = "stereo"
        for i in range(8):
            frame = av.VideoFrame.from_ndarray(pattern(i, 32, 16), format="rgb24").reformat(format="yuv420p")
            frame.pts, frame.time_base = CLOCK * 25 + i, Fraction(1, 25)
            oc.mux(vs.encode(frame))
        oc.mux(vs.encode(None))
        for k in range(10):  # 0.21 s of a tone, starting with the video
            samples = np.sin(np.arange(1024 * k, 1024 * (k + 1)) / 48000 * 2 * np.pi * 440)[None].repeat(2, 0)
            frame = av.AudioFrame.from_ndarray(samples.astype(np.float32), format="fltp", layout="stereo")
            frame.sample_rate, frame.pts, frame.time_base = 48000, CLOCK * 48000 + 1024 * k, Fraction(1, 48000)
            oc.mux(aus.encode(frame))
        oc.mux(aus.encode(None))
    return path


def run(src, dst, backend, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        upscale(src, dst, backend=backend, **kw)
    return times(dst)


@pytest.mark.parametrize("ext", ["mp4", "mkv", "mov"])
def test_a_transport_streams_clock_is_moved_out_of_a_files_timeline(ts_clip, tmp_path, tiny_backend, ext):
    src = times(ts_clip)
    origin = start(ts_clip)
    assert origin > CLOCK - 1  # (the source's clock; AAC's priming starts the audio 21 ms early)
    out = run(ts_clip, tmp_path / f"o.{ext}", tiny_backend)
    tolerance = Fraction(1, 1000)  # MP4 and Matroska keep milliseconds
    for kind in ("video", "audio"):
        assert len(out[kind]) == len(src[kind])
        assert all(abs((a - origin) - b) <= tolerance for a, b in zip(src[kind], out[kind])), kind
    assert min(out["audio"][0], out["video"][0]) <= tolerance  # the file starts at 0
    with av.open(str(tmp_path / f"o.{ext}")) as c:
        assert c.duration / 1e6 < 1  # not 11.7 s: no lead-in


def test_into_a_transport_stream_again_the_clock_is_kept(ts_clip, tmp_path, tiny_backend):
    src = times(ts_clip)
    out = run(ts_clip, tmp_path / "o.ts", tiny_backend)
    assert out["video"] == src["video"] and out["audio"] == src["audio"]


def test_a_trimmed_run_of_a_transport_stream_starts_where_the_streams_start(ts_clip, tmp_path, tiny_backend):
    """`--frames 3:7`: frame 3 goes where the source's first frame is, counted from the source's start."""
    src = times(ts_clip)
    origin = start(ts_clip)
    out = run(ts_clip, tmp_path / "o.mkv", tiny_backend, runner=RunnerSettings(frames=(3, 7)))
    assert len(out["video"]) == 4
    assert abs(out["video"][0] - (src["video"][0] - origin)) <= Fraction(1, 1000)
    assert all(abs((b - a) - (src["video"][3 + i] - src["video"][3])) <= Fraction(1, 1000)
               for i, (a, b) in enumerate(zip([out["video"][0]] * 4, out["video"])))


def test_a_chunked_job_of_a_transport_stream_equals_a_single_pass(ts_clip, tmp_path, tiny_backend):
    from tests.jobs.test_chunks import check_job_equals_single_pass

    check_job_equals_single_pass(ts_clip, tmp_path, ".mkv", tiny_backend)
    assert start(tmp_path / "job.mkv") == 0
