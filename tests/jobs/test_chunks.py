"""A job cut into chunks of 8 frames, each computed by ``run_chunk`` and joined by ``join_chunks``, decodes to
exactly the frames (bit-identical planes) and timestamps of one ``vsr.pipeline.upscale`` pass over the same
real clip with the same options, audio included; a committed chunk is never computed again."""

from __future__ import annotations

import hashlib
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

from tests.conftest import VIDEOS

ENCODER = EncoderSettings(codec="ffv1")
REQUEST = BackendRequest("random", "edvr-tiny", TorchOptions(threads=1))


def decoded(path: Path) -> dict:
    """Every stream of ``path`` as the decoder gives it: video frames (pts, duration, plane digest), other
    streams' packets (pts, dts, bytes digest), time bases."""
    out = {}
    with av.open(str(path)) as c:
        for st in c.streams:
            out[st.index] = {"type": st.type, "time_base": st.time_base, "items": []}
        for pkt in c.demux():
            st = out[pkt.stream.index]
            if pkt.stream.type == "video":
                for f in pkt.decode():
                    digest = hashlib.sha256(f.to_ndarray().tobytes()).hexdigest()
                    st["items"].append((f.pts, f.duration, f.format.name, f.width, f.height, digest))
            elif pkt.size:
                st["items"].append((pkt.pts, pkt.dts, hashlib.sha256(bytes(pkt)).hexdigest()))
    return out


def single_pass(src: Path, dst: Path, backend) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        upscale(src, dst, backend=backend, encoder=ENCODER)


def run_job(spec: JobSpec, backend, chunk_frames: int = 8) -> list:
    chunks = plan_chunks(spec, chunk_frames)
    for c in chunks:
        run_chunk(spec, c, backend=backend)
    join_chunks(spec, chunks)
    return chunks


@pytest.mark.parametrize("name, suffix", [
    ("h264_256x240_35fps_1s_noaudio.mp4", ".mp4"),
    ("h264_aac_320x240_29.97fps_1.2s_realshort.mp4", ".mkv"),
])
def test_chunked_job_equals_a_single_pass(name, suffix, tmp_path, tiny_backend):
    src = VIDEOS / name
    if not src.exists():
        pytest.skip(f"{src} not here")
    single_pass(src, tmp_path / f"single{suffix}", tiny_backend)
    spec = JobSpec.from_settings(src, tmp_path / f"job{suffix}", REQUEST, ENCODER, RunnerSettings())
    chunks = run_job(spec, tiny_backend)
    assert len(chunks) > 2
    assert decoded(tmp_path / f"job{suffix}") == decoded(tmp_path / f"single{suffix}")
    assert not chunk_folder(spec).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([f"job{suffix}", f"single{suffix}"])
