"""Cache entries no run used: the exports (``onnx/``), plans (``plans/``) and TensorRT engines (``cuda/``) vsr
keeps under a key of what makes them, each key change (a torch or onnx upgrade, a change of vsr's code, new
weights) leaving the earlier entry behind: tens of MB for good.

Writing a new entry removes the entries of the same model that no run used for :data:`UNUSED_DAYS`
(:func:`remove_unused`); a run marks the entry it uses by its modification time (:func:`mark_used`, before it
reads it, at most once a day), so one a concurrent run may still read is never removed.  Only regular files and
folders of this user's in a folder of theirs alone (no other user can write it; group-writable only where the
group is the user's private one, as :func:`vsr.files.untrusted` trusts it), never through a link.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import time
from pathlib import Path
from typing import Callable

from vsr.files import others_can_write

UNUSED_DAYS = 7  # an entry no run used for this long is removed once another of its model is written
AWAY = re.compile(r"\.(.+)\.unused-[0-9]+")  # an entry being removed: moved out of its name first
MARK_EVERY = 86400  # a run marks an entry at most once a day: a use does not rewrite the folder each time


def mark_used(path: Path) -> None:
    """Mark the cache entry ``path`` (a file or a folder) used now, its modification time, where it was last
    marked over a day ago, so that :func:`remove_unused` leaves it; a link is never followed."""
    try:
        if time.time() - os.lstat(path).st_mtime > MARK_EVERY:
            os.utime(path, follow_symlinks=False)
    except OSError:
        pass


def remove_unused(folder: Path, names: Callable[[str], bool], days: float = UNUSED_DAYS, keep: str | None = None,
                  belongs: Callable[[int], bool] | None = None, folders: bool = False) -> list[str]:
    """Remove the entries of the cache ``folder`` that ``names`` matches (but ``keep``) and that were not written
    or marked used (:func:`mark_used`) for ``days``; returns the names removed.  ``belongs``: where the name does
    not say whose an entry is, whether the entry (its descriptor, opened without following a link) is of the
    model.  Only this user's regular files (``folders``: folders, a plan, removed whole) in a folder of theirs no
    other user can write.  What cannot be removed is left (another run may have removed it first)."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return []
    removed = []
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid() or others_can_write(st):  # (a user private group's g+w: theirs alone)
            return []
        for name in os.listdir(fd):
            left = AWAY.fullmatch(name)  # (what a stopped removal left moved out of its name)
            if name != keep and names(left[1] if left else name) and _unused(fd, name, days, belongs, folders) \
                    and _remove(fd, name, days):
                removed.append(name)
    finally:
        os.close(fd)
    return removed


def _old(st: os.stat_result, days: float) -> bool:
    return time.time() - st.st_mtime > days * 86400


def _unused(fd: int, name: str, days: float, belongs: Callable[[int], bool] | None, folders: bool) -> bool:
    """Whether ``name`` in the folder ``fd`` is a file (``folders``: a folder) of this user's unused for ``days``
    (and ``belongs``)."""
    try:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        kind = stat.S_ISDIR(st.st_mode) if folders else stat.S_ISREG(st.st_mode)
        if not kind or st.st_uid != os.geteuid() or not _old(st, days):
            return False
        if belongs is None:
            return True
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_DIRECTORY if folders else 0)
        efd = os.open(name, flags, dir_fd=fd)
    except OSError:
        return False
    try:
        return bool(belongs(efd))
    except (OSError, ValueError):
        return False
    finally:
        os.close(efd)


def _remove(fd: int, name: str, days: float) -> bool:
    """Remove ``name`` from the folder ``fd``.  It is first moved out of its name in one step, so that a run finds
    a plan whole or not at all (and builds it again), never half removed; one a run marked used just before the
    move is put back.  An entry a stopped removal left moved out is removed as it is."""
    left = AWAY.fullmatch(name) is not None
    away = name if left else f".{name}.unused-{os.getpid()}"
    try:
        if not left:
            os.rename(name, away, src_dir_fd=fd, dst_dir_fd=fd)
        st = os.stat(away, dir_fd=fd, follow_symlinks=False)
    except OSError:
        return False
    if not left and not _old(st, days) and _put_back(fd, away, name, stat.S_ISDIR(st.st_mode)):
        return False
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(away, dir_fd=fd, ignore_errors=True)  # (links inside unlinked, never followed)
    else:
        try:
            os.unlink(away, dir_fd=fd)
        except OSError:
            pass
    return True


def _put_back(fd: int, away: str, name: str, folder: bool) -> bool:
    """Move ``away`` back to ``name``, unless a new entry took the name meanwhile (the same key: ``away`` is then
    one too many)."""
    try:
        if folder:
            os.rename(away, name, src_dir_fd=fd, dst_dir_fd=fd)  # (refused onto a new plan: not empty)
        else:
            os.link(away, name, src_dir_fd=fd, dst_dir_fd=fd, follow_symlinks=False)  # (never onto a new file)
            os.unlink(away, dir_fd=fd)
    except OSError:
        return False
    return True
