"""Output paths: checking the output, temporary names, the overwrite rules, stale partials, atomic commit.

A sink writes under a hidden temporary name beside the output and moves it into place on commit, so an
interrupted run never leaves anything at the output path.  What ``--overwrite`` (or an existing empty folder)
lets vsr replace:

- a regular file, where vsr writes a video file;
- a folder holding nothing but ``%08d.png`` frame files and vsr's marker file :data:`MARKER`, where vsr writes
  PNG frames: the marker is what says vsr wrote them (frames of the user's own, even named ``%08d.png``, stay).

Anything else is refused with one line before anything is touched: a folder holding any other file, a
subfolder or a link; a folder holding the input, the current folder or a home folder; a file where vsr would
write a folder.  An output that is a symbolic link is resolved first, and what it points to is replaced under
the same rules (the link stays).
"""

from __future__ import annotations

import errno
import functools
import os
import re
import shutil
import stat
import sys
from pathlib import Path

from vsr import interrupt
from vsr.errors import InputError, OutputError
from vsr.files import FULL, create_new, file_in_the_way, not_writable
from vsr.leftovers import remove_partials, remove_probes
from vsr.video.codecs import muxer_for
from vsr.video.png_frames import one_picture


# Written into every PNG folder vsr writes (and its temporary); a folder without it is never cleaned up as
# vsr's partial.
MARKER = ".vsr-frames"
MARKER_TEXT = ("Written by vsr upscale.  `vsr upscale ... --overwrite` may replace this folder while it holds only\n"
               "%08d.png frames and this file.\n")
FRAME_NAME = re.compile(r"\d{8,}\.png")


STREAM = "-"  # the input or output name of a stream: standard input, standard output


def is_stream(path: str | os.PathLike) -> bool:
    """Whether ``path`` names a stream (``-``) rather than a file: written and read once, in order, never renamed
    or replaced (none of the rules below apply to it)."""
    return os.fspath(path) == STREAM


def stream_closed(fd: int) -> bool:
    """Whether standard input (``fd`` 0) or output (1) is closed (``<&-``, ``>&-``).  Python starts with
    ``sys.stdin``/``sys.stdout`` None then; vsr's CLI puts /dev/null at the descriptor so that no file lands
    there (:func:`vsr.cli._hold_closed_streams`), and a library caller's descriptor may simply be closed."""
    if (sys.stdin, sys.stdout)[fd] is None:
        return True
    try:
        os.fstat(fd)
    except OSError:
        return True
    return False


def is_png_folder(path: Path) -> bool:
    """Output/input naming rule: an existing folder, or a name without a suffix, is a PNG-frame folder."""
    return path.is_dir() or path.suffix == ""


# the pictures one picture can be upscaled into, by suffix (any case): vsr.video.picture_sink
PICTURE_OUT = {".png": "PNG", ".jpg": "JPEG", ".jpeg": "JPEG", ".tif": "TIFF", ".tiff": "TIFF", ".webp": "WebP"}


def is_picture_out(dst: Path, src: Path) -> bool:
    """Whether ``dst`` is one picture (:data:`PICTURE_OUT`) made of the one picture ``src`` (``vsr upscale
    photo.jpg big.jpg``)."""
    return Path(dst).suffix.lower() in PICTURE_OUT and one_picture(Path(src))


def output_path(dst: Path) -> Path:
    """Where the output really goes: ``dst``, or what it points to if it is a symbolic link."""
    dst = Path(dst)
    if dst.name in ("", ".", ".."):
        return dst.resolve()  # so that the temporary name beside it is a real name
    if not dst.is_symlink():
        return dst
    if not dst.exists():
        raise InputError(f"output is a broken symbolic link: {dst} -> {os.readlink(dst)}")
    return dst.resolve()


def video_partial(dst: Path) -> Path:
    """A hidden name beside ``dst`` with the same suffix (so the container is still guessed from it)."""
    return dst.with_name(f".{dst.stem}.vsr-partial-{os.getpid()}{dst.suffix}")


class Partial:
    """A video output's temporary file, created by vsr itself (``O_CREAT | O_EXCL | O_NOFOLLOW``: never through
    a link planted at its name, whose target FFmpeg's own open would have overwritten) and held open; :attr:`io`
    opens that very file again (``/proc/self/fd/N``), for FFmpeg and for the rewrites after it, whatever is put
    at the name meanwhile."""

    def __init__(self, path: Path):
        self.path = path
        self.fd = create_new(path)  # a name of vsr's own (this process id's): what is there is removed
        proc = Path("/proc/self/fd")
        self.io = proc / str(self.fd) if proc.is_dir() else path

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def frames_partial(dst: Path) -> Path:
    """The hidden temporary folder beside a PNG-frame output ``dst``."""
    return dst.with_name(f".{dst.name}.vsr-partial-{os.getpid()}")


def make_frames_folder(path: Path) -> None:
    """Create ``path`` with vsr's marker in it (on a failure, a full disk, nothing of it is left)."""
    path.mkdir()
    try:
        (path / MARKER).write_text(MARKER_TEXT)
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise


# what writing an output (not reading the input) fails with: a full disk, an exceeded quota, a file too large
# for its file system, a file system gone read-only
WRITE_ERRNOS = (*FULL, errno.EROFS)  # a full disk, a quota, a file size limit (vsr.files.FULL); read-only


def writes(method):
    """A sink's method whose failure to write (:data:`WRITE_ERRNOS`, or any error naming the sink's temporary
    ``self.tmp``) is an :class:`OutputError` naming the output the user gave (``self.dst``), not the hidden
    temporary; the error it came from stays its cause (a batch job tells a full disk by it)."""
    @functools.wraps(method)
    def wrapped(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except OSError as e:
            tmp, name = getattr(self, "tmp", None), e.filename
            ours = tmp is not None and isinstance(name, (str, bytes)) and os.fsdecode(name).startswith(str(tmp))
            if e.errno not in WRITE_ERRNOS and not ours:
                raise
            raise OutputError(f"cannot write {self.dst}: {e.strerror or e}") from e
    return wrapped


def _contains(folder: Path, path: Path) -> bool:
    return path == folder or folder in path.parents


def _holds_only_frames(folder: Path | int) -> str | None:
    """None if ``folder`` holds only frame files and the marker, else the first entry that is not one."""
    with os.scandir(folder) as entries:
        for e in entries:
            if not e.is_file(follow_symlinks=False) or not (e.name == MARKER or FRAME_NAME.fullmatch(e.name)):
                return e.name
    return None


def _is_empty_folder(path: Path) -> bool:
    try:
        return path.is_dir() and not any(path.iterdir())
    except OSError:
        return False


def refusal(target: Path, src: Path, frames: bool) -> str | None:
    """Why vsr must not replace the existing ``target`` (a resolved output path) with its output, or None.

    ``src``: the input; ``frames``: the output is a PNG folder (else a video file).
    """
    if target.is_symlink():
        return "it is a symbolic link"
    if target.is_file():
        return "it is a file and vsr writes a folder of PNG frames there" if frames else None
    if not target.is_dir():
        return "it is neither a regular file nor a folder"
    target = target.resolve()
    inputs = [Path(os.path.abspath(src)), src.resolve()] if src.exists() else []
    if any(_contains(target, p) for p in inputs):
        return f"it holds the input {src}"
    try:
        home = Path.home().resolve()
    except (KeyError, RuntimeError):
        home = None
    if home is not None and _contains(target, home):
        return "it is a home folder" if target == home else "it holds a home folder"
    if _contains(target, Path.cwd().resolve()):
        return "it holds the current folder"
    try:
        other = _holds_only_frames(target)
    except OSError as e:
        return f"it cannot be listed ({e.strerror})"
    if other is not None:
        return f"it holds {other!r}, which vsr did not write (only %08d.png frames and {MARKER} are replaced)"
    if not (target / MARKER).is_file() and not _is_empty_folder(target):
        # frames named as vsr names them are still not vsr's without its marker: the user's own, or FFmpeg's
        return f"its frames carry no {MARKER} marker, so vsr did not write them (move or delete them yourself)"
    return None


@functools.cache
def picture_suffixes() -> frozenset[str]:
    """The suffixes FFmpeg gives its image2 muxer and no other: one picture file per frame, named by a pattern
    (``%d``), which a plain name such as ``single.png`` is not (FFmpeg fails at the first frame)."""
    import av

    others: set[str] = set()
    for name in av.formats_available:
        try:
            fmt = av.format.ContainerFormat(name)
        except (ValueError, av.FFmpegError):
            continue
        if name != "image2" and fmt.is_output:
            others |= fmt.extensions
    return frozenset(av.format.ContainerFormat("image2").extensions - others)


def check_output(dst: Path, src: Path, overwrite: bool) -> None:
    """One-line errors for outputs that cannot work, before anything is written: the input itself, an
    unwritable folder, an existing output without ``overwrite``, one the overwrite rules refuse."""
    dst, src = Path(dst), Path(src)
    if re.fullmatch(r"/dev/(stdout|stderr|fd/\d+)|/proc/[^/]+/fd/\d+", os.path.abspath(dst)):
        # (a temporary beside it cannot be made, nor renamed over it: the errors named /dev or /proc/PID/fd)
        raise InputError(f"{dst} is an open file of this process, not a file to write: for standard output give "
                         "'-' (vsr upscale IN - --format nut > OUT)")
    _check_name(dst)
    target = output_path(dst)
    if target.exists() and src.exists() and target.samefile(src):
        raise InputError(f"output is the input: {dst}")
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        if (blocker := file_in_the_way(parent)) is not None:
            raise InputError(f"output {dst} cannot be written: {blocker} is a file, not a folder")
        raise InputError(f"output folder does not exist: {parent}")
    if not is_png_folder(dst) and target.suffix[1:].lower() in picture_suffixes() and not is_picture_out(dst, src):
        if one_picture(src):
            raise InputError(f"{dst}: vsr writes one picture as PNG, JPEG, TIFF or WebP (give {Path(dst).stem}.png, "
                             f".jpg, .tif or .webp), or a video (.mp4, .mkv, ...)")
        raise InputError(f"{dst} is the name of one picture ({target.suffix}), and vsr writes a video: give a video "
                         f"name (.mp4, .mkv, ...), or a name without suffix for a folder of %08d.png frames")
    if target.exists():
        if not overwrite and not _is_empty_folder(target):
            raise InputError(f"output exists: {dst} (pass --overwrite to replace it)")
        why = refusal(target, src, is_png_folder(dst))
        if why is not None:
            raise InputError(f"will not replace {dst}: {why}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"output folder is not writable: {parent}")
    remove_probes(parent)  # (one a kill left: the name holds the pid)
    why = not_writable(parent)
    if why is not None:
        raise InputError(f"output folder is not writable: {parent} ({why})")
    remove_stale_partials(target, frames=is_png_folder(dst))


def _check_name(dst: Path) -> None:
    """A name that ends with a dot (``out.``), or is a video suffix alone (``.mp4``), has no suffix to Python and
    would be a (hidden) folder of PNG frames: surely not what was meant."""
    name = dst.name
    if dst.is_dir() or not name.strip("."):
        return
    if name.endswith("."):
        raise InputError(f"{dst} ends with a dot: give a video suffix ({name}mp4, {name}mkv, ...), or a name "
                         "without one for a folder of PNG frames")
    if name.startswith(".") and "." not in name[1:]:
        try:
            muxer_for("x" + name)
        except ValueError:
            return  # (a hidden name, not a suffix: the folder of PNG frames it asks for)
        raise InputError(f"{dst} is a suffix alone, which names a hidden folder of PNG frames: give a name before "
                         f"it (out{name})")


def remove_stale_partials(dst: Path, frames: bool) -> list[Path]:
    """Remove temporaries of ``dst`` left by vsr runs that were killed outright (SIGKILL, power loss).

    Only an exact temporary name of ``dst`` whose process is gone and which was not written for a day
    (:func:`vsr.leftovers.remove_partials`), and only what vsr writes there: a regular file for a video output;
    for PNG frames, a folder with vsr's marker holding only frames, and an old frames folder ``--overwrite``
    renamed aside (:func:`commit_output`) and not removed, renamed a day ago.  Returns what was removed.
    """
    if frames:
        names = remove_partials(dst, folder=_frames_partial) + remove_partials(dst, folder=_old_frames, aside=True)
    else:
        names = remove_partials(dst, suffix=dst.suffix)
    return [dst.with_name(n) for n in names]


def _frames_partial(fd: int) -> bool:
    """Whether the folder ``fd`` is a PNG-frame temporary of vsr's: its marker, and nothing but frames."""
    return stat.S_ISREG(os.stat(MARKER, dir_fd=fd, follow_symlinks=False).st_mode) and _holds_only_frames(fd) is None


def _old_frames(fd: int) -> bool:
    """Whether the folder ``fd`` is one :func:`refusal` let vsr replace: frames and its marker, or nothing."""
    with os.scandir(fd) as entries:
        names = [e.name for e in entries]
    return _holds_only_frames(fd) is None and (not names or MARKER in names)


def commit_output(tmp: Path, dst: Path, src: Path) -> None:
    """Move the finished temporary ``tmp`` to ``dst`` (a resolved output path), replacing what is there only
    under the overwrite rules, atomically where the file system allows.

    A file replaces a file in one rename.  A folder: the old one is renamed aside, the new one renamed in,
    then the old one removed; if the second rename fails the old one goes back.  (A kill before the removal
    leaves the old one aside: :func:`remove_stale_partials` removes it when ``dst`` is next written.)  Nothing is
    moved after a stop was asked for (:func:`vsr.interrupt.check`), even where the KeyboardInterrupt itself was
    lost.
    """
    interrupt.check()
    if not (dst.exists() or dst.is_symlink()):
        os.replace(tmp, dst)
        return
    frames = tmp.is_dir()
    why = refusal(dst, src, frames)
    if why is not None:
        raise InputError(f"{dst} appeared during the run and will not be replaced: {why}")
    if not frames:
        os.replace(tmp, dst)
        return
    aside = dst.with_name(f".{dst.name}.vsr-old-{os.getpid()}")
    os.rename(dst, aside)
    try:
        os.rename(tmp, dst)
    except BaseException:
        os.rename(aside, dst)
        raise
    shutil.rmtree(aside)
