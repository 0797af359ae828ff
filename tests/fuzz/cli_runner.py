"""Run ``vsr`` command lines as separate processes, fast: forked from a server that has imported vsr, torch and
PyAV once (a fresh ``python -m vsr`` spends about 2.5 s importing them on the 2-core CI machine).

Each run is a process of its own running :func:`vsr.cli.entry` (the console script), with its own stderr,
warnings registry and exit code, so a traceback or a crash shows as it would for a user.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading
from pathlib import Path


def _entry(argv: list[str], stderr_path: str, setup: dict | None = None) -> None:
    fd = os.open(stderr_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 2)
    sys.stderr = open(2, "w", closefd=False)
    _set_up(**(setup or {}))
    sys.argv = ["vsr", *argv]
    from vsr.cli import entry

    entry()


def _set_up(stdout: str | None = None, stdin: bytes | None = None, closed: tuple[int, ...] = (),
            env: dict | None = None, cwd: str | None = None) -> None:
    """The child's standard output into the file ``stdout``; ``stdin`` through a pipe on standard input;
    descriptors ``closed`` (0, 1) closed as a process started with ``<&-``/``>&-`` has them (Python then makes
    ``sys.stdin``/``sys.stdout`` None); ``env`` added to its environment; its folder ``cwd``."""
    os.environ.update(env or {})
    if cwd is not None:
        os.chdir(cwd)
    if stdout is not None:
        os.dup2(os.open(stdout, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 1)
        sys.stdout = open(1, "w", closefd=False)
    if stdin is not None:
        read, write = os.pipe()
        threading.Thread(target=_feed, args=(write, stdin), daemon=True).start()
        os.dup2(read, 0)
        os.close(read)
        sys.stdin = open(0, "r", closefd=False)
    for fd in closed:
        os.close(fd)
        setattr(sys, ("stdin", "stdout")[fd], None)


def _feed(fd: int, data: bytes) -> None:
    try:
        os.write(fd, data)
    except OSError:  # the reader stopped early
        pass
    finally:
        os.close(fd)


class CliRunner:
    def __init__(self):
        self._ctx = multiprocessing.get_context("forkserver")
        self._ctx.set_forkserver_preload(["vsr.cli", "vsr.cli.upscale", "vsr.pipeline", "vsr.backends", "torch",
                                          "av", "tests.fuzz.cli_runner"])

    def start(self, argv: list, stderr_path: Path, **setup):
        """``vsr ARGV`` started in a process of its own (:func:`_set_up` takes ``setup``); the process."""
        p = self._ctx.Process(target=_entry, args=([str(a) for a in argv], str(stderr_path), setup))
        p.start()
        return p

    def __call__(self, argv: list, stderr_path: Path, timeout: float = 120, **setup) -> tuple[int, str]:
        """(exit code, stderr text) of ``vsr ARGV``."""
        p = self.start(argv, stderr_path, **setup)
        p.join(timeout)
        if p.is_alive():
            p.kill()
            p.join()
            raise TimeoutError(f"vsr {' '.join(map(str, argv))} ran over {timeout} s")
        return p.exitcode, Path(stderr_path).read_text(errors="replace")
