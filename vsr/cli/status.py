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
        self._ticker: threading.Thread | None = None
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
            self._ticker = threading.Thread(target=self._tick, name="vsr-status", daemon=True)
            self._ticker.start()

    def close(self) -> None:
        """No status any more: the line is cleared (on a terminal) and the clock stops.  Idempotent."""
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
            self._ticker = None
        with self._lock:
            if self._shown:
                self._write(CLEAR)
                self._shown = False
            self.name = None
        for owner, attr, stream in reversed(self._swapped):
            setattr(owner, attr, stream)
        self._swapped.clear()

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
        clearing = _Clearing(self)
        owners = [(sys, "stderr")] if sys.stderr is self.stream else []
        owners += [(h, "stream") for h in logging.getLogger().handlers if getattr(h, "stream", None) is self.stream]
        for owner, attr in owners:
            self._swapped.append((owner, attr, getattr(owner, attr)))
            setattr(owner, attr, clearing)

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


def _is_tty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
