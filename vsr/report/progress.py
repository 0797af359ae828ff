"""Progress of a long run (frames upscaled, training steps, bytes fetched): on a terminal a tqdm bar redrawn in
place; into a file or a pipe (``vsr upscale ... 2> run.log``) plain lines at a modest rate, so that a log holds
no ``\\r`` redraws, and a last line at the end.  :func:`progress_bar` picks one; both take ``update``,
``set_postfix``, ``write`` and ``close`` and are context managers."""

from __future__ import annotations

import sys
import time
from typing import TextIO

LINE_EVERY_S = 30.0  # into a log: a line at most this often (a day-long run: ~3,000 lines)


def progress_bar(*, total: float | None, desc: str, unit: str, initial: float = 0, disable: bool = False,
                 stream: TextIO | None = None, every_s: float = LINE_EVERY_S, unit_scale: bool = False, **tqdm_options):
    """A tqdm bar on ``stream`` (standard error) where it is a terminal, else :class:`LineProgress`; ``disable``:
    nothing at all.  ``tqdm_options`` go to the bar only (``mininterval``, ``unit_divisor``...)."""
    stream = sys.stderr if stream is None else stream
    if not disable and _is_tty(stream):
        from tqdm import tqdm

        return tqdm(total=total, initial=initial, desc=desc, unit=unit, file=stream, dynamic_ncols=True,
                    unit_scale=unit_scale, **tqdm_options)
    return LineProgress(total=total, desc=desc, unit=unit, initial=initial, disable=disable, stream=stream,
                        every_s=every_s, unit_scale=unit_scale)


class LineProgress:
    """tqdm's interface, written as whole lines: ``upscale: 120/480 frame (25%), 3.21 frame/s, ETA 01:52`` at
    most every ``every_s`` seconds, and once more at :meth:`close` where something was done since the last."""

    def __init__(self, *, total: float | None, desc: str, unit: str, initial: float = 0, disable: bool = False,
                 stream: TextIO | None = None, every_s: float = LINE_EVERY_S, unit_scale: bool = False,
                 clock=time.monotonic):
        self.total, self.desc, self.unit, self.n = total, desc, unit, initial
        self.disable, self.stream, self.every_s, self.unit_scale = disable, stream, every_s, unit_scale
        self.clock = clock
        self.start = self.last = clock()
        self.initial = self.said = initial
        self.postfix = ""
        self.closed = False

    def update(self, n: float = 1) -> None:
        self.n += n
        if not self.disable and self.clock() - self.last >= self.every_s:
            self._say()

    def set_postfix(self, refresh: bool = True, **values) -> None:
        self.postfix = ", ".join(f"{k}={v}" for k, v in values.items())

    def write(self, line: str) -> None:
        if not self.disable:
            self._print(line)

    def close(self) -> None:
        if not self.closed and not self.disable and self.n != self.said:
            self._say()
        self.closed = True

    def __enter__(self) -> "LineProgress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def line(self) -> str:
        """What the next line says."""
        from tqdm import tqdm

        def amount(x: float) -> str:
            return tqdm.format_sizeof(x, divisor=1024) if self.unit_scale else f"{x:g}"

        spent = self.clock() - self.start
        rate = (self.n - self.initial) / spent if spent > 0 else None
        parts = [f"{amount(self.n)}/{amount(self.total)} {self.unit}" if self.total
                 else f"{amount(self.n)} {self.unit}"]
        if self.total:
            parts[0] += f" ({100 * self.n / self.total:.0f}%)"
        if rate:
            parts.append(f"{amount(rate) if self.unit_scale else f'{rate:.3g}'} {self.unit}/s")
            if self.total and self.n < self.total:
                parts.append(f"ETA {tqdm.format_interval((self.total - self.n) / rate)}")
        if self.postfix:
            parts.append(self.postfix)
        return f"{self.desc}: " + ", ".join(parts)

    def _say(self) -> None:
        self._print(self.line())
        self.last, self.said = self.clock(), self.n

    def _print(self, line: str) -> None:
        stream = sys.stderr if self.stream is None else self.stream
        try:
            print(line, file=stream, flush=True)
        except (OSError, ValueError):  # its reader gone (a closed pipe): the run goes on without its lines
            pass


def _is_tty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
