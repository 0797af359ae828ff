"""Run ``vsr`` command lines as separate processes, fast: forked from a server that has imported vsr, torch and
PyAV once (a fresh ``python -m vsr`` spends about 2.5 s importing them on the 2-core CI machine).

Each run is a process of its own running :func:`vsr.cli.entry` (the console script), with its own stderr,
warnings registry and exit code, so a traceback or a crash shows as it would for a user.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from pathlib import Path


def _entry(argv: list[str], stderr_path: str, stdout_path: str | None = None) -> None:
    fd = os.open(stderr_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 2)
    sys.stderr = open(2, "w", closefd=False)
    if stdout_path is not None:
        os.dup2(os.open(stdout_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 1)
        sys.stdout = open(1, "w", closefd=False)
    sys.argv = ["vsr", *argv]
    from vsr.cli import entry

    entry()


class CliRunner:
    def __init__(self):
        self._ctx = multiprocessing.get_context("forkserver")
        self._ctx.set_forkserver_preload(["vsr.cli", "vsr.cli.upscale", "vsr.pipeline", "vsr.backends", "torch",
                                          "av", "tests.fuzz.cli_runner"])

    def __call__(self, argv: list, stderr_path: Path, timeout: float = 120,
                 stdout_path: Path | None = None) -> tuple[int, str]:
        """(exit code, stderr text) of ``vsr ARGV``; its standard output into ``stdout_path`` where given."""
        args = ([str(a) for a in argv], str(stderr_path), None if stdout_path is None else str(stdout_path))
        code = self.exit_code(_entry, args, argv, timeout)
        return code, Path(stderr_path).read_text(errors="replace")

    def exit_code(self, target, args: tuple, argv: list, timeout: float) -> int:
        """Run ``target(*args)`` (an entry that runs ``vsr ARGV``) in a forked process; its exit code."""
        p = self._ctx.Process(target=target, args=args)
        p.start()
        p.join(timeout)
        if p.is_alive():
            p.kill()
            p.join()
            raise TimeoutError(f"vsr {' '.join(map(str, argv))} ran over {timeout} s")
        return p.exitcode
