"""Planning a job: bind it to its input (:mod:`vsr.jobs.identity`) and cut its frames into chunks.

The input is decoded from the top once (:func:`vsr.video.seek.scan_video`: the exact frame count, each frame's
timestamp and picture digest).  A chunk starts decoding at the last keyframe before its halo whose seek was
verified to decode every frame the chunk reads exactly as that decode from the top
(:func:`vsr.video.seek.verify_entry`); where none is (the cockatoo clip), it decodes from the top.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import av

from vsr.errors import InputError
from vsr.jobs.identity import folder_identity, stat_of, video_identity
from vsr.jobs.spec import ChunkSpec, JobSpec
from vsr.model.weights import resolve_config
from vsr.pipeline.runner import decode_range
from vsr.video import VideoSink, open_source
from vsr.video.codecs import ANIMATION_CONTAINERS
from vsr.video.encoder_choice import EncoderChoice, OutputContainer, choose_encoder
from vsr.video.ends import file_end
from vsr.video.output import output_path
from vsr.video.source import VideoInfo
from vsr.video.seek import VideoScan, scan_video, verify_entry
from vsr.video.telecine import counter as film_counter

log = logging.getLogger(__name__)

# Frames per chunk: a chunk re-decodes a halo of 2 * radius frames on each side and its encoder restarts, so
# chunks of a few hundred frames keep that overhead small (docs/benchmarks.md, "Batch jobs: chunked vs single
# pass"); a clip shorter than this is one chunk.
DEFAULT_CHUNK_FRAMES = 300


def window_radius(spec: JobSpec) -> int:
    """EDVR's temporal radius (``num_frame // 2``) for the job's model."""
    cfg, _ = resolve_config(spec.backend.weights, spec.backend.config)
    return cfg.num_frame // 2


def plan_job(spec: JobSpec, chunk_frames: int = DEFAULT_CHUNK_FRAMES,
             on_encoder: Callable[[EncoderChoice], None] | None = None) -> tuple[JobSpec, list[ChunkSpec]]:
    """``spec`` bound to its input as it is now (``spec.source``), and its chunks: ``chunk_frames`` output
    frames each (the last one may be shorter), over ``spec.runner.frames`` (``--frames A:B``) or the whole
    input.  ``on_encoder`` is given the job's encoder once it is checked (what ``vsr jobs add`` says of it)."""
    if chunk_frames < 1:
        raise InputError(f"--chunk-frames must be at least 1, not {chunk_frames}")
    path = Path(spec.input)
    # one-line errors for a missing file, not a video, no video stream
    source = open_source(path, deinterlace=spec.runner.deinterlace, frame_rate=spec.runner.frame_rate)
    source.close()
    if source.info.kind == "webp":
        raise InputError(f"{path} is an animated WebP, which libwebp reads from its first frame on, not FFmpeg: a "
                         "job's chunks cannot seek into it (upscale it with vsr upscale)")
    choice = check_encoder(spec, source.info)
    if on_encoder is not None:
        on_encoder(choice)
    if path.is_dir():
        frames = source.info.frames
        bound = replace(spec, source=folder_identity(path, frames))
        return bound, _cut(*_frames(spec, frames), chunk_frames)
    before = stat_of(path)
    try:
        scan, film_frames = scan_video(path, film_counter(source.info) if source.info.film else None)
    except (av.FFmpegError, OSError) as e:
        raise InputError(f"cannot decode {path}: {e}") from None
    if scan.frames == 0:
        raise InputError(f"zero frames: {path} decodes to no frame")
    bound = replace(spec, source=video_identity(path, scan, before))
    info = source.info
    early = file_end(path, info.container, info.header_frames, info.duration_s, info.rate, scan.frames,
                     info.stream_index)
    if early is not None:  # a job that ends short: said now, and its list marks it once its last chunk ran
        warnings.warn(early.message(path), stacklevel=2)
    radius, runner = window_radius(spec), spec.runner
    # (the deinterlacer reads a frame either side of each: the range reaches 2 * radius beyond the output frames,
    # a window only radius, so every frame a window holds is deinterlaced with the neighbours of a whole run)
    entries = EntryFinder(path, scan)
    chunks = []
    per = 2 if info.field_rate else 1  # output frames a frame of the file makes (--deinterlace double: its fields)
    if info.film:  # inverse telecine: which frames come out depends on the whole cadence, so one chunk
        start, stop = _frames(spec, film_frames)
        return bound, [replace(ChunkSpec(0, start, stop), **entries.fields(0, scan.frames),
                               checks=_checks(scan, 0, scan.frames))]
    for c in _cut(*_frames(spec, scan.frames * per), chunk_frames):
        # the frames of the file the runner decodes, halo included (fields: and the frame either side, which the
        # deinterlacer reads for the first and last field a window holds)
        first, stop = decode_range(replace(runner, frames=(c.start, c.stop)), radius)
        first, stop = max(first // per - (per - 1), 0), min(-(-stop // per) + (per - 1), scan.frames)
        chunks.append(replace(c, **entries.fields(first, stop), checks=_checks(scan, first, stop)))
    return bound, chunks


def check_encoder(spec: JobSpec, info: VideoInfo) -> EncoderChoice:
    """The job's encoder as :func:`~vsr.video.encoder_choice.choose_encoder` decides it for the job's output (the
    decision ``vsr upscale``'s sink makes, so a codec, container, pixel format, size, ``--crf`` or ``--preset``
    that cannot work is refused here), then opened by a sink writing into memory, exactly as a chunk's will be,
    so every ``-x`` option the encoder itself refuses is found now too, hours before the job's first chunk."""
    quiet = replace(spec.encoder, quiet=True)  # what an encoder prints of itself is for the run, not the check
    container = OutputContainer.named(output_path(Path(spec.output)).name)  # (a link's target's suffix, as a sink's)
    if container.format in ANIMATION_CONTAINERS:
        raise InputError(f"{spec.output}: a job joins its chunks' packets as they are, which an animation's cannot be "
                         "(a GIF frame is drawn over the one before, an animated WebP is one packet): upscale it with "
                         "vsr upscale, or give the job another --ext")
    choice = choose_encoder(container, quiet, info, scale=4)
    VideoSink(Path(spec.output), info, quiet, scale=4, passthrough=False, probe=True).abort()
    log.info("%s: %s", spec.output, choice.describe())
    return choice


def plan_chunks(spec: JobSpec, chunk_frames: int = DEFAULT_CHUNK_FRAMES) -> list[ChunkSpec]:
    """The chunks of ``spec`` (:func:`plan_job` without the binding)."""
    return plan_job(spec, chunk_frames)[1]


def _frames(spec: JobSpec, total: int) -> tuple[int, int]:
    """The output frames ``start:stop`` of ``spec`` in an input of ``total`` frames (``--frames`` as upscale)."""
    start, stop = spec.runner.frames
    asked = f"--frames {start}:{'' if stop is None else stop}"
    if start >= total:
        raise InputError(f"{asked}: {spec.input} has only {total} frames")
    if stop is not None and stop > total:
        warnings.warn(f"{asked}: {spec.input} has only {total} frames; the job writes {start}:{total}",
                      stacklevel=3)
    return start, total if stop is None else min(stop, total)


def _cut(start: int, stop: int, chunk_frames: int) -> list[ChunkSpec]:
    return [ChunkSpec(i, a, min(a + chunk_frames, stop)) for i, a in enumerate(range(start, stop, chunk_frames))]


def _checks(scan: VideoScan, first: int, stop: int) -> tuple[tuple[int, str], ...]:
    """The frames a chunk reading ``first .. stop - 1`` checks: those two and the keyframes between."""
    keep = {first, stop - 1, *(k for k in scan.keyframes if first <= k < stop)}
    return tuple((i, scan.digests[i]) for i in sorted(keep))


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
