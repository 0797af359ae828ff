"""A job's chunk folder, ``<output folder>/.vsr-chunks/<key>/``, used only through file descriptors.

The output folder of a job may be shared (Celery workers need one file system), so another user may plant a
symbolic link at the predictable ``.vsr-chunks`` or ``.vsr-chunks/<key>`` path, or a folder of their own there.
So vsr:

- opens the output's folder one component at a time from ``/`` with ``O_NOFOLLOW | O_DIRECTORY`` (a job's
  output path is resolved when it is added, so a link found on it now was put there since, e.g. the output
  folder swapped for a link: refused, never followed), then ``.vsr-chunks`` and ``<key>`` the same way, and
  then works only relative to the open folders (``dir_fd``, or ``/proc/self/fd/N/NAME`` for FFmpeg, which
  opens by name): renaming or replacing a path component afterwards changes nothing it writes;
- creates ``<key>`` under a temporary name, mode 0700, with its marker (:data:`MARKER`, holding the key) written
  inside, and renames it into place, so a key folder without the marker was not made by vsr;
- refuses a key folder that is not owned by this user or lacks the marker (one line; the job fails);
- creates every file in it with ``O_CREAT | O_EXCL | O_NOFOLLOW`` and reads with ``O_NOFOLLOW``.

Every worker of a job must therefore run as the same user (the owner of its chunk folder).
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from pathlib import Path

from vsr import interrupt
from vsr.errors import InputError, VsrError
from vsr.leftovers import remove_partials

log = logging.getLogger(__name__)

CHUNKS_FOLDER = ".vsr-chunks"
MARKER = ".vsr-job"
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_PROC_FD = Path("/proc/self/fd")


class ChunkFolder:
    """The open chunk folder of the job with ``key`` beside ``output``; :meth:`open` makes one."""

    def __init__(self, output: Path, key: str, out_fd: int, chunks_fd: int, fd: int):
        self.output, self.key = Path(output), key
        self.out_fd, self.chunks_fd, self.fd = out_fd, chunks_fd, fd
        self.where = Path(output).parent / CHUNKS_FOLDER / key  # for messages

    @classmethod
    def open(cls, output: str | os.PathLike, key: str, create: bool) -> "ChunkFolder | None":
        """The chunk folder of ``key`` beside ``output``: created if missing and ``create`` (else None)."""
        output = Path(output)
        fds: list[int] = []
        try:
            out_fd = open_folder(output.parent, create)
            if out_fd is None:
                return None
            fds.append(out_fd)
            for name, mode in ((CHUNKS_FOLDER, 0o777), (key, 0o700)):
                fd = _open_dir(fds[-1], name, output.parent / CHUNKS_FOLDER, create, mode, key)
                if fd is None:
                    _close(fds)
                    return None
                fds.append(fd)
            folder = cls(output, key, *fds)
        except BaseException:
            _close(fds)
            raise
        try:
            folder._check()
        except BaseException:
            folder.close()
            raise
        return folder

    def _check(self) -> None:
        st = os.fstat(self.fd)
        if st.st_uid != os.geteuid():
            raise InputError(f"will not use the chunk folder {self.where}: it belongs to another user (uid "
                             f"{st.st_uid}); every worker of a job runs as the user who owns its chunks")
        try:
            marked = self.read_text(MARKER) == self.key
        except (OSError, UnicodeDecodeError):
            marked = False
        if not marked:
            raise InputError(f"will not use the chunk folder {self.where}: vsr did not make it (no {MARKER} "
                             "marker of this job in it)")

    def close(self) -> None:
        _close([self.fd, self.chunks_fd, self.out_fd])
        self.fd = self.chunks_fd = self.out_fd = -1

    def __enter__(self) -> "ChunkFolder":
        return self

    def __exit__(self, kind, error, trace) -> None:
        if isinstance(error, VsrError) and error.args and isinstance(error.args[0], str) and self.fd >= 0:
            # a message that names a file through the open folder (FFmpeg's name for it, :meth:`path`) names
            # it where the user sees it: <output dir>/.vsr-chunks/<key>/NAME, not /proc/self/fd/N/NAME
            error.args = (error.args[0].replace(f"{_PROC_FD / str(self.fd)}/", f"{self.where}/"), *error.args[1:])
        # the folder deleted while open (and a link or another folder maybe put in its place, never followed):
        # creating or renaming in it fails with a bare ENOENT, which says it
        removed = isinstance(error, FileNotFoundError) and self.fd >= 0 and os.fstat(self.fd).st_nlink == 0
        self.close()
        if removed:
            raise InputError(f"the chunk folder {self.where} was deleted while the job used it (whatever is at its "
                             "path now is not followed); `vsr jobs retry` computes the job's chunks again") from None

    def path(self, name: str) -> Path:
        """A name FFmpeg can open for ``name`` in this folder (through the open folder, not the path)."""
        return _PROC_FD / str(self.fd) / name if _PROC_FD.is_dir() else self.where / name

    def is_file(self, name: str) -> bool:
        try:
            st = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        return stat.S_ISREG(st.st_mode)

    def read_text(self, name: str) -> str:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.fd)
        with open(fd, encoding="utf-8") as f:
            return f.read(1 << 26)

    def write_text(self, name: str, text: str) -> None:
        """``name`` holds ``text``, whole or not at all (a new file under a temporary name, then renamed)."""
        tmp = f".{name}.vsr-partial-{os.getpid()}"
        remove_partials(name, dir_fd=self.fd)  # (what runs killed outright left)
        _unlink(self.fd, tmp)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                     dir_fd=self.fd)
        try:
            with open(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException:
            _unlink(self.fd, tmp)
            raise

    def move_out(self, name: str) -> None:
        """Rename ``name`` of this folder to the job's output (a rename replaces the entry there, never writes
        through a link)."""
        interrupt.check()  # nothing published after a stop (vsr.interrupt)
        os.replace(name, self.output.name, src_dir_fd=self.fd, dst_dir_fd=self.out_fd)

    def holds_nothing(self) -> bool:
        """Whether the folder holds nothing but its marker (no chunk, note or partial file)."""
        return set(os.listdir(self.fd)) <= {MARKER}

    def remove(self) -> None:
        """Remove the folder and everything in it, then ``.vsr-chunks`` if no other job uses it."""
        for name in os.listdir(self.fd):
            try:
                os.unlink(name, dir_fd=self.fd)
            except IsADirectoryError:
                log.warning("left %s/%s: vsr writes no folder there", self.where, name)
        try:
            os.rmdir(self.key, dir_fd=self.chunks_fd)
            os.rmdir(CHUNKS_FOLDER, dir_fd=self.out_fd)
        except OSError:
            pass  # another job's chunks are there, or the folder is gone already


def open_folder(folder: Path, create: bool) -> int | None:
    """The absolute path ``folder`` opened without following a symbolic link at any of its components (each
    made, as ``mkdir -p`` makes them, where missing and ``create``; else None when one is missing)."""
    if not folder.is_absolute():
        raise InputError(f"a job's output folder is an absolute path, not {folder}")
    fd = os.open(folder.anchor, _DIR)
    try:
        for i, name in enumerate(folder.parts[1:], 2):
            try:
                try:
                    inner = os.open(name, _DIR, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        os.close(fd)
                        return None
                    try:
                        os.mkdir(name, 0o777, dir_fd=fd)
                    except FileExistsError:
                        pass  # made meanwhile: opened (and checked) below
                    inner = os.open(name, _DIR, dir_fd=fd)
            except OSError as e:
                where = Path(*folder.parts[:i])
                if e.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise InputError(f"will not write into {folder}: {where} is a symbolic link or not a folder "
                                     "now (a job's output is never written through a link; add the job again "
                                     "with the folder you mean)") from None
                raise InputError(f"cannot open the output folder {folder}: {where}: {e.strerror}") from None
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_dir(parent: int, name: str, shown: Path, create: bool, mode: int, key: str) -> int | None:
    """``name`` in the folder ``parent`` opened without following a link; created (``mode``) if missing and
    ``create`` (a key folder: under a temporary name with its marker, then renamed into place)."""
    where = shown if name == CHUNKS_FOLDER else shown / name
    for _ in range(3):
        try:
            return os.open(name, _DIR, dir_fd=parent)
        except FileNotFoundError:
            if not create:
                return None
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENOTDIR):
                raise InputError(f"will not use {where}: it is a symbolic link or not a folder (vsr makes that "
                                 "folder itself and does not follow links there)") from None
            raise InputError(f"cannot open {where}: {e.strerror}") from None
        try:
            if name == CHUNKS_FOLDER:
                os.mkdir(name, mode, dir_fd=parent)
            else:
                _make_key_folder(parent, name, key)
        except FileExistsError:
            pass  # made meanwhile by another worker: opened (and checked) next round
        except OSError as e:
            raise InputError(f"cannot create {where}: {e.strerror}") from None
    raise InputError(f"cannot create {where}: it keeps changing")


def _make_key_folder(parent: int, name: str, key: str) -> None:
    tmp = f".{name}.vsr-partial-{os.getpid()}"
    remove_partials(name, dir_fd=parent, folder=_marker_alone)  # (what runs killed outright left)
    os.mkdir(tmp, 0o700, dir_fd=parent)
    try:
        fd = os.open(tmp, _DIR, dir_fd=parent)
        try:
            marker = os.open(MARKER, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                             dir_fd=fd)
            with open(marker, "w", encoding="utf-8") as f:
                f.write(key)
        finally:
            os.close(fd)
        try:
            os.rename(tmp, name, src_dir_fd=parent, dst_dir_fd=parent)
        except OSError as e:
            if e.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
                raise FileExistsError(e.errno, e.strerror) from None
            raise
    except BaseException:
        _unlink(parent, f"{tmp}/{MARKER}")
        try:
            os.rmdir(tmp, dir_fd=parent)
        except OSError:
            pass
        raise


def _marker_alone(fd: int) -> bool:
    """Whether the folder ``fd`` is a key folder's temporary: vsr's marker in it, nothing else (or nothing yet)."""
    return set(os.listdir(fd)) <= {MARKER}


def _unlink(dir_fd: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass


def _close(fds: list[int]) -> None:
    for fd in fds:
        if fd >= 0:
            os.close(fd)
