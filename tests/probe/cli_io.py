"""``vsr`` command lines for the probe suites: each a process of its own, forked from the preloaded server of
:mod:`tests.fuzz.cli_runner`, with what a probe also needs: a real pipe on standard input (fed by a thread of
the child), standard output kept apart from standard error, and environment variables
(:func:`tests.fuzz.cli_runner._set_up`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests.fuzz.cli_runner import CliRunner

# what a run with --weights random says on every run: not part of what a case checks
NOISE = ("vsr: warning: using seeded random weights",)


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
        code, err = self(argv, where / "stderr", timeout, stdout=str(where / "stdout"), stdin=stdin, env=env)
        return Ran(code, err, (where / "stdout").read_bytes())
