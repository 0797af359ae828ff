"""Files vsr reads and writes outside the user's inputs and outputs: checksums, its configuration files, the
engine cache folder, the folder of downloaded weights and the user's data folder (the job store); and the
environment the processes vsr starts inherit (:func:`environment`)."""

from __future__ import annotations

import errno
import functools
import hashlib
import importlib.resources
import os
import stat
import tomllib
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, TypeVar

from vsr import interrupt
from vsr.errors import InputError, OutputError, printable

T = TypeVar("T")

# The folder holding the ``vsr`` package: a source checkout's root, or site-packages when installed.
PACKAGE_PARENT = Path(__file__).resolve().parents[1]
PROBE = ".vsr-write-test-"  # :func:`not_writable`'s file, then its pid


def file_in_the_way(folder: Path) -> Path | None:
    """Where a ``folder`` that is not there cannot be: the first of it and the folders above it that exists and
    is no folder (``x.txt`` of ``x.txt/run``), or None (the folder is simply missing)."""
    for p in (folder, *folder.parents):
        if os.path.lexists(p):
            return None if p.is_dir() else p
    return None


def create_new(path: Path, mode: int = 0o666) -> int:
    """A new file of vsr's own at ``path``, open for writing (its descriptor): created by vsr (``O_CREAT |
    O_EXCL | O_NOFOLLOW``), never through a link planted at the name, whose target would be overwritten. ``path`` is
    a name only this process uses (its id in it): an entry already there is a planted link or a file a killed run
    of the same id left, removed (the entry itself, never what a link points at) and the file created again."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(path, flags, mode)
    except FileExistsError:
        os.unlink(path)
        return os.open(path, flags, mode)


def write_new(path: Path, data: bytes, mode: int = 0o666) -> None:
    """``data`` in a new file of vsr's own at ``path`` (:func:`create_new`: never written through a link planted
    at the name; ``mode`` less the umask); the caller renames it into place."""
    with open(create_new(path, mode), "wb") as f:
        f.write(data)


def not_writable(folder: Path) -> str | None:
    """Why no file can be created in ``folder`` (the system's words), or None: a file is created and removed
    there (``access()`` says yes to root even on a read-only mount).  Never through a link planted at the probe's
    name, and never left behind: a stop cannot land between the two."""
    probe = folder / f"{PROBE}{os.getpid()}"  # (one a kill left is removed by vsr.leftovers.remove_probes)
    with interrupt.held():
        try:
            os.close(create_new(probe, 0o600))
            os.unlink(probe)
        except FileExistsError:  # the entry came back between its removal and the second try
            return os.strerror(errno.EEXIST)
        except OSError as e:
            return e.strerror or str(e)
    return None


def code_digest(names) -> str:
    """sha256 of vsr's own source files ``names`` (paths from the repository root, as ``vsr/plan/plan.py``), each
    with its name: a cache key's part for the code that makes an entry (vsr's version number does not change with
    it).  Read each call: callers cache it for the process."""
    h = hashlib.sha256()
    for name in names:
        h.update(name.encode() + b"\0" + (PACKAGE_PARENT / name).read_bytes() + b"\0")
    return h.hexdigest()


def sha256_file(path: str | os.PathLike) -> str:
    """Hex sha256 of the file at ``path`` (read in 1 MiB chunks)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def sha256_once(path: str | os.PathLike, st: os.stat_result | None = None) -> str:
    """:func:`sha256_file`, read once per version of the file (its path, modification time, size and inode:
    ``st``, or its stat now): a check asked for at every load or chunk costs one read."""
    st = os.stat(path) if st is None else st
    return _sha256_of_version(os.fspath(path), st.st_mtime_ns, st.st_size, st.st_ino)


@functools.lru_cache(maxsize=32)
def _sha256_of_version(path: str, mtime_ns: int, size: int, inode: int) -> str:
    return sha256_file(path)


def source_checkout(root: Path = PACKAGE_PARENT) -> bool:
    """Whether ``root`` is a git checkout of vsr with its ``engines/`` folder (vsr run from source)."""
    return ((root / ".git").exists() and (root / "pyproject.toml").is_file() and (root / "engines").is_dir()
            and os.access(root / "engines", os.W_OK))


def shared_data() -> Path:
    """The project's reference data (Vid4, real clips): ``$VSR_DATA``, else the ``shared/data`` folder beside a
    source checkout (an installed vsr has none there: it needs ``$VSR_DATA``)."""
    env = os.environ.get("VSR_DATA")
    return Path(env) if env else PACKAGE_PARENT.parent / "shared" / "data"


def config_dir() -> Path:
    """The folder of vsr's configuration files (model configs, ``plan/``, ``degrade/``, ``pipeline/``):
    ``$VSR_CONFIG_DIR``, else the package ``vsr.configs`` (the top-level ``configs/`` folder of a checkout, or
    the copy inside an installed wheel), found through :mod:`importlib.resources`.  Every loader of a config
    file starts here."""
    env = os.environ.get("VSR_CONFIG_DIR")
    if env:
        if not Path(env).is_dir():  # (every config was "unknown", the folder unnamed)
            raise InputError(f"VSR_CONFIG_DIR={env} is not a folder: it names a copy of vsr's configs/ folder")
        return Path(env)
    try:
        root = importlib.resources.files("vsr.configs")
    except ModuleNotFoundError:
        # an editable install made before vsr.configs existed (its import hook knows only vsr/): the checkout's
        # own folder, until scripts/setup.sh runs again
        root = PACKAGE_PARENT / "configs"
        if not root.is_dir():
            raise
    if not isinstance(root, Path):  # a zip import: the loaders need real files (glob, paths in reports)
        raise FileNotFoundError(f"vsr's configs are not on the file system ({root}); install vsr unzipped, or "
                                "set VSR_CONFIG_DIR to a copy of its configs/ folder")
    return root


def loads_toml(text: str) -> dict:
    """``tomllib.loads``; a file nested deeper than Python's recursion reaches (``a = [[[[...`` 5,000 times) is a
    :class:`tomllib.TOMLDecodeError` like any other malformed file, not a RecursionError."""
    try:
        return tomllib.loads(text)
    except RecursionError:
        raise tomllib.TOMLDecodeError("arrays or tables nested too deeply") from None


def load_config(path: str | os.PathLike | None, default: str, what: str, build: Callable[[dict], T]) -> T:
    """``build(table)`` of the TOML file at ``path`` (None: ``default`` under :func:`config_dir`, e.g.
    ``"pipeline/scenes.toml"``); an unreadable file, bad TOML or a missing or ill-typed key -> one ConfigError
    naming the file and ``what`` it holds.  ``build``'s own ConfigError (a value out of range) passes as it is."""
    from vsr.errors import ConfigError

    p = Path(path) if path is not None else config_dir() / default
    try:
        return build(loads_toml(p.read_text()))
    except OSError as e:
        raise ConfigError(f"{p}: cannot read {what} ({e.strerror})") from None
    except UnicodeDecodeError:  # (a ValueError: not the codec's "can't decode byte 0x96 in position 42")
        raise ConfigError(f"{p} is not a {what} (not TOML text)") from None
    except (KeyError, ValueError, TypeError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"{p}: malformed {what} ({e})") from None


def home_folder(instead: tuple[str, ...]) -> Path:
    """The user's home folder: ``$HOME``, else (unset, or empty: Python's ``~`` is then ``/``) the password
    database's.  None to be found (HOME unset or empty and the user id in no passwd entry: a container run as
    ``--user 12345``; HOME relative) -> one InputError naming what to set, ``instead``'s variables or HOME.
    (``Path.home()`` raised RuntimeError there, a traceback, and ``os.path.expanduser("~")`` gave ``~``: a folder
    of that name made in the current one.)"""
    try:
        if os.environ.get("HOME") == "":
            import pwd

            home = Path(pwd.getpwuid(os.getuid()).pw_dir)
        else:
            home = Path.home()
    except (RuntimeError, KeyError):
        home = None
    if home is not None and home.is_absolute():
        return home
    env = os.environ.get("HOME")
    why = (f"HOME={printable(env)} is not an absolute path" if env else
           f"HOME is {'empty' if env == '' else 'not set'} and user id {os.getuid()} has no entry in the password "
           "database")
    raise InputError(f"no home folder to keep vsr's files in ({why}): set {', '.join(instead)} or HOME")


def user_cache_dir(instead: tuple[str, ...] = ("XDG_CACHE_HOME",)) -> Path:
    """``$XDG_CACHE_HOME/vsr``, else ``~/.cache/vsr`` (no home: :func:`home_folder`'s line, naming ``instead``)."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg and Path(xdg).is_absolute() else home_folder(instead) / ".cache") / "vsr"


def torch_cache_dir() -> Path:
    """``$TORCHINDUCTOR_CACHE_DIR``, set by ``vsr/__init__.py`` to ``torchinductor/`` in vsr's cache folder; called
    before the ONNX export or ``torch.compile`` imports torch's dynamo, which makes it.  Left unset there without
    a home: then set here, or :func:`home_folder`'s line, never torch's default (a predictable /tmp name)."""
    env = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if env:
        return Path(env)
    path = user_cache_dir(("TORCHINDUCTOR_CACHE_DIR", "XDG_CACHE_HOME")) / "torchinductor"
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(path)
    return path


def special_kind(mode: int) -> str | None:
    """``a character device`` (``/dev/zero``), ``a named pipe``, ...: what a file that is not a regular one is
    (its size says nothing: 0), or None for a regular file."""
    for test, kind in ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return None


def read_small_text(path: str | os.PathLike, limit: int, what: str, form: str = "text") -> str:
    """The UTF-8 text of the regular file ``path`` (``what`` it holds: "run report"), at most ``limit`` bytes.
    A file that is not a regular one (``/dev/zero`` reads for ever, a named pipe waits for a writer) or is
    larger, or cannot be read, or is not UTF-8 (a video given for a report: not ``form``, e.g. "JSON text"), is
    one :class:`~vsr.errors.InputError` naming it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)  # (a named pipe: no wait to open)
        try:
            mode = os.fstat(fd).st_mode
            kind = "a folder" if stat.S_ISDIR(mode) else special_kind(mode)
            if kind is not None:
                raise InputError(f"{path} is {kind}, not a {what}")
        except BaseException:
            os.close(fd)
            raise
        with os.fdopen(fd, "rb") as f:
            data = f.read(limit + 1)
        if len(data) > limit:
            raise InputError(f"{path} is larger than any {what} ({limit >> 20} MiB at most)" if limit >= 1 << 20
                             else f"{path} is larger than any {what} ({limit} bytes at most)")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:  # (not the codec's "can't decode byte 0x96 in position 42")
            raise InputError(f"{path} is not a {what} (not {form})") from None
    except OSError as e:
        raise InputError(f"cannot read {what} {path}: {getattr(e, 'strerror', None) or e}") from None


def untrusted(path: Path) -> str | None:
    """Why what is in ``path`` (a cache folder, or an entry of one) might not be what this user's vsr put there,
    or None: it must be this user's own (not a link to something) and no other user may write to it.  What vsr
    reads back from a cache decides the output's pixels (exports, plans) or runs as code (kernels, engines)."""
    try:
        st = os.lstat(path)
    except OSError as e:
        return e.strerror or str(e)
    if stat.S_ISLNK(st.st_mode):
        return "it is a symbolic link"
    if st.st_uid != os.geteuid():
        return f"it belongs to user {st.st_uid}"
    if others_can_write(st):
        return f"other users can write to it (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def others_can_write(st: os.stat_result) -> bool:
    """Whether a user other than the owner of what ``st`` describes may write to it: its mode lets all, or a
    group that is not the owner's alone (:func:`own_group`)."""
    return bool(st.st_mode & 0o002 or (st.st_mode & 0o020 and not own_group(st.st_gid, st.st_uid)))


def own_group(gid: int, uid: int) -> bool:
    """Whether group ``gid`` holds user ``uid`` alone: a user private group (Debian's and Ubuntu's default,
    where the umask is 002, so a folder the user makes is group-writable).  OpenSSH's rule as Debian keeps it:
    no other user has it as primary group or is listed in it, and ``uid`` is in it one way or the other."""
    import grp
    import pwd
    try:
        group, name = grp.getgrgid(gid), pwd.getpwuid(uid).pw_name
    except KeyError:
        return False
    primary = [p.pw_uid for p in pwd.getpwall() if p.pw_gid == gid]
    listed = list(group.gr_mem)
    return all(u == uid for u in primary) and all(m == name for m in listed) and bool(primary or listed)


def private_folder(path: Path, what: str, risk: str = "what is loaded from there would run as you",
                   setting: str | None = None) -> Path:
    """``path`` made (mode 0700) where missing, and checked to be a folder of this user's that no other user can
    write (:func:`untrusted`): where vsr keeps what it reads back (compiled kernels, exports, plans, engines), or
    what another user put there would run as this one or decide the output (``risk`` says which).  A folder
    that is not is a :class:`~vsr.errors.InputError` naming it (and ``setting``, the variable that moves it)."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as e:  # a read-only home, a path under a file: one line naming what the folder is for
        where = f"; set {setting} to a folder you can write" if setting else ""
        raise InputError(f"cannot make the folder for {what} {path}: {e.strerror or e}{where}") from None
    why = untrusted(path) or (None if path.is_dir() else "not a folder")
    if why is not None:
        where = f"set {setting} to" if setting else "use"
        raise InputError(f"will not keep {what} in {path}: {why}; {risk} (remove it: vsr makes it again, mode "
                         f"0700; or {where} a folder of yours alone)")
    return path


def private_file(path: Path) -> bool:
    """Whether ``path`` is a regular file of this user's that no other user can write (not a link)."""
    return untrusted(path) is None and path.is_file()


def user_data_dir(instead: tuple[str, ...] = ("XDG_DATA_HOME",)) -> Path:
    """``$XDG_DATA_HOME/vsr``, else ``~/.local/share/vsr``: what vsr keeps for the user (the job store); no home:
    :func:`home_folder`'s line, naming ``instead``."""
    xdg = os.environ.get("XDG_DATA_HOME")
    return (Path(xdg) if xdg and Path(xdg).is_absolute() else home_folder(instead) / ".local" / "share") / "vsr"


def engine_dir(root: Path = PACKAGE_PARENT) -> Path:
    """Where built artefacts go (ONNX exports in ``onnx/``, subgraph plans in ``plans/``).

    ``$VSR_ENGINE_DIR``; else the checkout's ``engines/`` when vsr runs from a source checkout at ``root``;
    else ``engines/`` in the user's cache folder, so an installed vsr never writes beside its own code.
    """
    env = os.environ.get("VSR_ENGINE_DIR")
    if env:
        if os.path.lexists(env) and not Path(env).is_dir():  # (FileNotFoundError/NotADirectoryError's lines)
            raise InputError(f"VSR_ENGINE_DIR={env} is not a folder: it names where vsr keeps its built models")
        return Path(env)
    if source_checkout(root):
        return root / "engines"
    return user_cache_dir(("VSR_ENGINE_DIR", "XDG_CACHE_HOME")) / "engines"


FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)  # a full disk, a quota, a file size limit


def engine_write_error(e: BaseException, folder: Path, what: str) -> BaseException:
    """What to raise for ``e``, met while ``what`` (an ONNX export, a plan) was written into ``folder`` of
    :func:`engine_dir`: where the disk is full an :class:`OutputError` naming the folder (a bare "No space left on
    device" sends the user to the disk of their output, which has room), else ``e`` itself."""
    if not isinstance(e, OSError) or e.errno not in FULL:
        return e
    return OutputError(f"cannot write {what} into vsr's engine cache {folder}: {e.strerror}; make room there or "
                       f"set VSR_ENGINE_DIR to a folder on another disk")


def weights_dir() -> Path:
    """Where ``vsr models fetch`` puts official checkpoints and where ``--weights NAME`` finds them:
    ``$VSR_WEIGHTS_DIR``, else ``weights/`` in the user's cache folder (also when run from a checkout: they are
    large and the same for every checkout)."""
    env = os.environ.get("VSR_WEIGHTS_DIR")
    return Path(env) if env else user_cache_dir(("VSR_WEIGHTS_DIR", "XDG_CACHE_HOME")) / "weights"


@contextmanager
def environment(env: dict[str, str]) -> Iterator[None]:
    """``env`` in this process's environment -- what the processes started inside the block inherit -- until the
    block ends; the earlier values (or their absence) restored."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
