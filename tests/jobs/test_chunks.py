"""A job cut into chunks of 8 frames, each computed by ``run_chunk`` and joined by ``join_chunks``, decodes to
exactly the frames (bit-identical planes) and timestamps of one ``vsr.pipeline.upscale`` pass over the same real
clip with the same options (ffv1), audio included; chunks enter the file at keyframes only where that decodes
exactly; a committed chunk is never computed again, and nothing partial is left anywhere."""

from __future__ import annotations

import hashlib
import logging
import os
import warnings
from pathlib import Path

import av
import pytest

from vsr.backends import BackendRequest, TorchOptions
from vsr.jobs import JobSpec, chunk_path, is_committed, join_chunks, plan_chunks, run_chunk
from vsr.jobs.chunks import chunk_folder, report_path
from vsr.pipeline.runner import RunnerSettings
from vsr.pipeline.upscale import upscale
from vsr.video import EncoderSettings
from vsr.video.excerpt import excerpt

from tests.data import VIDEOS
from tests.jobs.helpers import WindowBackend

ENCODER = EncoderSettings(codec="ffv1")
REQUEST = BackendRequest("random", "edvr-tiny", TorchOptions(threads=1))


def need(name: str) -> Path:
    path = VIDEOS / name
    if not path.exists():
        pytest.skip(f"{path} not here")
    return path


def decoded(path: Path) -> dict:
    """Every stream of ``path`` as a reader gets it: video frames (pts, duration, format, size, sample digest),
    the other streams' packets (pts, dts, duration, data digest), time bases."""
    out = {}
    with av.open(str(path)) as c:
        for st in c.streams:
            out[st.index] = {"type": st.type, "time_base": st.time_base, "items": []}
        for pkt in c.demux():
            items = out[pkt.stream.index]["items"]
            if pkt.stream.type == "video":
                for f in pkt.decode():
                    digest = hashlib.sha256(f.to_ndarray().tobytes()).hexdigest()
                    items.append((f.pts, f.duration, f.format.name, f.width, f.height, digest))
            elif pkt.size:
                items.append((pkt.pts, pkt.dts, pkt.duration, hashlib.sha256(bytes(pkt)).hexdigest()))
    return out


def single_pass(src: Path, dst: Path, backend, runner: RunnerSettings = RunnerSettings()) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        upscale(src, dst, backend=backend, encoder=ENCODER, runner=runner)


def run_job(spec: JobSpec, backend, chunk_frames: int = 8) -> list:
    chunks = plan_chunks(spec, chunk_frames)
    for c in chunks:
        run_chunk(spec, c, backend=backend)
    join_chunks(spec, chunks)
    return chunks


def check_job_equals_single_pass(src: Path, tmp_path: Path, suffix: str, backend, request=REQUEST,
                                 runner: RunnerSettings = RunnerSettings()) -> list:
    single_pass(src, tmp_path / f"single{suffix}", backend, runner)
    spec = JobSpec.from_settings(src, tmp_path / f"job{suffix}", request, ENCODER, runner)
    chunks = run_job(spec, backend)
    got, want = decoded(tmp_path / f"job{suffix}"), decoded(tmp_path / f"single{suffix}")
    assert got == want
    assert sum(len(s["items"]) for s in want.values() if s["type"] == "video") == chunks[-1].stop
    assert not chunk_folder(spec).parent.exists()  # nothing left beside the output
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == suffix) == [f"job{suffix}", f"single{suffix}"]
    return chunks


@pytest.mark.parametrize("name, suffix, packets", [
    ("h264_256x240_35fps_1s_noaudio.mp4", ".mp4", None),
    ("h264_aac_320x240_29.97fps_1.2s_realshort.mp4", ".mkv", None),  # AAC audio; a second keyframe at 30
    ("vp9_320x180_30fps_10s_bbb.webm", ".mkv", 40),  # its first 40 frames, stream-copied
])
def test_chunked_job_equals_a_single_pass_on_real_clips(name, suffix, packets, tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="vsr.video.seek")
    src = need(name)
    if packets is not None:
        src = excerpt(src, tmp_path / f"clip{src.suffix}", packets)
    # realshort without scene cuts: its last chunk reads frames 30.. and enters the file at its keyframe 30 (with
    # cuts on, the detector's context reaches back to frame 28, before that keyframe)
    runner = RunnerSettings(scene_cuts="off" if "realshort" in name else "auto")
    chunks = check_job_equals_single_pass(src, tmp_path, suffix, WindowBackend(), request=REQUEST, runner=runner)
    assert len(chunks) >= 5 and all(c.stop - c.start == 8 for c in chunks[:-1])
    if "realshort" in name:
        assert [c.decode_from for c in chunks] == [0, 0, 0, 0, 30]
    assert "decodes differently" not in caplog.text  # an entry was used as planned, not replaced by the top


def test_chunked_edvr_tiny_equals_a_single_pass(make_clip, tmp_path, tiny_backend):
    clip = make_clip("clip.mp4", width=24, height=16, frames=20)
    assert tiny_backend.keeps_features  # each frame's features computed once per chunk, from wherever it starts
    chunks = check_job_equals_single_pass(clip, tmp_path, ".mkv", tiny_backend)
    assert [(c.start, c.stop) for c in chunks] == [(0, 8), (8, 16), (16, 20)]


@pytest.mark.slow
def test_chunked_split_plan_streaming_features_equals_a_single_pass(make_clip, tmp_path, monkeypatch):
    """The default backend (ONNX Runtime, split plan, each frame's features computed once), batches of 2."""
    from vsr.backends import SplitOptions, open_backend

    monkeypatch.setenv("VSR_ENGINE_DIR", str(tmp_path / "engines"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        backend = open_backend("random", "edvr-tiny", SplitOptions(threads=1))
    clip = make_clip("clip.mp4", width=24, height=16, frames=20)
    request = BackendRequest("random", "edvr-tiny", SplitOptions(threads=1))
    check_job_equals_single_pass(clip, tmp_path, ".mkv", backend, request, RunnerSettings(batch=2))
    assert backend.keeps_features and backend.timings()["segment_features"] > 0


def test_plan_enters_verified_keyframes_only(tmp_path):
    cockatoo = need("h264yuv444_mp3_1280x720_20fps_14s_cockatoo.mp4")
    spec = JobSpec.from_settings(cockatoo, tmp_path / "c.mkv", REQUEST, ENCODER, RunnerSettings())
    chunks = plan_chunks(spec, 100)  # keyframes 76 and 145 decode wrongly after a seek
    assert [(c.start, c.stop, c.decode_from) for c in chunks] == [(0, 100, 0), (100, 200, 0), (200, 280, 0)]
    bbb = need("vp9_320x180_30fps_10s_bbb.webm")
    spec = JobSpec.from_settings(bbb, tmp_path / "b.mkv", REQUEST, ENCODER, RunnerSettings())
    chunks = plan_chunks(spec, 100)  # keyframes 128 and 256 decode exactly; the halo is 2 frames
    assert [(c.start, c.decode_from) for c in chunks] == [(0, 0), (100, 0), (200, 128)]
    assert chunks[2].entry_pts is not None and chunks[2].entry_digest


def test_a_committed_chunk_is_never_computed_again(tmp_path):
    src = need("h264_256x240_35fps_1s_noaudio.mp4")
    spec = JobSpec.from_settings(src, tmp_path / "out.mp4", REQUEST, ENCODER, RunnerSettings())
    backend = WindowBackend()
    chunks = plan_chunks(spec, 8)
    first = run_chunk(spec, chunks[1], backend=backend)
    calls, stamp = backend.calls, os.stat(chunk_path(spec, chunks[1])).st_mtime_ns
    assert calls == 8 and is_committed(spec, chunks[1]) and not is_committed(spec, chunks[0])
    assert run_chunk(spec, chunks[1], backend=backend) == first
    assert backend.calls == calls and os.stat(chunk_path(spec, chunks[1])).st_mtime_ns == stamp
    assert first["frames"] == 8 and first["settings"]["chunk"]["index"] == 1
    for c in chunks:
        run_chunk(spec, c, backend=backend)
    assert backend.calls == chunks[-1].stop
    join_chunks(spec, chunks)
    stamp = os.stat(spec.output).st_mtime_ns
    join_chunks(spec, chunks)  # joined already: nothing to do
    assert os.stat(spec.output).st_mtime_ns == stamp


class BreaksAt(WindowBackend):
    def __init__(self, at: int):
        super().__init__()
        self.at = at

    def infer(self, x):
        if self.calls + 1 == self.at:
            raise RuntimeError("worker lost")
        return super().infer(x)


def test_a_failed_chunk_leaves_nothing_and_a_join_waits_for_every_chunk(tmp_path):
    src = need("h264_256x240_35fps_1s_noaudio.mp4")
    spec = JobSpec.from_settings(src, tmp_path / "out.mp4", REQUEST, ENCODER, RunnerSettings())
    chunks = plan_chunks(spec, 8)
    with pytest.raises(RuntimeError, match="worker lost"):
        run_chunk(spec, chunks[0], backend=BreaksAt(5))
    assert [p.name for p in chunk_folder(spec).iterdir()] == [".vsr-job"]  # the folder's marker only
    assert not is_committed(spec, chunks[0]) and not report_path(spec, chunks[0]).exists()
    with pytest.raises(Exception, match="chunk 0 of 5 is not done"):
        join_chunks(spec, chunks)
    assert not Path(spec.output).exists()


def test_a_join_stopped_after_its_rename_only_removes_the_chunks_and_never_replaces_a_foreign_file(tmp_path):
    src = need("h264_256x240_35fps_1s_noaudio.mp4")
    spec = JobSpec.from_settings(src, tmp_path / "out.mp4", REQUEST, ENCODER, RunnerSettings())
    chunks = plan_chunks(spec, 16)
    backend = WindowBackend()
    for c in chunks:
        run_chunk(spec, c, backend=backend)
    Path(spec.output).write_bytes(b"someone else's file")
    with pytest.raises(Exception, match="output exists"):
        join_chunks(spec, chunks)
    assert Path(spec.output).read_bytes() == b"someone else's file" and all(is_committed(spec, c) for c in chunks)
    Path(spec.output).unlink()
    join_chunks(spec, chunks)
    # as if stopped between the rename and the removal: the folder is back, with its note of the joined file
    folder = chunk_folder(spec)
    folder.mkdir(parents=True)
    (folder / ".vsr-job").write_text(spec.key)
    st = os.stat(spec.output)
    (folder / "joined.json").write_text(f"[{st.st_dev}, {st.st_ino}]")
    join_chunks(spec, chunks)
    assert not folder.parent.exists() and os.stat(spec.output).st_mtime_ns == st.st_mtime_ns


def timestamps(path: Path) -> tuple:
    with av.open(str(path)) as c:
        video = [(f.pts, f.duration) for f in c.decode(video=0)]
    items = decoded(path)
    return video, [s["items"] for s in items.values() if s["type"] != "video"]


@pytest.mark.parametrize("suffix", [".mp4", ".mkv"])
def test_with_the_default_lossy_codec_frames_timestamps_and_audio_equal_a_single_pass(suffix, tmp_path):
    # libx264 with B-frames: MP4 and MKV store its packets length-prefixed and give back no exact start (MP4)
    # or no dts (MKV); pictures differ at chunk starts, where each chunk begins with a keyframe
    src = need("h264_aac_320x240_29.97fps_1.2s_realshort.mp4")
    backend = WindowBackend()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        upscale(src, tmp_path / f"single{suffix}", backend=backend)
    spec = JobSpec.from_settings(src, tmp_path / f"job{suffix}", REQUEST, EncoderSettings(), RunnerSettings())
    run_job(spec, backend)
    assert timestamps(tmp_path / f"job{suffix}") == timestamps(tmp_path / f"single{suffix}")


def test_a_10_bit_sdr_source_is_joined_as_one_10_bit_hevc_stream(make_clip, tmp_path):
    """A 10-bit SDR source's default is 10-bit HEVC (it was H.264 High 10): every chunk chooses it alike, and
    their join is one Main 10 stream, tagged hvc1, with a single pass's frames and timestamps."""
    src = make_clip("phone.mp4", width=64, height=48, frames=20, codec="libx265", pix_fmt="yuv420p10le", matrix=1,
                    range=1, primaries=1, transfer=1, options={"x265-params": "log-level=error"})
    backend = WindowBackend()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        upscale(src, tmp_path / "single.mp4", backend=backend)
    spec = JobSpec.from_settings(src, tmp_path / "job.mp4", REQUEST, EncoderSettings(), RunnerSettings())
    chunks = run_job(spec, backend)
    assert len(chunks) == 3
    with av.open(str(tmp_path / "job.mp4")) as c:
        cc = c.streams.video[0].codec_context
        assert (cc.name, cc.profile, cc.pix_fmt, cc.codec_tag) == ("hevc", "Main 10", "yuv420p10le", "hvc1")
    assert timestamps(tmp_path / "job.mp4") == timestamps(tmp_path / "single.mp4")
    assert len(timestamps(tmp_path / "job.mp4")[0]) == 20


def test_a_chunked_job_sees_the_scene_cuts_of_a_single_pass(tmp_path):
    """Two real clips joined at a hard cut (frame 10), chunks of 4: the cut lies in a chunk's halo and right at a
    chunk's edge; with cuts detected the job still equals one pass, and that pass differs from one with cuts off
    (so the cut really shaped the windows)."""
    from tests.pipeline.test_scenes import bbb, reds, write_ffv1

    clip = write_ffv1(tmp_path / "cut.mkv", reds(10) + bbb(30, 10))
    job = tmp_path / "job"
    job.mkdir()
    backend = WindowBackend()
    spec = JobSpec.from_settings(clip, job / "out.mkv", REQUEST, ENCODER, RunnerSettings(scene_cuts="auto"))
    chunks = plan_chunks(spec, 4)
    for c in chunks:
        run_chunk(spec, c, backend=backend)
    join_chunks(spec, chunks)
    single_pass(clip, tmp_path / "auto.mkv", backend, RunnerSettings(scene_cuts="auto"))
    single_pass(clip, tmp_path / "off.mkv", backend, RunnerSettings(scene_cuts="off"))
    assert decoded(job / "out.mkv") == decoded(tmp_path / "auto.mkv")
    assert decoded(tmp_path / "auto.mkv") != decoded(tmp_path / "off.mkv")
