"""What a vsr run killed outright (SIGKILL, power loss, the OOM killer) left beside a file it writes: the hidden
temporary ``.NAME.vsr-partial-PID`` it writes under and renames into place (a stop it can see, Ctrl-C, removes it).

:func:`remove_partials`, called by every writer before it writes ``NAME``, removes those of that very name whose
process is gone from this host and which were not written for :data:`ABANDONED` seconds: the folder may be shared
with other hosts (NFS), whose runs' process ids mean nothing here, so a live one is told by its writes.  Only this
user's entries of that exact name, a regular file (or a folder the writer recognises as its own), never through a
link.  ``aside=True``: the old output ``.NAME.vsr-old-PID`` a replacement renamed aside to remove (a kill between
the two leaves it hidden for good), aged by its change time, which the rename set (its modification time is the
old output's).  :func:`remove_old_partials`: the names older versions gave their temporaries (``.NAME.PID.part``
and the like), by the same rules; and names older still that hold no pid, by age alone (:func:`remove_unnumbered`).
:func:`remove_probes`: the write probes ``.vsr-write-test-PID`` of :func:`vsr.files.not_writable`.

:func:`temp_folder` makes a folder in the system temp folder (per host: a gone process is enough there, and an
hour of no change guards against pid namespaces sharing it) and removes the ones killed runs left.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import stat
import tempfile
import time
from pathlib import Path
from typing import Callable

from vsr.files import PROBE

log = logging.getLogger(__name__)

PARTIAL = ".vsr-partial-"
ASIDE = ".vsr-old-"  # an old output renamed aside, removed once the new one is in its place
PID = r"([1-9][0-9]{0,9})"  # the writer's process id (in the name so that two runs never share a temporary)
ABANDONED = 86400  # seconds: a temporary not written for this long is no run's in progress, on any host
TEMP_ABANDONED = 3600  # seconds: a temp folder of a gone process not changed for this long (pid namespaces share /tmp)
MKDTEMP = "[a-z0-9_]{8}"  # the random part tempfile.mkdtemp adds


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host (another user's too: not ours to judge)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True
    return True


def remove_partials(target: str | os.PathLike, *, suffix: str = "", tail: str = "",
                    folder: Callable[[int], bool] | None = None, dir_fd: int | None = None,
                    age: float | None = None, aside: bool = False) -> list[str]:
    """Remove the temporaries of ``target`` killed runs left: ``.NAME.vsr-partial-PID`` beside it, NAME its name
    less ``suffix`` (a video's: the temporary ends with it), ``tail`` a pattern after PID.  ``folder``: the
    temporary is a folder, removed whole where ``folder`` (its descriptor) says it is the writer's own; else a
    regular file.  ``dir_fd``: the folder ``target`` (a name) is in.  ``aside``: the old outputs renamed aside
    (``.NAME.vsr-old-PID``) instead, aged by their change time.  Returns the names removed; what cannot be read or
    removed is left."""
    parent, name = os.path.split(os.fspath(target))
    if suffix and name.endswith(suffix):
        name = name[:-len(suffix)]
    mark = ASIDE if aside else PARTIAL
    pattern = re.compile(re.escape(f".{name}{mark}") + PID + tail + re.escape(suffix))
    return _sweep(parent, pattern, ABANDONED if age is None else age, folder, aside, dir_fd)


def remove_partials_of(folder: str | os.PathLike, names: str) -> list[str]:
    """:func:`remove_partials` for every file of ``folder`` whose name the regular expression ``names`` (no
    groups) matches: where each is written once (a job's record), no later write of the same name would."""
    pattern = re.compile(r"\.(?:" + names + ")" + re.escape(PARTIAL) + PID)
    return _sweep(os.fspath(folder), pattern, ABANDONED, None, False, None)


def remove_old_partials(target: str | os.PathLike, ending: str, *, tail: str = "",
                        unnumbered: str | None = None) -> list[str]:
    """:func:`remove_partials` for the name a writer gave its temporaries before ``.NAME.vsr-partial-PID``:
    ``.NAME.PID`` then ``tail`` (a pattern) and ``ending`` (``.part``, ``.partial``, ``.tmp``), under the same rules
    (what an older vsr killed outright left).  ``unnumbered``: the names older still, which held no PID, by
    :func:`remove_unnumbered`'s rule: ``.NAME.`` then this pattern (mkstemp's :data:`MKDTEMP`) then ``ending``, or
    ``.NAME`` and ``ending`` alone for ``""``."""
    parent, name = os.path.split(os.fspath(target))
    if unnumbered is not None:
        between = r"\." + unnumbered if unnumbered else ""
        remove_unnumbered(parent, r"\." + re.escape(name) + between + re.escape(ending))
    return remove_old_partials_of(parent, re.escape(name), ending, tail=tail)


def remove_old_partials_of(folder: str | os.PathLike, names: str, ending: str, *, tail: str = "") -> list[str]:
    """:func:`remove_old_partials` for every NAME the regular expression ``names`` (no groups) matches."""
    pattern = re.compile(r"\.(?:" + names + r")\." + PID + tail + re.escape(ending))
    return _sweep(os.fspath(folder), pattern, ABANDONED, None, False, None)


def remove_unnumbered(folder: str | os.PathLike, names: str) -> list[str]:
    """The files of ``folder`` (vsr's own, this user's alone) whose names ``names`` (no groups) matches:
    temporaries named before their writer put its process id in them (mkstemp's), so no process to ask; removed
    under :func:`remove_partials`' other rules, not written for :data:`ABANDONED` seconds the one sign of a
    writer gone.  Certainly stale, as on a shared folder (another host's pids mean nothing here) any
    temporary is: each writer writes its file in one go, in seconds to minutes, and none holds a lock there is to
    test (nothing of vsr's, then or now, takes one)."""
    return _sweep(os.fspath(folder), re.compile(names), ABANDONED, None, False, None)


def remove_probes(folder: str | os.PathLike) -> list[str]:
    """The write probes (``.vsr-write-test-PID``, :func:`vsr.files.not_writable`) of ``folder`` that a run killed
    in the instant between their creation and removal left, by :func:`remove_partials`' rules."""
    return _sweep(os.fspath(folder), re.compile(re.escape(PROBE) + PID), ABANDONED, None, False, None)


def temp_folder(prefix: str) -> Path:
    """A new folder ``<system temp>/<prefix><pid>-XXXXXXXX`` (mkdtemp's: mode 0700), after removing the ones of
    ``prefix`` whose process is gone from this host and which did not change for :data:`TEMP_ABANDONED` seconds:
    what runs killed outright left there (ONNX models, hundreds of MB)."""
    root = tempfile.gettempdir()
    pattern = re.compile(re.escape(prefix) + PID + "-" + MKDTEMP)
    _sweep(root, pattern, TEMP_ABANDONED, lambda fd: True, True, None)
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=root))


def _sweep(parent: str, pattern: re.Pattern, age: float, folder: Callable[[int], bool] | None, changed: bool,
           dir_fd: int | None) -> list[str]:
    """Remove the entries of ``parent`` (or the folder ``dir_fd``) that ``pattern`` matches, its group 1 the pid
    of a process gone from this host (where it has a group), abandoned (:func:`_abandoned`)."""
    try:
        fd = os.open(parent or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC) if dir_fd is None else dir_fd
    except OSError:
        return []
    removed = []
    try:
        for entry in os.listdir(fd):
            m = pattern.fullmatch(entry)
            if m is None or (pattern.groups and (int(m[1]) == os.getpid() or alive(int(m[1])))):
                continue
            st = _abandoned(fd, entry, age, folder, changed)
            if st is not None and _remove(fd, entry, st):
                log.info("removed %s left by a run killed outright", os.path.join(parent, entry))
                removed.append(entry)
    except OSError:
        pass
    finally:
        if dir_fd is None:
            os.close(fd)
    return sorted(removed)


def files_only(fd: int) -> bool:
    """Whether the folder ``fd`` holds regular files alone (a plan folder's temporary, say)."""
    with os.scandir(fd) as entries:
        return all(e.is_file(follow_symlinks=False) for e in entries)


def _abandoned(fd: int, entry: str, age: float, folder: Callable[[int], bool] | None,
               changed: bool = False) -> os.stat_result | None:
    """The status of ``entry`` of the folder ``fd`` where it is this user's, of the kind asked (not a link) and
    not written (``changed``: not changed, a rename included) for ``age`` seconds, else None."""
    try:
        st = os.stat(entry, dir_fd=fd, follow_symlinks=False)
    except OSError:
        return None
    kind = stat.S_ISDIR(st.st_mode) if folder is not None else stat.S_ISREG(st.st_mode)
    when = max(st.st_mtime, st.st_ctime) if changed else st.st_mtime
    if not kind or st.st_uid != os.geteuid() or time.time() - when < age:
        return None
    if folder is None:
        return st
    try:
        efd = os.open(entry, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
    except OSError:
        return None
    try:
        return st if _same(os.fstat(efd), st) and folder(efd) else None
    except (OSError, ValueError):
        return None
    finally:
        os.close(efd)


def _same(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _remove(fd: int, entry: str, st: os.stat_result) -> bool:
    """Remove ``entry`` where it is still what was checked (``st``: not replaced meanwhile)."""
    try:
        if not _same(os.stat(entry, dir_fd=fd, follow_symlinks=False), st):
            return False
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(entry, dir_fd=fd)  # (links inside unlinked, never followed)
        else:
            os.unlink(entry, dir_fd=fd)
    except OSError:
        return False
    return True
