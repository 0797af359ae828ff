"""Files vsr reads and writes outside the user's inputs and outputs: checksums, its configuration files, the
engine cache folder, the folder of downloaded weights and the user's data folder (the job store); and the
environment the processes vsr starts inherit (:func:`environment`)."""

from __future__ import annotations

import errno
import functools
import hashlib
import importlib.resources
import os
import tomllib
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, TypeVar

from vsr import interrupt

T = TypeVar("T")

# The folder holding the ``vsr`` package: a source checkout's root, or site-packages when installed.
PACKAGE_PARENT = Path(__file__).resolve().parents[1]


def file_in_the_way(folder: Path) -> Path | None:
    """Where a ``folder`` that is not there cannot be: the first of it and the folders above it that exists and
    is no folder (``x.txt`` of ``x.txt/run``), or None (the folder is simply missing)."""
    for p in (folder, *folder.parents):
        if os.path.lexists(p):
            return None if p.is_dir() else p
    return None


def not_writable(folder: Path) -> str | None:
    """Why no file can be created in ``folder`` (the system's words), or None: a file is created and removed
    there (``access()`` says yes to root even on a read-only mount).  Never through a link planted at the probe's
    name, and never left behind: a stop cannot land between the two."""
    probe = folder / f".vsr-write-test-{os.getpid()}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    with interrupt.held():
        for attempt in (1, 2):
            try:
                os.close(os.open(probe, flags, 0o600))
                os.unlink(probe)
                return None
            except FileExistsError:  # left by a process of the same id, killed outright: removed, tried again
                if attempt == 2:
                    return os.strerror(errno.EEXIST)
                os.unlink(probe)  # the entry itself, a link included
            except OSError as e:
                return e.strerror or str(e)
    return None


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


def config_dir() -> Path:
    """The folder of vsr's configuration files (model configs, ``plan/``, ``degrade/``, ``pipeline/``):
    ``$VSR_CONFIG_DIR``, else the package ``vsr.configs`` (the top-level ``configs/`` folder of a checkout, or
    the copy inside an installed wheel), found through :mod:`importlib.resources`.  Every loader of a config
    file starts here."""
    env = os.environ.get("VSR_CONFIG_DIR")
    if env:
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
    except (KeyError, ValueError, TypeError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"{p}: malformed {what} ({e})") from None


def user_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/vsr``, else ``~/.cache/vsr``."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache") / "vsr"


def user_data_dir() -> Path:
    """``$XDG_DATA_HOME/vsr``, else ``~/.local/share/vsr``: what vsr keeps for the user (the job store)."""
    xdg = os.environ.get("XDG_DATA_HOME")
    return (Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "share") / "vsr"


def engine_dir(root: Path = PACKAGE_PARENT) -> Path:
    """Where built artefacts go (ONNX exports in ``onnx/``, subgraph plans in ``plans/``).

    ``$VSR_ENGINE_DIR``; else the checkout's ``engines/`` when vsr runs from a source checkout at ``root``;
    else ``engines/`` in the user's cache folder, so an installed vsr never writes beside its own code.
    """
    env = os.environ.get("VSR_ENGINE_DIR")
    if env:
        return Path(env)
    if source_checkout(root):
        return root / "engines"
    return user_cache_dir() / "engines"


def weights_dir() -> Path:
    """Where ``vsr models fetch`` puts official checkpoints and where ``--weights NAME`` finds them:
    ``$VSR_WEIGHTS_DIR``, else ``weights/`` in the user's cache folder (also when run from a checkout: they are
    large and the same for every checkout)."""
    env = os.environ.get("VSR_WEIGHTS_DIR")
    return Path(env) if env else user_cache_dir() / "weights"


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
