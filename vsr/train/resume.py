"""What a resumed run checks in its run folder.

* Its data: ``--data`` and ``--exclude`` are compared by the files they name, in order (each file's real path),
  not by their spelling: ``runs/x``, ``./runs/x/``, its absolute path or a link to it train on the same batches.
"""

from __future__ import annotations

import hashlib
import os

from vsr.errors import InputError
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


def sources_digest(sources: DataSources) -> str:
    return files_digest([*sources.images, *(v.path for v in sources.videos)])


def data_conflicts(diff: list[str], saved: dict, sources: DataSources) -> list[str]:
    """``diff`` (the options that differ from those of a checkpoint's ``vsr`` entry, ``saved``) less ``data`` and
    ``exclude`` where they only differ in spelling: ``sources`` are the files the checkpoint's run trained on."""
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

