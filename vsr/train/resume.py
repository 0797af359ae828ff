"""What a resumed run checks and tidies in its run folder.

* Its data: ``--data`` and ``--exclude`` are compared by the files they name, in order (each file's real path),
  not by their spelling: ``runs/x``, ``./runs/x/``, its absolute path or a link to it train on the same batches.
  And by their content, cheaply (no file is read): each file's size and modification time, as the checkpoint gives
  them (``vsr.data_stamps``).  Another number of files, or a file of another size (an image replaced, a video
  re-encoded), refuses the resume in one line, as other options do; a file modified at the same size is said in a
  warning and trained on as it is now: a copy (a slice's data sent to a GPU machine) or a touch changes the time
  alone, and is the same data.  A checkpoint from before the stamps resumes, saying that it cannot be checked.
* Its log: ``log.jsonl`` is cut back to the checkpoint's iteration, as the resumed run logs the iterations after it
  again (a kill, or Ctrl-C, between two checkpoints); the log reads as one run, its iterations in order.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from pathlib import Path

from vsr.errors import InputError
from vsr.files import write_new
from vsr.train.data import DataSources, list_files
from vsr.train.options import TrainOptions

# The options compared by what they resolve to (the checkpoint keeps that as ``vsr.data_files``).
DATA_OPTIONS = ("data", "exclude")


def files_digest(paths) -> str:
    """The identity of a run's training files, in order: the sha256 of their real paths."""
    h = hashlib.sha256()
    for p in paths:
        h.update(os.fsencode(os.path.realpath(p)) + b"\0")
    return h.hexdigest()


def source_files(sources: DataSources) -> list[Path]:
    return [*sources.images, *(v.path for v in sources.videos)]


def sources_digest(sources: DataSources) -> str:
    return files_digest(source_files(sources))


def sources_stamps(sources: DataSources) -> list[list[int]]:
    """Each training file's size and modification time (ns), in order: what a resume compares their content by."""
    return [[st.st_size, st.st_mtime_ns] for st in map(os.stat, source_files(sources))]


def check_data_stamps(path: Path, saved: dict, sources: DataSources, stamps: list[list[int]]) -> None:
    """Refuse the resume from ``path`` (its ``vsr`` entry ``saved``) where the files of ``sources`` (their
    ``stamps`` now) are certainly not those it trained on: another number of them, or one of another size.  Say,
    in a warning, where one was modified at the same size, or where the checkpoint cannot tell."""
    then = saved.get("data_stamps")
    if then is None:
        warnings.warn(f"{path} was written before checkpoints gave their files' sizes and times: edits to the data "
                      "since it was written cannot be checked", stacklevel=3)
        return
    files = source_files(sources)
    other = None
    if len(then) != len(stamps):
        other = f"--data names {len(stamps)} images and videos, {len(then)} when it was written"
    else:
        other = next((f"{f} is {now[0]} bytes, {old[0]} when it was written"
                      for f, now, old in zip(files, stamps, then) if now[0] != old[0]), None)
    if other:
        raise InputError(f"{path} was written with other data ({other}); use another --out folder or the data it "
                         "was trained on")
    touched = [f for f, now, old in zip(files, stamps, then) if now[1] != old[1]]
    if touched:
        more = f" (and {len(touched) - 1} more)" if len(touched) > 1 else ""
        warnings.warn(f"{path}: {touched[0]}{more} was modified since it was written (same size); the resumed run "
                      "trains on it as it is now", stacklevel=3)


def data_conflicts(diff: list[str], saved: dict, sources: DataSources) -> list[str]:
    """``diff`` (the options that differ from those of a checkpoint's ``vsr`` entry, ``saved``) less ``data`` and
    ``exclude`` where they only differ in spelling: ``sources``, this run's files, are those the checkpoint's run
    trained on, in the same order."""
    if not any(k in DATA_OPTIONS for k in diff):
        return diff
    if _saved_digest(saved) == sources_digest(sources):
        return [k for k in diff if k not in DATA_OPTIONS]
    return diff


def _saved_digest(saved: dict) -> str | None:
    if "data_files" in saved:
        return saved["data_files"]
    # a checkpoint from before data_files: its options' files as they resolve now (from here, as a relative
    # --data did then); none where they are gone
    o = saved.get("options", {})
    try:
        images, videos = list_files(o.get("data", []), tuple(o.get("exclude", TrainOptions.exclude)))
    except InputError:
        return None
    return files_digest([*images, *videos])


def cut_log(path: Path, iteration: int) -> int:
    """Cut a run's ``log.jsonl`` back to ``iteration`` (the checkpoint it resumes from): the lines of later
    iterations go, and any a kill left half-written.  The new log is written whole under a temporary name and
    renamed over the old one: a failure leaves the old log.  Returns the number of lines cut."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return 0
    with open(fd, "rb") as f:
        lines = f.read().splitlines(keepends=True)
        mode = os.fstat(f.fileno()).st_mode & 0o777  # (the new log keeps the old one's permissions)
    kept = [line if line.endswith(b"\n") else line + b"\n" for line in lines if _not_after(line, iteration)]
    if kept == lines:
        return 0
    tmp = path.with_name(f".{path.name}.part")
    try:
        write_new(tmp, b"".join(kept), mode)  # (never through a link planted at the name)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return len(lines) - len(kept)


def _not_after(line: bytes, iteration: int) -> bool:
    try:
        rec = json.loads(line)
    except ValueError:  # half-written by a kill
        return False
    # a line with no iteration is the run's start line
    return isinstance(rec, dict) and rec.get("iteration", 0) <= iteration
