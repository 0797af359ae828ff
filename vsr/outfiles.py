"""Small outputs written whole: a run report (``vsr upscale --report``), an HTML page (``vsr report --html``,
``vsr jobs report --html``), a preview picture (``vsr preview --out``); and the rules of ``vsr export --out``.

They are outputs like a video: :func:`check_file_output`, called before any work, refuses

- a name that is the input, any other file the command reads (``--weights``, ``--config``, ``--scene-cuts``)
  or another output of the same command (the video), however it is spelt: another relative path, a symbolic
  link or a hard link to it; or a name inside a folder of PNG frames the command writes;
- anything there that is not a regular file, even with ``--overwrite``: a folder, a device, a pipe, and a
  symbolic link (``/dev/stdout`` is one: the rename would replace the link itself, not write through it);
- an existing file without ``--overwrite``;
- an empty name (``--report ''``);
- a folder that does not exist or cannot be written (a file is created there and removed, as a test);

and ``-`` means standard output, as it does for IN and OUT (unless ``stdout=False``: ``vsr export``'s model is
never written there).  Messages name the file as it was typed.  :func:`write_file_output` writes under a hidden
temporary name beside the file and renames it into place, so a failure (a full disk) leaves the old file as it
was and no temporary behind; it raises :class:`~vsr.errors.OutputError` naming the file (or standard output,
where a full disk under a ``>`` redirection cuts it short).
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

from vsr import interrupt
from vsr.errors import InputError, OutputError
from vsr.files import create_new, file_in_the_way, not_writable
from vsr.leftovers import remove_old_partials, remove_partials, remove_probes

STDOUT = "-"


def _spellings(path: Path) -> set[str]:
    """Every name ``path`` is known by here: as given (absolute), with its folder resolved, and fully resolved."""
    out = {os.path.abspath(path)}
    try:
        out.add(str(path.parent.resolve() / path.name))
        out.add(str(path.resolve()))
    except (OSError, RuntimeError):
        pass
    return out


def _same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` name one file: one spelling in common, or (both existing) one inode."""
    if _spellings(a) & _spellings(b):
        return True
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


def _inside(path: Path, folder: Path) -> bool:
    """Whether ``path`` would be written inside ``folder`` (resolved)."""
    try:
        folder = folder.resolve()
        where = path.parent.resolve()
    except (OSError, RuntimeError):
        return False
    return where == folder or folder in where.parents


def check_file_output(name: str | os.PathLike, option: str, what: str, *, overwrite: bool,
                      inputs: tuple = (), outputs: tuple = (), folders: tuple = (),
                      reads: tuple = (), stdout: bool = True) -> Path | None:
    """The checked path of a small output (None: ``-``, standard output), or a one-line :class:`InputError`.

    ``option``: the option that named it (``--report``), ``what``: what it holds (``report``), for the messages;
    ``inputs``/``outputs``: the command's other files (an input that is ``-`` is skipped); ``folders``: PNG-frame
    output folders it must not be written into; ``reads``: ``(option, path)`` of the other files the command reads
    (``("--weights", "w.pth")``); ``stdout``: whether ``-`` means standard output (``False``: it is a file name,
    and the messages do not offer ``-``: ``vsr bench``'s and ``vsr export``'s files).
    """
    typed = os.fspath(name)
    if typed == STDOUT and stdout:
        return None
    if not typed:
        raise InputError(f"{option} is empty: give the {what} a file name" + (", or - for standard output"
                                                                               if stdout else ""))
    path = Path(name)
    for other, role in [(Path(p), "input") for p in inputs if os.fspath(p) != STDOUT] + \
                       [(Path(p), f"{o} file") for o, p in reads if os.fspath(p) != STDOUT] + \
                       [(Path(p), "output") for p in outputs if os.fspath(p) != STDOUT]:
        if _same_file(path, other):
            raise InputError(f"{option} {typed} is the {role} {other}: give the {what} a name of its own")
    for folder in folders:
        if _inside(path, Path(folder)):
            raise InputError(f"{option} {typed} is inside the output folder {folder}, which vsr replaces whole: "
                             f"give the {what} a place outside it")
    if path.is_dir() or typed.endswith(("/", os.sep)):
        raise InputError(f"{option} {typed} is a folder: give the {what}'s file name (e.g. {path / _example(what)})")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        if (blocker := file_in_the_way(parent)) is not None:
            raise InputError(f"{option} {typed} cannot be written: {blocker} is a file, not a folder")
        raise InputError(f"{option} folder does not exist: {parent}")
    if os.path.islink(path):
        raise InputError(f"will not replace {typed}: it is a symbolic link, which the {what} would replace rather "
                         f"than write through (give the file's own name{_or_stdout(option, stdout)})")
    if os.path.lexists(path):
        try:
            regular = stat.S_ISREG(os.stat(path).st_mode)
        except OSError:
            regular = False
        if not regular:
            raise InputError(f"will not replace {typed}: it is not a regular file (give another name"
                             f"{_or_stdout(option, stdout)})")
        if not overwrite:
            raise InputError(f"{typed} exists (pass --overwrite to replace it)")
    check_writable(parent, option)
    return path


def _or_stdout(option: str, stdout: bool) -> str:
    return f", or {option} - for standard output" if stdout else ""


def _example(what: str) -> str:
    return {"report": "run.json", "page": "report.html", "account": "account.json", "summary": "summary.json",
            "model": "model.onnx"}.get(what, "preview.png")


def _temporary(path: Path) -> Path:
    return path.with_name(f".{path.name}.vsr-partial-{os.getpid()}")


def check_writable(folder: Path, option: str) -> None:
    """A one-line :class:`InputError` where no file can be created in ``folder`` (:func:`vsr.files.not_writable`'s
    probe), or in a ``folder`` not there yet, in the nearest folder above it that is (where it would be made)."""
    here = folder
    while not os.path.lexists(here) and here != here.parent:
        here = here.parent
    if not here.is_dir():
        raise InputError(f"{option} {folder} cannot be made: {here} is a file, not a folder")
    remove_probes(here)  # (one a kill left: the name holds the pid)
    why = not_writable(here)
    if why is not None:
        if here == folder:
            raise InputError(f"{option} folder is not writable: {folder} ({why})")
        raise InputError(f"{option} {folder} cannot be made: no folder can be created in {here} ({why})")


def write_file_output(path: Path | None, data: str | bytes) -> None:
    """``data`` into ``path`` whole or not at all (None: standard output); :class:`OutputError` naming ``path``
    when it cannot be written (the temporary file is removed, an old file at ``path`` stays as it was)."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    if path is None:
        _write_stdout(raw)
        return
    remove_partials(path)  # (what runs killed outright left)
    remove_old_partials(path, ".part")  # (and older vsr's pages: .NAME.PID.part)
    tmp = _temporary(path)
    try:
        fd = create_new(tmp)  # the user's usual permissions (umask), not mkstemp's 0600
        try:
            with open(fd, "wb") as f:
                f.write(raw)
            interrupt.check()  # nothing published after a stop (vsr.interrupt)
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    except OSError as e:
        raise OutputError(f"cannot write {path}: {e.strerror or e}") from e


def _write_stdout(raw: bytes) -> None:
    """``raw`` whole on standard output, or :class:`OutputError`; a closed pipe stays a BrokenPipeError (exit 141)."""
    try:
        sys.stdout.flush()
        view = memoryview(raw)
        while view:
            # a buffered write that a full disk (vsr upscale --report - > file) cuts short returns the count it
            # wrote and drops the rest without an error: the next write is the one that says the disk is full
            view = view[sys.stdout.buffer.write(view):]
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as e:
        raise OutputError(f"cannot write standard output: {e.strerror or e}") from e
