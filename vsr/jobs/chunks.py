"""Chunks of a job: plan, compute one (resumably), join them into the job's output.

A job's output frames are cut into chunks of about :data:`DEFAULT_CHUNK_FRAMES`.  Each chunk is computed by the
same runner as ``vsr upscale`` with ``RunnerSettings.frames = (start, stop)``: it decodes its temporal halo
(EDVR's window radius, and the reflection reach at the clip ends) but writes only its own frames, so every frame
equals a single pass's.  A chunk file holds video only, with the source's own timestamps (the sink's ``--frames``
trim, which moves timestamps back, is not used); the join stream-copies the chunks' packets into one file through
a :class:`~vsr.video.VideoSink` made with the same settings, which adds the source's audio and subtitles exactly
as ``vsr upscale`` does.

Files, beside the output (all written under a temporary name and renamed when complete)::

    <output dir>/.vsr-chunks/<spec.key>/00003<output suffix>   the committed chunk (exists only when complete)
    <output dir>/.vsr-chunks/<spec.key>/00003.json             its run report (written before the chunk)
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import replace
from pathlib import Path

import av

from vsr.backends import Backend
from vsr.errors import InputError
from vsr.jobs.spec import ChunkSpec, JobSpec
from vsr.model.weights import resolve_config
from vsr.pipeline.runner import FrameQueueRunner
from vsr.video import VideoSink, check_output, open_source
from vsr.video.output import remove_stale_partials

log = logging.getLogger(__name__)

# Frames per chunk: a chunk re-decodes a halo of 2 * radius frames on each side and its encoder restarts, so
# chunks of a few hundred frames keep that overhead small (docs/benchmarks.md, "Batch jobs: chunked vs single
# pass"); a clip shorter than this is one chunk.
DEFAULT_CHUNK_FRAMES = 300
CHUNKS_FOLDER = ".vsr-chunks"


def chunk_folder(spec: JobSpec) -> Path:
    return Path(spec.output).parent / CHUNKS_FOLDER / spec.key


def chunk_path(spec: JobSpec, chunk: ChunkSpec) -> Path:
    """Where the committed chunk ``chunk`` of ``spec`` lives (in the output's container)."""
    return chunk_folder(spec) / f"{chunk.index:05d}{Path(spec.output).suffix}"


def report_path(spec: JobSpec, chunk: ChunkSpec) -> Path:
    return chunk_folder(spec) / f"{chunk.index:05d}.json"


def is_committed(spec: JobSpec, chunk: ChunkSpec) -> bool:
    return chunk_path(spec, chunk).is_file()


def window_radius(spec: JobSpec) -> int:
    """EDVR's temporal radius (``num_frame // 2``) for the job's model."""
    cfg, _ = resolve_config(spec.backend.weights, spec.backend.config)
    return cfg.num_frame // 2


def plan_chunks(spec: JobSpec, chunk_frames: int = DEFAULT_CHUNK_FRAMES) -> list[ChunkSpec]:
    """The chunks of ``spec``: ``chunk_frames`` output frames each (the last one may be shorter)."""
    if chunk_frames < 1:
        raise InputError(f"--chunk-frames must be at least 1, not {chunk_frames}")
    total = _source_frames(spec.input)
    return [ChunkSpec(i, start, min(start + chunk_frames, total))
            for i, start in enumerate(range(0, total, chunk_frames))]


def _source_frames(path: str) -> int:
    """The exact number of frames a decode from the top gives (decoded, never converted to RGB)."""
    source = open_source(path)
    try:
        if source.info.kind != "video":
            return source.info.frames
        with av.open(path, "r") as c:
            total = sum(1 for _ in c.decode(c.streams.video[0]))
    except av.FFmpegError as e:
        raise InputError(f"decoding {path} failed ({e})") from None
    finally:
        source.close()
    if total == 0:
        raise InputError(f"zero frames: {path} decodes to no frame")
    return total


def run_chunk(spec: JobSpec, chunk: ChunkSpec, *, backend: Backend | None = None) -> dict:
    """Compute ``chunk`` of ``spec`` into :func:`chunk_path` (temporary name, then rename) and return its run
    report (``RunReport.to_dict()``, also written beside it).  A committed chunk is not computed again: its
    stored report is returned.  ``backend``: an opened backend to reuse across chunks (else one is opened)."""
    dst = chunk_path(spec, chunk)
    if dst.is_file():
        return json.loads(report_path(spec, chunk).read_text())
    dst.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_partials(dst, frames=False)
    request, encoder, runner = spec.settings()
    source = open_source(spec.input)
    try:
        sink = VideoSink(dst, source.info, encoder, scale=4, trim=False, passthrough=False)
        try:
            if backend is None:
                backend = request.open()
            if backend.scale != 4:
                raise InputError(f"the model upscales x{backend.scale}; vsr upscale writes x4 outputs")
            settings = {"input": spec.input, "output": spec.output, "job": spec.key, "chunk": chunk.to_dict(),
                        "weights": str(request.weights), "config": request.config, "backend": backend.name,
                        "codec": sink.codec, "pix_fmt": sink.pix_fmt, "frames": f"{chunk.start}:{chunk.stop}"}
            run = FrameQueueRunner(backend, replace(runner, frames=(chunk.start, chunk.stop)))
            report = run.run(source, sink, settings_for_report=settings).to_dict()
            _write_atomic(report_path(spec, chunk), json.dumps(report))
            sink.commit()
        except BaseException:
            sink.abort()
            raise
    finally:
        source.close()
    return report


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.vsr-partial-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def join_chunks(spec: JobSpec, chunks: list[ChunkSpec]) -> None:
    """Every chunk committed -> ``spec.output`` (temporary name, rename): the chunks' video packets in order,
    the source's audio and subtitles as ``vsr upscale`` adds them; then the chunk folder is removed.

    Idempotent: when the output exists and the chunk folder is gone, the job was joined and nothing is done.
    """
    folder = chunk_folder(spec)
    dst = Path(spec.output)
    if not folder.exists() and dst.exists():
        return
    missing = [c.index for c in chunks if not is_committed(spec, c)]
    if missing:
        raise InputError(f"cannot join {dst.name}: chunk {missing[0]} of {len(chunks)} is not done")
    check_output(dst, Path(spec.input), spec.overwrite)
    source = open_source(spec.input)
    try:
        sink = VideoSink(dst, source.info, spec.encoder, scale=4, trim=False)
        try:
            for c in sorted(chunks, key=lambda c: c.index):
                _copy_packets(chunk_path(spec, c), c, sink)
            sink.commit()
        except BaseException:
            sink.abort()
            raise
    finally:
        source.close()
    shutil.rmtree(folder)
    try:
        folder.parent.rmdir()  # the shared .vsr-chunks folder, once no other job uses it
    except OSError:
        pass


def _copy_packets(path: Path, chunk: ChunkSpec, sink: VideoSink) -> None:
    with av.open(str(path), "r") as c:
        n = 0
        for pkt in c.demux(c.streams.video[0]):
            if pkt.dts is None and pkt.pts is None:
                continue  # the demuxer's end marker
            sink.mux(pkt)
            n += 1
    if n != chunk.stop - chunk.start:
        raise InputError(f"chunk {path} holds {n} frames, not {chunk.stop - chunk.start}")
