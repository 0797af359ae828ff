"""A stop asked for by a signal, recorded where a raised KeyboardInterrupt can be lost.

Ctrl-C, SIGTERM and SIGHUP raise KeyboardInterrupt in the main thread, wherever it is.  Inside a callback whose
exceptions Python prints and drops (a ctypes callback such as llvmlite's object cache during a numba compile, a
``__del__``, a weakref callback) that exception is lost, and a run would go on to publish its output and exit 0.
:func:`handled` installs a handler that also records the stop; the pipeline's main loop and every commit of an
output call :func:`check`, which raises it again.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["SIGNALS", "check", "handled", "request", "requested"]

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_requested = threading.Event()


def request() -> None:
    """Record a stop (from a signal handler that raises KeyboardInterrupt itself)."""
    _requested.set()


def requested() -> bool:
    return _requested.is_set()


def check() -> None:
    """Raise KeyboardInterrupt if a stop was asked for: before anything is published, and where the main
    thread waits."""
    if _requested.is_set():
        raise KeyboardInterrupt


def _raise_stop(signum, frame):
    _requested.set()
    raise KeyboardInterrupt


@contextmanager
def handled(signals=SIGNALS) -> Iterator[None]:
    """While inside: each of ``signals`` records a stop and raises KeyboardInterrupt (SIGTERM and SIGHUP take
    Ctrl-C's path, so a temporary output is removed).  A signal ignored when vsr started stays ignored (``nohup``
    ignores SIGHUP, a shell's background job SIGINT).  On the way out the handlers and the record are restored."""
    previous = {}
    for s in signals:
        if signal.getsignal(s) is not signal.SIG_IGN:
            previous[s] = signal.signal(s, _raise_stop)
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        _requested.clear()
