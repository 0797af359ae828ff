"""``vsr`` command lines for the probe suites: each a process of its own, forked from the preloaded server of
:mod:`tests.fuzz.cli_runner`, with what a probe also needs: a real pipe on standard input (fed by a thread of
the child), standard output kept apart from standard error, and environment variables."""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from tests.fuzz.cli_runner import CliRunner

# what a run with --weights random says on every run: not part of what a case checks
NOISE = ("vsr: warning: using seeded random weights",)


def _entry(argv: list[str], out_dir: str, stdin: bytes | None, env: dict[str, str]) -> None:
    os.environ.update(env)
    for fd, name in ((1, "stdout"), (2, "stderr")):
        os.dup2(os.open(Path(out_dir) / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
    sys.stdout, sys.stderr = open(1, "w", closefd=False), open(2, "w", closefd=False)
    if stdin is None:
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    else:
        r, w = os.pipe()

        def feed():
            try:
                with open(w, "wb") as f:
                    f.write(stdin)
            except BrokenPipeError:
                pass  # vsr stopped reading: what it did with that is what the case checks

        threading.Thread(target=feed, daemon=True).start()
        os.dup2(r, 0)
        os.close(r)
    sys.argv = ["vsr", *argv]
    from vsr.cli import entry

    entry()


@dataclass
class Ran:
    rc: int
    err: str
    out: bytes

    @property
    def lines(self) -> list[str]:
        """stderr's lines, without the random-weights notice."""
        return [ln for ln in self.err.splitlines() if ln.strip() and not ln.startswith(NOISE)]


class ProbeRunner(CliRunner):
    def run(self, argv: list, where: Path, stdin: bytes | None = None, env: dict[str, str] | None = None,
            timeout: float = 120) -> Ran:
        """``vsr ARGV`` with its stdout and stderr kept in the folder ``where``."""
        where.mkdir(parents=True, exist_ok=True)
        code = self.exit_code(_entry, ([str(a) for a in argv], str(where), stdin, dict(env or {})), argv, timeout)
        return Ran(code, (where / "stderr").read_text(errors="replace"), (where / "stdout").read_bytes())
