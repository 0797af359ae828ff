"""The status line: what a command is preparing (loading the model, exporting, building the plan, warming up)
and for how long, on standard error from its first second until the progress bar takes over.

On a terminal it is one line rewritten in place about once a second (``\\r``, then cleared); into a file or a
pipe each phase is its own line, once, so a log holds no carriage returns.  ``quiet``: nothing at all.  While
the line is on a terminal, what else the process writes to standard error (a warning, a log line) clears it
first and the line comes back below at the next tick.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Callable, TextIO

from vsr import interrupt

CLEAR = "\r\x1b[K"  # to the line's start, erase it


class StatusLine:
    """``phase(name)`` shows ``vsr: name... N s``; ``close()`` takes the line away (before a progress bar, a
    summary or an error is printed).  ``tty``: None = whether ``stream`` is a terminal.  ``log_after``: into a
    log, this phase and those before it are left out (those of a run still checking its input, options, weights
    and config: a run refused there leaves its one error line in the log, as on a terminal, where the status is
    cleared)."""

    def __init__(self, stream: TextIO | None = None, *, quiet: bool = False, tty: bool | None = None,
                 interval_s: float = 1.0, prefix: str = "vsr: ", log_after: str | None = None):
        self.stream = sys.stderr if stream is None else stream
        self.quiet = quiet
        self.tty = _is_tty(self.stream) if tty is None else tty
        self.interval_s = interval_s
        self.prefix = prefix
        self.name: str | None = None
        self.detail: Callable[[], str] | None = None
        self.logging = log_after is None  # into a log: whether phases are written yet
        self.log_after = log_after
        self.since = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: interrupt.Thread | None = None
        self._shown = False  # the line is on the terminal now
        self._swapped: list[tuple[object, str, object]] = []  # (owner, attribute, the stream it had)

    def phase(self, name: str, detail: Callable[[], str] | None = None) -> None:
        """The command now does ``name`` (e.g. "building plan"); its clock starts now.  ``detail``: what the line
        shows after the name instead of the seconds, asked at every redraw (e.g. frames done, fps and ETA)."""
        if self.quiet:
            return
        with self._lock:
            if name == self.name:
                return
            self.name, self.since, self.detail = name, time.monotonic(), detail
            if not self.tty:
                if self.logging:
                    self._write(f"{self.prefix}{name}...\n")
                self.logging = self.logging or name == self.log_after
                return
            self._draw()
        if self._ticker is None:
            self._route_others()
            self._stop.clear()
            self._ticker = interrupt.Thread(target=self._tick, name="vsr-status", daemon=True)
            self._ticker.start()

    def close(self) -> None:
        """No status any more: the line is cleared (on a terminal) and the clock stops.  Idempotent."""
        self._stop.set()
        ticker, self._ticker = self._ticker, None
        try:
            if ticker is not None:
                ticker.wait_through()  # ends within moments: the line is cleared after it, even through Ctrl-C
        finally:
            with self._lock:
                if self._shown:
                    self._write(CLEAR)
                    self._shown = False
                self.name = None
            _restore(self._swapped)

    def __enter__(self) -> "StatusLine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _tick(self) -> None:
        while not self._stop.wait(self.interval_s):
            with self._lock:
                if self.name is not None:
                    self._draw()

    def _draw(self) -> None:
        detail = self.detail() if self.detail is not None else f"{time.monotonic() - self.since:.0f} s"
        self._write(f"{CLEAR}{self.prefix}{self.name}... {detail}")
        self._shown = True

    def _route_others(self) -> None:
        """``sys.stderr`` and the log handlers writing to this stream go through :class:`_Clearing` until
        :meth:`close`."""
        self._swapped += _swap_writers(self.stream, _Clearing(self))

    def _clear_for(self, text: str) -> None:
        with self._lock:
            if self._shown:
                self._write(CLEAR)
                self._shown = False
            self._write(text)

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # the terminal went away: the status is not worth an error
            pass


class _Clearing:
    """A stand-in for the status line's stream: every write clears the line first."""

    def __init__(self, status: StatusLine):
        self._status = status

    def write(self, text: str) -> int:
        self._status._clear_for(text)
        return len(text)

    def __getattr__(self, name: str):
        return getattr(self._status.stream, name)


class AboveBars:
    """While tqdm progress bars are drawn on ``stream``: each whole line written to ``sys.stderr`` or to a log
    handler on ``stream`` (a warning, a log line) is printed above the bars (``tqdm.write``), not into the bar's
    own line.  ``start()`` routes them, ``stop()`` (idempotent) puts the streams back."""

    def __init__(self, stream: TextIO | None = None):
        self.stream = sys.stderr if stream is None else stream
        self._swapped: list[tuple[object, str, object]] = []
        self._pending = ""

    def start(self) -> "AboveBars":
        self._swapped += _swap_writers(self.stream, self)
        return self

    def stop(self) -> None:
        _restore(self._swapped)
        if self._pending:
            self._write_line(self._pending)
            self._pending = ""

    def write(self, text: str) -> int:
        *lines, self._pending = (self._pending + text).split("\n")
        for line in lines:
            self._write_line(line)
        return len(text)

    def flush(self) -> None:
        pass  # whole lines only: a part waits for its end

    def _write_line(self, line: str) -> None:
        from tqdm import tqdm

        try:
            tqdm.write(line, file=self.stream)
        except (OSError, ValueError):
            pass

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


def _swap_writers(stream: TextIO, writer) -> list[tuple[object, str, object]]:
    """``sys.stderr`` (where it is ``stream``) and the log handlers writing to ``stream`` now write to ``writer``;
    returns what :func:`_restore` puts back."""
    owners = [(sys, "stderr")] if sys.stderr is stream else []
    owners += [(h, "stream") for h in logging.getLogger().handlers if getattr(h, "stream", None) is stream]
    swapped = [(owner, attr, getattr(owner, attr)) for owner, attr in owners]
    for owner, attr in owners:
        setattr(owner, attr, writer)
    return swapped


def _restore(swapped: list[tuple[object, str, object]]) -> None:
    for owner, attr, stream in reversed(swapped):
        setattr(owner, attr, stream)
    swapped.clear()


def _is_tty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
