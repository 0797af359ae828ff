"""What ``vsr jobs add`` turns its inputs into: one :class:`~vsr.jobs.spec.JobSpec` per video, each checked.

A folder stands for the videos directly in it (by suffix, hidden files left out, in name order); a folder of frames
without a video (PNG, JPEG, ...: :mod:`vsr.video.png_frames`) for itself, one job.  The output of
``IN`` is ``out_dir/<IN's stem>.<ext>``, built only from checked parts: ``ext`` is a bare suffix (letters and
digits), and the name stays in ``out_dir``.  Without ``ext``, an input whose container keeps every frame's
timestamp (:data:`KEEPS_TIMESTAMPS`) keeps its own; any other (AVI, Y4M, MPEG-PS, FLV...) becomes MP4 where
all its streams fit MP4 as they are, else Matroska.  Every input and output is checked before any job is added,
so a missing file among many is one error line and nothing is queued.
"""

from __future__ import annotations

import re
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterator

import av

from vsr.errors import InputError
from vsr.files import file_in_the_way
from vsr.jobs.spec import JobSpec
from vsr.model.choice import AUTO, WeightsChoice, choose_for
from vsr.video import check_output, open_source
from vsr.video.codecs import IMAGE_CODECS
from vsr.video.output import is_picture_out, is_stream
from vsr.video.png_frames import KIND_NAMES, frame_paths
from vsr.video.reading import open_input

# Containers vsr reads and writes as video files (a folder's other files are not jobs).
VIDEO_SUFFIXES = frozenset(".mp4 .m4v .mkv .mov .webm .avi .ts .m2ts .mts .mpg .mpeg .mxf .flv .wmv .ogv .y4m"
                           .split())
# Containers that store each frame's presentation time as vsr writes it (B-frames, variable frame rate): a job
# of such an input keeps its container.  AVI cannot (its frames have an index, not a time: H.264 with B-frames
# comes back two frames late), nor can Y4M, MPEG-PS or FLV's millisecond clock, among others.
KEEPS_TIMESTAMPS = frozenset(".mp4 .m4v .mov .mkv .webm .ts .m2ts .mts".split())
# What an MP4 holds that every player reads: the video encoders vsr uses, the audio and subtitle codecs copied.
MP4_VIDEO = frozenset("libx264 libx265 libsvtav1 libaom-av1 libvpx-vp9 mpeg4".split())
MP4_AUDIO = frozenset("aac mp3 ac3 eac3 opus flac alac".split())
MP4_SUBTITLES = frozenset(["mov_text"])
EXT = re.compile(r"[A-Za-z0-9]{1,16}")


def check_ext(ext: str, where: str = "--ext") -> str:
    """``ext`` (``mkv`` or ``.mkv``) -> ``.mkv``; anything but a bare suffix (a path, ``..``, a space, a
    control character) is an :class:`InputError`."""
    bare = ext[1:] if ext.startswith(".") else ext
    if not EXT.fullmatch(bare):
        raise InputError(f"{where} must be a container suffix such as mkv or mp4 (letters and digits only), "
                         f"not {ext!r}")
    return "." + bare


def videos_of(path: Path) -> list[Path]:
    """``path`` itself (a file), or the videos of a folder; a folder of frames and no video is itself one input (a
    job's input may be one: :class:`~vsr.video.FrameFolderSource`); a missing path or a folder without either is an
    :class:`InputError`."""
    if is_stream(path):
        raise InputError("a job's input must be a file: its chunks seek into it (standard input, -, is read once; "
                         "use vsr upscale - OUT)")
    if path.is_file():
        return [path]
    if path.is_dir():
        found = sorted(p for p in path.iterdir()
                       if p.is_file() and not p.name.startswith(".") and p.suffix.lower() in VIDEO_SUFFIXES)
        if not found and frame_paths(path):  # (two kinds of frames: said by its source, when the job is planned)
            return [path]
        if not found:
            raise InputError(f"no videos in folder {path} (looked for {', '.join(sorted(VIDEO_SUFFIXES))}), nor "
                             f"frames ({KIND_NAMES})")
        return found
    raise InputError(f"input does not exist: {path}" if not path.exists() else f"input is not a file: {path}")


def output_for(src: Path, out_dir: Path, ext: str | None, codec: str | None = None) -> Path:
    """``out_dir/<src's stem>.<ext>``: ``ext`` checked (:func:`check_ext`), else :func:`default_suffix`."""
    suffix = check_ext(ext) if ext is not None else default_suffix(src, codec)
    name = f"{src.stem}{suffix}"
    if src.stem in ("", ".", "..") or "/" in name:
        raise InputError(f"cannot name an output for {src} in {out_dir}")
    return out_dir / name


def default_suffix(src: Path, codec: str | None = None) -> str:
    """The output container of ``src`` when no ``ext`` is given: its own where it keeps timestamps, else
    ``.mp4`` where MP4 holds the video encoder (``codec``, None: libx264) and every audio and subtitle stream of
    ``src`` as it is, else ``.mkv``; ``.mov`` for a picture codec (``--codec png``: players read it there); a folder of
    frames: ``.mp4`` where it holds the codec."""
    if codec in IMAGE_CODECS:
        return ".mov"
    if src.is_dir():  # a folder of frames: no audio, and MP4 keeps the time base of its --frame-rate exact
        return ".mp4" if codec is None or codec in MP4_VIDEO else ".mkv"
    if src.suffix.lower() in KEEPS_TIMESTAMPS:
        return src.suffix
    return ".mp4" if _fits_mp4(src, codec) else ".mkv"


def _fits_mp4(src: Path, codec: str | None) -> bool:
    if codec is not None and codec not in MP4_VIDEO:
        return False
    try:
        with open_input(str(src)) as c:
            for st in c.streams:
                name = st.codec_context.name if st.codec_context else None
                if st.type == "audio" and name not in MP4_AUDIO or st.type == "subtitle" and name not in MP4_SUBTITLES:
                    return False
    except (av.FFmpegError, OSError, ValueError):
        return False  # not readable: planning the job says why
    return True


@contextmanager
def output_folders() -> Iterator[list[Path]]:
    """A list for :func:`job_specs` to record the folders it creates; if the block fails, those still empty
    are removed (deepest first), so a refused add leaves no folder behind and never removes one it found."""
    created: list[Path] = []
    try:
        yield created
    except BaseException:
        for p in sorted(created, key=lambda p: len(p.parts), reverse=True):
            if p.is_dir() and not any(p.iterdir()):
                p.rmdir()
        raise


def job_specs(inputs: list[Path], out_dir: Path, ext: str | None, backend, encoder, runner,
              overwrite: bool = False, taken: dict[Path, Path] | None = None,
              created: list[Path] | None = None,
              on_weights: Callable[[Path, WeightsChoice], None] | None = None) -> list[JobSpec]:
    """One checked :class:`JobSpec` per video of ``inputs`` (absolute paths).

    ``taken``: output -> input of the specs made so far (across calls), so two inputs never share an output.
    ``created``: the list of an enclosing :func:`output_folders`, for an add that can still fail after this
    call (probing the inputs, the store); None: the folders made here are removed if this call fails.
    ``backend.weights == "auto"``: each input's weights are chosen now (:mod:`vsr.model.choice`), so its job key
    and every chunk use one file; ``on_weights(input, choice)`` hears which and why.
    """
    taken = {} if taken is None else taken
    with output_folders() if created is None else nullcontext(created) as created:
        new = [p for p in (out_dir, *out_dir.parents) if not p.exists()]
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            created += [p for p in new if p.is_dir()]
            raise InputError(f"cannot create the output folder {out_dir}: {_in_the_way(out_dir, e)}") from None
        created += new
        return _specs(inputs, out_dir, ext, backend, encoder, runner, overwrite, taken, on_weights)


def _in_the_way(out_dir: Path, e: OSError) -> str:
    """Why ``out_dir`` could not be made, in the user's words: "File exists" named neither the file nor a link."""
    blocker = file_in_the_way(out_dir)
    if blocker is None:
        return e.strerror or str(e)
    if blocker.is_symlink() and not blocker.exists():
        return f"{blocker} is a symbolic link to nothing"
    return f"{blocker} is a file, not a folder"


def _weights_for(src: Path, backend, on_weights, runner):
    """``backend`` with the weights ``auto`` picks for ``src`` (``backend`` itself for any other weights), from
    its frames as the job's run decodes them (``runner``'s deinterlace, frame_rate)."""
    if backend.weights != AUTO:
        return backend
    source = open_source(src, deinterlace=runner.deinterlace, frame_rate=runner.frame_rate)
    try:
        choice = choose_for(source)
    finally:
        source.close()
    if on_weights is not None:
        on_weights(src, choice)
    return replace(backend, weights=choice.weights)


def _specs(inputs, out_dir, ext, backend, encoder, runner, overwrite, taken, on_weights) -> list[JobSpec]:
    specs = []
    for path in inputs:
        for src in videos_of(path):
            src = src.resolve()
            dst = output_for(src, out_dir, ext, encoder.codec).resolve()
            if dst.parent != out_dir.resolve():
                raise InputError(f"the output of {src} would be written outside {out_dir}: {dst}")
            if dst in taken:
                raise InputError(f"{taken[dst]} and {src} would both be written to {dst}")
            if is_picture_out(dst, src):  # (vsr upscale's picture out of a picture: a job's chunks are video)
                raise InputError(f"{dst}: a job writes a video; upscale the picture {src} with vsr upscale")
            check_output(dst, src, overwrite)
            taken[dst] = src
            weights = _weights_for(src, backend, on_weights, runner)
            specs.append(JobSpec.from_settings(str(src), str(dst), weights, encoder, runner, overwrite))
    return specs
