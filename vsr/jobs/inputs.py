"""What ``vsr jobs add`` turns its inputs into: one :class:`~vsr.jobs.spec.JobSpec` per video, each checked.

A folder stands for the videos directly in it (by suffix, hidden files left out, in name order).  The output of
``IN`` is ``out_dir/<IN's stem>.<ext>`` (``ext``: IN's own suffix unless given).  Every input and output is
checked before any job is added, so a missing file among many is one error line and nothing is queued.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Iterator

from vsr.errors import InputError
from vsr.jobs.spec import JobSpec
from vsr.video import check_output
from vsr.video.output import is_stream

# Containers vsr reads and writes as video files (a folder's other files are not jobs).
VIDEO_SUFFIXES = frozenset(".mp4 .m4v .mkv .mov .webm .avi .ts .m2ts .mts .mpg .mpeg .mxf .flv .wmv .ogv .y4m"
                           .split())


def videos_of(path: Path) -> list[Path]:
    """``path`` itself (a file), or the videos of a folder; a missing path or a folder without videos is an
    :class:`InputError`."""
    if is_stream(path):
        raise InputError("a job's input must be a file: its chunks seek into it (standard input, -, is read once; "
                         "use vsr upscale - OUT)")
    if path.is_file():
        return [path]
    if path.is_dir():
        found = sorted(p for p in path.iterdir()
                       if p.is_file() and not p.name.startswith(".") and p.suffix.lower() in VIDEO_SUFFIXES)
        if not found:
            raise InputError(f"no videos in folder {path} (looked for {', '.join(sorted(VIDEO_SUFFIXES))})")
        return found
    raise InputError(f"input does not exist: {path}" if not path.exists() else f"input is not a file: {path}")


def output_for(src: Path, out_dir: Path, ext: str | None) -> Path:
    suffix = f".{ext.lstrip('.')}" if ext else src.suffix
    if suffix in ("", "."):
        raise InputError(f"{src} has no suffix to name its output's container: pass --ext")
    return out_dir / f"{src.stem}{suffix}"


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
              created: list[Path] | None = None) -> list[JobSpec]:
    """One checked :class:`JobSpec` per video of ``inputs`` (absolute paths).

    ``taken``: output -> input of the specs made so far (across calls), so two inputs never share an output.
    ``created``: the list of an enclosing :func:`output_folders`, for an add that can still fail after this
    call (probing the inputs, the store); None: the folders made here are removed if this call fails.
    """
    taken = {} if taken is None else taken
    with output_folders() if created is None else nullcontext(created) as created:
        new = [p for p in (out_dir, *out_dir.parents) if not p.exists()]
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            created += [p for p in new if p.is_dir()]
            raise InputError(f"cannot create the output folder {out_dir}: {e.strerror}") from None
        created += new
        return _specs(inputs, out_dir, ext, backend, encoder, runner, overwrite, taken)


def _specs(inputs, out_dir, ext, backend, encoder, runner, overwrite, taken) -> list[JobSpec]:
    specs = []
    for path in inputs:
        for src in videos_of(path):
            src = src.resolve()
            dst = output_for(src, out_dir, ext).resolve()
            if dst in taken:
                raise InputError(f"{taken[dst]} and {src} would both be written to {dst}")
            check_output(dst, src, overwrite)
            taken[dst] = src
            specs.append(JobSpec.from_settings(str(src), str(dst), backend, encoder, runner, overwrite))
    return specs
