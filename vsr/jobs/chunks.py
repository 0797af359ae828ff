"""Chunks of a job: plan, compute one (resumably), join them into the job's output.

A job's output frames are cut into chunks of about :data:`DEFAULT_CHUNK_FRAMES`.  Each chunk is computed by the
same runner as ``vsr upscale`` with ``RunnerSettings.frames = (start, stop)``: it decodes its temporal halo
(EDVR's window radius, and the reflection reach at the clip ends) but writes only its own frames, so every frame
equals a single pass's.  Decoding starts at the top, or at a keyframe verified at planning to decode exactly
(:mod:`vsr.video.seek`).  A chunk file holds video only (``VideoSink(passthrough=False)``), at the source's own
timestamps (the sink's ``--frames`` trim, which moves them back, is not used).  The join stream-copies the chunks'
packets, with the timestamps their encoders gave, through a :class:`~vsr.video.VideoSink` made with the job's
settings, which adds the source's audio and subtitles exactly as ``vsr upscale`` does.  With a lossless codec
(ffv1) the output decodes to the frames and timestamps of a single pass; a lossy one restarts at each chunk with
a keyframe, so pictures differ there (timestamps and audio do not).

Files, beside the output (all written under a temporary name and renamed when complete)::

    <output dir>/.vsr-chunks/<spec.key>/00003<output suffix>   the committed chunk (exists only when complete)
    <output dir>/.vsr-chunks/<spec.key>/00003.json             its run report      (both written
    <output dir>/.vsr-chunks/<spec.key>/00003.packets.json     its packets' times   before the chunk)
    <output dir>/.vsr-chunks/<spec.key>/joined.json            the joined file's identity (while a join ends)
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import av

from vsr.backends import Backend
from vsr.errors import InputError
from vsr.jobs.spec import ChunkSpec, JobSpec
from vsr.jobs.steps import chunk_only, step_totals
from vsr.model.weights import resolve_config
from vsr.pipeline.runner import FrameQueueRunner, decode_range
from vsr.video import VideoSink, VideoSource, check_output, open_source
from vsr.video.seek import EntryPoint, VideoScan, scan_video, verify_entry
from vsr.video.output import output_path, remove_stale_partials, video_partial

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


def packets_path(spec: JobSpec, chunk: ChunkSpec) -> Path:
    return chunk_folder(spec) / f"{chunk.index:05d}.packets.json"


def is_committed(spec: JobSpec, chunk: ChunkSpec) -> bool:
    return chunk_path(spec, chunk).is_file()


def window_radius(spec: JobSpec) -> int:
    """EDVR's temporal radius (``num_frame // 2``) for the job's model."""
    cfg, _ = resolve_config(spec.backend.weights, spec.backend.config)
    return cfg.num_frame // 2


def plan_chunks(spec: JobSpec, chunk_frames: int = DEFAULT_CHUNK_FRAMES) -> list[ChunkSpec]:
    """The chunks of ``spec``: ``chunk_frames`` output frames each (the last one may be shorter).

    The input is decoded from the top once (:func:`vsr.video.seek.scan_video`: the exact frame count, each
    frame's timestamp and picture digest).  A chunk starts decoding at the last keyframe before its halo whose
    seek was verified to decode every frame the chunk reads exactly as that decode from the top
    (:func:`vsr.video.seek.verify_entry`); where none is (the cockatoo clip), it decodes from the top.
    """
    if chunk_frames < 1:
        raise InputError(f"--chunk-frames must be at least 1, not {chunk_frames}")
    path = Path(spec.input)
    if path.is_dir():
        return _cut(_png_frames(path), chunk_frames)
    open_source(path).close()  # one-line errors for a missing file, not a video, no video stream
    try:
        scan = scan_video(path)
    except (av.FFmpegError, OSError) as e:
        raise InputError(f"cannot decode {path}: {e}") from None
    if scan.frames == 0:
        raise InputError(f"zero frames: {path} decodes to no frame")
    radius, runner = window_radius(spec), spec.runner
    entries = EntryFinder(path, scan)
    chunks = []
    for c in _cut(scan.frames, chunk_frames):  # the frames the runner decodes for the chunk, halo included
        first, stop = decode_range(replace(runner, frames=(c.start, c.stop)), radius)
        chunks.append(replace(c, **entries.fields(first, min(stop, scan.frames))))
    return chunks


def _cut(total: int, chunk_frames: int) -> list[ChunkSpec]:
    return [ChunkSpec(i, start, min(start + chunk_frames, total))
            for i, start in enumerate(range(0, total, chunk_frames))]


def _png_frames(path: Path) -> int:
    source = open_source(path)
    source.close()
    return source.info.frames


class EntryFinder:
    """Chooses where a chunk's decoding starts: the nearest verified keyframe at or before the first frame it
    reads (trying at most :attr:`TRIES` keyframes back), else the top.  A keyframe that fails once is not tried
    again; one verified up to a frame is not decoded again for a chunk that reads no further."""

    TRIES = 2

    def __init__(self, path: Path, scan: VideoScan):
        self.path, self.scan = path, scan
        self.bad: set[int] = set()
        self.verified: dict[int, int] = {}  # keyframe -> frames up to which it decodes exactly

    def fields(self, first: int, through: int) -> dict:
        """The ChunkSpec fields of the entry for a chunk that reads frames ``first .. through - 1``."""
        candidates = [k for k in reversed(self.scan.keyframes) if 0 < k <= first and k not in self.bad]
        for k in candidates[:self.TRIES]:
            if self.verified.get(k, -1) >= through or verify_entry(self.path, self.scan, k, through):
                self.verified[k] = max(self.verified.get(k, -1), through)
                e = self.scan.entry(k)
                return {"decode_from": e.index, "entry_pts": e.pts, "entry_digest": e.digest}
            log.info("%s: a seek to keyframe %d does not decode exactly; not used as an entry", self.path.name, k)
            self.bad.add(k)
        return {"decode_from": 0, "entry_pts": None, "entry_digest": None}


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
    source = _chunk_source(spec, chunk)
    try:
        sink = VideoSink(dst, source.info, encoder, scale=4, trim=False, passthrough=False)
        try:
            reused = backend is not None
            if backend is None:
                backend = request.open()
            if backend.scale != 4:
                raise InputError(f"the model upscales x{backend.scale}; vsr upscale writes x4 outputs")
            settings = {"input": spec.input, "output": spec.output, "job": spec.key, "chunk": chunk.to_dict(),
                        "weights": str(request.weights), "config": request.config, "backend": backend.name,
                        "codec": sink.codec, "pix_fmt": sink.pix_fmt, "frames": f"{chunk.start}:{chunk.stop}"}
            run = FrameQueueRunner(backend, replace(runner, frames=(chunk.start, chunk.stop)))
            sink.packet_times = []
            before = step_totals(backend) if reused else {}
            report = chunk_only(run.run(source, sink, settings_for_report=settings).to_dict(), before)

            def keep_notes():  # the chunk's notes exist before the chunk does
                _write_atomic(packets_path(spec, chunk), json.dumps(
                    {"time_base": str(sink.vs.codec_context.time_base), "packets": sink.packet_times}))
                _write_atomic(report_path(spec, chunk), json.dumps(report))

            sink.commit(before_rename=keep_notes)
        except BaseException:
            sink.abort()
            raise
    finally:
        source.close()
    return report


def _chunk_source(spec: JobSpec, chunk: ChunkSpec):
    """The input, entered at the chunk's verified keyframe where it has one."""
    if chunk.decode_from == 0 or Path(spec.input).is_dir():
        return open_source(spec.input)
    if not Path(spec.input).is_file():
        raise InputError(f"no such file: {spec.input}")
    return VideoSource(Path(spec.input), EntryPoint(chunk.decode_from, chunk.entry_pts, chunk.entry_digest))


def _write_atomic(path: Path, text: str) -> None:
    remove_stale_partials(path, frames=False)
    tmp = video_partial(path)
    tmp.write_text(text)
    os.replace(tmp, path)


def join_chunks(spec: JobSpec, chunks: list[ChunkSpec]) -> None:
    """Every chunk committed -> ``spec.output`` (temporary name, rename): the chunks' video packets in order,
    the source's audio and subtitles as ``vsr upscale`` adds them; then the chunk folder is removed.

    Idempotent: when the output exists and the chunk folder is gone, the job was joined and nothing is done.
    A join stopped between its rename and the folder's removal is recognised by the file's identity, noted in
    the folder before the rename (``joined.json``), and only finishes the removal.
    """
    folder = chunk_folder(spec)
    dst = output_path(Path(spec.output))
    if dst.exists() and (not folder.exists() or _joined(folder, dst)):
        _remove_folder(folder)
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
                _copy_packets(chunk_path(spec, c), c, json.loads(packets_path(spec, c).read_text()), sink)
            _write_atomic(folder / JOINED, json.dumps(_identity(sink.tmp)))
            sink.commit()
        except BaseException:
            sink.abort()
            raise
    finally:
        source.close()
    _remove_folder(folder)


JOINED = "joined.json"


def _identity(path: Path) -> list[int]:
    st = os.stat(path)
    return [st.st_dev, st.st_ino]


def _joined(folder: Path, dst: Path) -> bool:
    """True when ``dst`` is the file this job's join renamed into place (a rename keeps its identity)."""
    try:
        return json.loads((folder / JOINED).read_text()) == _identity(dst)
    except (OSError, ValueError):
        return False


def _remove_folder(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    try:
        folder.parent.rmdir()  # the shared .vsr-chunks folder, once no other job uses it
    except OSError:
        pass


def _copy_packets(path: Path, chunk: ChunkSpec, times: dict, sink: VideoSink) -> None:
    """Mux the video packets of the chunk file ``path`` into ``sink`` with the timestamps its encoder gave them
    (``times``: ``{"time_base", "packets": [[pts, dts, duration], ...]}`` in mux order).

    The chunk file's own timestamps are not used: containers do not give them all back exactly (MP4 rounds a
    late start to its millisecond edit list, Matroska moves a file to start at 0 and keeps no dts).
    """
    tb = Fraction(times["time_base"])
    recorded = times["packets"]
    n = 0
    with av.open(str(path), "r") as c:
        st = c.streams.video[0]
        annexb = _annexb_filter(st)
        for pkt in c.demux(st):
            if pkt.pts is None and pkt.dts is None:
                continue  # the demuxer's end marker
            if n < len(recorded):
                pkt.time_base = tb
                pkt.pts, pkt.dts, pkt.duration = recorded[n]
            n += 1
            for p in annexb.filter(pkt) if annexb is not None else (pkt,):
                sink.mux(p)
    if n != len(recorded) or n != chunk.stop - chunk.start:
        raise InputError(f"chunk {path} holds {n} packets, not {len(recorded)} frames")


def _annexb_filter(st) -> av.BitStreamFilterContext | None:
    """For H.264/HEVC that the chunk's container stores length-prefixed (MP4, MKV): a filter back to the
    Annex B packets the encoder gave, which is what the output's muxer expects from the join's encoder headers
    (it converts them itself).  The filter repeats the parameter sets before each keyframe; pictures and
    timestamps are unchanged."""
    cc = st.codec_context
    if cc.name in ("h264", "hevc") and cc.extradata and cc.extradata[0] == 1:
        return av.BitStreamFilterContext(f"{cc.name}_mp4toannexb", in_stream=st)
    return None
