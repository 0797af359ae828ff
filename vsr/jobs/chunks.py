"""Chunks of a job: compute one (resumably), join them into the job's output.

A job's output frames are cut into chunks (:mod:`vsr.jobs.chunking`).  Each chunk is computed by the same runner as
``vsr upscale`` with ``RunnerSettings.frames = (start, stop)``: it decodes its temporal halo (EDVR's window
radius, and the reflection reach at the clip ends) but writes only its own frames, so every frame equals a
single pass's.  Decoding starts at the top, or at a keyframe verified at planning to decode exactly
(:mod:`vsr.video.seek`).  A chunk file holds video only (``VideoSink(passthrough=False)``), at the source's own
timestamps (the sink's ``--frames`` trim, which moves them back, is not used).  The join stream-copies the chunks'
packets, with the timestamps their encoders gave, through a :class:`~vsr.video.VideoSink` made with the job's
settings, which adds the source's audio and subtitles exactly as ``vsr upscale`` does (and for ``--frames A:B``
moves timestamps back and keeps the audio of those frames, as it does).  With a lossless codec (ffv1) the output
decodes to the frames and timestamps of a single pass; a lossy one restarts at each chunk with a keyframe, so
pictures differ there (timestamps and audio do not).

Before a chunk or the join reads the input, and again before either is committed, the input must be the one the
job was added with (:mod:`vsr.jobs.identity`).  Files, in the chunk folder (:mod:`vsr.jobs.folder`), all written
under a temporary name and renamed when complete::

    <output dir>/.vsr-chunks/<spec.key>/00003<output suffix>   the committed chunk (exists only when complete)
    <output dir>/.vsr-chunks/<spec.key>/00003.json             its run report      (both written
    <output dir>/.vsr-chunks/<spec.key>/00003.packets.json     its packets' times   before the chunk)
    <output dir>/.vsr-chunks/<spec.key>/joined<suffix>         the joined output, before it is renamed out
    <output dir>/.vsr-chunks/<spec.key>/joined.json            the joined file's identity (while a join ends)
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import replace
from fractions import Fraction
from pathlib import Path
from typing import Callable

import av

from vsr.backends import Backend
from vsr.errors import InputError
from vsr.jobs.folder import CHUNKS_FOLDER, ChunkFolder
from vsr.jobs.identity import check_unchanged
from vsr.jobs.chunking import DEFAULT_CHUNK_FRAMES, plan_chunks, plan_job
from vsr.jobs.spec import ChunkSpec, JobSpec
from vsr.jobs.steps import chunk_only, step_totals
from vsr.pipeline.runner import FrameQueueRunner
from vsr.video import VideoSink, VideoSource, check_output, open_source
from vsr.video.interlace import as_fields
from vsr.video.reading import open_input
from vsr.video.telecine import as_film, carries_pulldown
from vsr.video.output import remove_stale_partials
from vsr.video.seek import EntryPoint
from vsr.video.timecode import starting_at

__all__ = ["CHUNKS_FOLDER", "DEFAULT_CHUNK_FRAMES", "chunk_folder", "chunk_path", "discard", "is_committed",
           "join_chunks", "plan_chunks", "plan_job", "run_chunk", "tidy"]

log = logging.getLogger(__name__)

JOINED = "joined.json"


def chunk_folder(spec: JobSpec) -> Path:
    """Where the chunks of ``spec`` live (for messages and tests: vsr itself opens it with :class:`ChunkFolder`)."""
    return Path(spec.output).parent / CHUNKS_FOLDER / spec.key


def _name(spec: JobSpec, chunk: ChunkSpec) -> str:
    return f"{chunk.index:05d}{Path(spec.output).suffix}"


def chunk_path(spec: JobSpec, chunk: ChunkSpec) -> Path:
    """Where the committed chunk ``chunk`` of ``spec`` lives (in the output's container)."""
    return chunk_folder(spec) / _name(spec, chunk)


def report_path(spec: JobSpec, chunk: ChunkSpec) -> Path:
    return chunk_folder(spec) / f"{chunk.index:05d}.json"


def is_committed(spec: JobSpec, chunk: ChunkSpec) -> bool:
    """Whether ``chunk`` of ``spec`` is committed (a chunk folder vsr did not make is an :class:`InputError`)."""
    folder = ChunkFolder.open(spec.output, spec.key, create=False)
    if folder is None:
        return False
    with folder:
        return folder.is_file(_name(spec, chunk))


def run_chunk(spec: JobSpec, chunk: ChunkSpec, *, backend: Backend | None = None,
              progress: Callable[[int], None] | None = None, on_start: Callable[[], None] | None = None,
              on_phase: Callable[[str], None] | None = None, encoder_log: bool = False) -> dict:
    """Compute ``chunk`` of ``spec`` into its chunk folder (temporary name, then rename) and return its run
    report (``RunReport.to_dict()``, also written beside it).  A committed chunk is not computed again: its
    stored report is returned.  ``backend``: an opened backend to reuse across chunks (else one is opened);
    ``progress(n)``, ``on_start()``, ``on_phase(name)``: as :meth:`vsr.pipeline.runner.FrameQueueRunner.run` calls
    them (``on_phase`` also hears "loading model" where no backend was given); ``encoder_log``: let the encoders
    that print to the terminal themselves (SVT-AV1, x265) print more than errors (``vsr -v jobs run``)."""
    check_unchanged(spec.input, spec.source)
    with ChunkFolder.open(spec.output, spec.key, create=True) as folder:
        name, notes = _name(spec, chunk), f"{chunk.index:05d}"
        if folder.is_file(name):
            return json.loads(folder.read_text(f"{notes}.json"))
        dst = folder.path(name)
        remove_stale_partials(dst, frames=False)
        request, encoder, runner = spec.settings()
        source = _chunk_source(spec, chunk)
        try:
            sink = VideoSink(dst, source.info, replace(encoder, quiet=not encoder_log), scale=4, trim=False,
                             passthrough=False)
            try:
                report = _compute(spec, chunk, source, sink, backend, progress, on_start, on_phase)

                def keep_notes():  # the chunk's notes exist before the chunk does; its input did not change
                    check_unchanged(spec.input, spec.source)
                    folder.write_text(f"{notes}.packets.json", json.dumps(
                        {"time_base": str(sink.vs.codec_context.time_base), "packets": sink.packet_times,
                         "span_s": list(sink.written_span)}))
                    folder.write_text(f"{notes}.json", json.dumps(report))

                sink.commit(before_rename=keep_notes)
            except BaseException:
                sink.abort()
                raise
        finally:
            source.close()
    return report


def _compute(spec: JobSpec, chunk: ChunkSpec, source, sink: VideoSink, backend: Backend | None,
             progress, on_start, on_phase=None) -> dict:
    request, _, runner = spec.settings()
    reused = backend is not None
    if backend is None:
        if on_phase is not None:
            on_phase("loading model")
        backend = request.open()
    if backend.scale != 4:
        raise InputError(f"the model upscales x{backend.scale}; vsr upscale writes x4 outputs")
    settings = {"input": spec.input, "output": spec.output, "job": spec.key, "chunk": chunk.to_dict(),
                "weights": str(request.weights), "config": request.config, "backend": backend.name,
                "codec": sink.codec, "crf": sink.crf, "q": sink.quantiser, "preset": sink.preset,
                "pix_fmt": sink.pix_fmt,
                "frames": f"{chunk.start}:{chunk.stop}"}
    run = FrameQueueRunner(backend, replace(runner, frames=(chunk.start, chunk.stop)))
    sink.packet_times = []
    before = step_totals(backend) if reused else {}
    return chunk_only(run.run(source, sink, progress=progress, settings_for_report=settings,
                              on_start=on_start, on_phase=on_phase).to_dict(), before)


def _chunk_source(spec: JobSpec, chunk: ChunkSpec):
    """The input, entered at the chunk's verified keyframe where it has one, checking the pictures planning
    recorded (``chunk.checks``)."""
    if Path(spec.input).is_dir():
        return open_source(spec.input, frame_rate=spec.runner.frame_rate)
    if not Path(spec.input).is_file():
        raise InputError(f"no such file: {spec.input}")
    entry = EntryPoint(chunk.decode_from, chunk.entry_pts, chunk.entry_digest) if chunk.decode_from else None
    return VideoSource(Path(spec.input), entry, expect=dict(chunk.checks), deinterlace=spec.runner.deinterlace)


def discard(spec: JobSpec) -> None:
    """Remove the chunk folder of ``spec`` (a job whose input changed: its chunks are of a file that is gone)."""
    folder = ChunkFolder.open(spec.output, spec.key, create=False)
    if folder is not None:
        with folder:
            folder.remove()


def tidy(spec: JobSpec) -> None:
    """Remove the chunk folder of ``spec`` if it holds no chunk (a job that failed before any was committed: a
    retry would compute every chunk anyway, and the folder would stay beside the user's files)."""
    folder = ChunkFolder.open(spec.output, spec.key, create=False)
    if folder is not None:
        with folder:
            if folder.holds_nothing():
                folder.remove()


def join_chunks(spec: JobSpec, chunks: list[ChunkSpec], *, encoder_log: bool = False) -> None:
    """Every chunk committed -> ``spec.output``: the chunks' video packets in order, the source's audio and
    subtitles as ``vsr upscale`` adds them, written in the chunk folder and renamed out; then the chunk folder
    is removed.  The output is never written through a symbolic link.

    Idempotent: when the output exists and the chunk folder is gone, the job was joined and nothing is done.
    A join stopped between its rename and the folder's removal is recognised by the file's identity, noted in
    the folder before the rename (``joined.json``), and only finishes the removal.
    """
    dst = Path(spec.output)
    folder = ChunkFolder.open(spec.output, spec.key, create=False)
    if folder is None:
        if os.path.lexists(dst):
            return
        raise InputError(f"cannot join {dst.name}: chunk 0 of {len(chunks)} is not done")
    with folder:
        if os.path.lexists(dst) and _joined(folder, dst):
            folder.remove()
            return
        missing = [c.index for c in chunks if not folder.is_file(_name(spec, c))]
        if missing:
            raise InputError(f"cannot join {dst.name}: chunk {missing[0]} of {len(chunks)} is not done")
        check_unchanged(spec.input, spec.source)
        _check_destination(spec)
        joined = f"joined{dst.suffix}"
        _write_joined(spec, chunks, folder, joined, encoder_log)
        st = os.stat(joined, dir_fd=folder.fd, follow_symlinks=False)
        folder.write_text(JOINED, json.dumps([st.st_dev, st.st_ino]))
        _check_destination(spec)  # nothing appeared there meanwhile
        folder.move_out(joined)
        folder.remove()


def _check_destination(spec: JobSpec) -> None:
    dst = Path(spec.output)
    if dst.is_symlink():
        raise InputError(f"will not replace {dst}: it is a symbolic link (a job's output is never written "
                         "through a link)")
    check_output(dst, Path(spec.input), spec.overwrite)


def _write_joined(spec: JobSpec, chunks: list[ChunkSpec], folder: ChunkFolder, joined: str,
                  encoder_log: bool = False) -> None:
    # its info only: no frame is decoded
    source = open_source(spec.input, deinterlace="off", frame_rate=spec.runner.frame_rate)
    try:
        encoder = replace(spec.encoder, quiet=not encoder_log)  # its encoder opens, though it only stream-copies
        info = source.info
        if spec.runner.deinterlace == "double" and info.interlaced is not None:  # the chunks' frames and times
            info = as_fields(info)
        elif spec.runner.deinterlace == "film" and carries_pulldown(info.rate):
            info = as_film(info)
        info = starting_at(info, spec.runner.frames[0])  # a trimmed job's timecode: its frame A's
        sink = VideoSink(folder.path(joined), info, encoder, scale=4, trim=spec.trimmed)
        try:
            ordered = sorted(chunks, key=lambda c: c.index)
            times = [json.loads(folder.read_text(f"{c.index:05d}.packets.json")) for c in ordered]
            # the chunks are at the source's timestamps: moved as the sink moves what it writes (a trimmed job's
            # frame A to the start, a transport stream's clock out: vsr.video.origin)
            shift = _trim(sink, times) if spec.trimmed else _shift(sink, Fraction(times[0]["time_base"]))
            for c, t in zip(ordered, times):
                _copy_packets(folder.path(_name(spec, c)), c, t, sink, shift, Path(spec.output).name)
            sink.commit(before_rename=lambda: check_unchanged(spec.input, spec.source))
        except BaseException:
            sink.abort()
            raise
    finally:
        source.close()


def _trim(sink: VideoSink, times: list[dict]) -> int:
    """For ``--frames A:B``: tell ``sink`` the span the chunks cover; the shift of the packets' timestamps
    (in the chunks' time base) that moves frame A to where ``vsr upscale --frames`` puts it."""
    first = min(p[0] for p in times[0]["packets"] if p[0] is not None)
    tb, info_tb = Fraction(times[0]["time_base"]), sink.info.time_base
    first_src = first * tb / info_tb
    if first_src.denominator != 1:
        raise InputError(f"cannot trim the job's output: the chunks' time base {tb} is not the source's {info_tb}")
    sink.trim_span(int(first_src), float(times[-1]["span_s"][1]))
    return _shift(sink, tb)


def _shift(sink: VideoSink, tb: Fraction) -> int:
    """The sink's move of the timestamps (:attr:`~vsr.video.VideoSink.pts_offset`) in the chunks' ``tb``."""
    shift = sink.pts_offset * sink.info.time_base / tb
    if shift.denominator != 1:
        raise InputError(f"cannot join the chunks: the chunks' time base {tb} is not the source's "
                         f"{sink.info.time_base}")
    return int(shift)


def _joined(folder: ChunkFolder, dst: Path) -> bool:
    """True when ``dst`` is the file this job's join renamed into place (a rename keeps its identity)."""
    try:
        st = os.lstat(dst)
        return json.loads(folder.read_text(JOINED)) == [st.st_dev, st.st_ino]
    except (OSError, ValueError):
        return False


def _copy_packets(path: Path, chunk: ChunkSpec, times: dict, sink: VideoSink, shift: int = 0,
                  label: str = "") -> None:
    """Mux the video packets of the chunk file ``path`` into ``sink`` with the timestamps its encoder gave them
    (``times``: ``{"time_base", "packets": [[pts, dts, duration], ...]}`` in mux order), moved back by
    ``shift``.

    The chunk file's own timestamps are not used: containers do not give them all back exactly (MP4 rounds a
    late start to its millisecond edit list, Matroska moves a file to start at 0 and keeps no dts).
    """
    tb = Fraction(times["time_base"])
    recorded = times["packets"]
    n = 0
    with open_input(str(path)) as c:
        st = c.streams.video[0]
        annexb = _annexb_filter(st)
        for pkt in c.demux(st):
            if pkt.pts is None and pkt.dts is None:
                continue  # the demuxer's end marker
            if n < len(recorded):
                pts, dts, duration = recorded[n]
                pkt.time_base = tb
                pkt.pts = None if pts is None else pts - shift
                pkt.dts = None if dts is None else dts - shift
                pkt.duration = duration
            n += 1
            for p in annexb.filter(pkt) if annexb is not None else (pkt,):
                sink.mux(p)
    if n != len(recorded) or n != chunk.stop - chunk.start:
        raise InputError(f"chunk {chunk.index} of {label or path.name} holds {n} packets, not {len(recorded)} "
                         "frames")


def _annexb_filter(st) -> av.BitStreamFilterContext | None:
    """For H.264/HEVC that the chunk's container stores length-prefixed (MP4, MKV): a filter back to the
    Annex B packets the encoder gave, which is what the output's muxer expects from the join's encoder headers
    (it converts them itself).  The filter repeats the parameter sets before each keyframe; pictures and
    timestamps are unchanged."""
    cc = st.codec_context
    if cc.name in ("h264", "hevc") and cc.extradata and cc.extradata[0] == 1:
        return av.BitStreamFilterContext(f"{cc.name}_mp4toannexb", in_stream=st)
    return None
