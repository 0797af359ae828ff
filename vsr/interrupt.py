"""A stop asked for by a signal, recorded where a raised KeyboardInterrupt can be lost.

Ctrl-C, SIGTERM and SIGHUP raise KeyboardInterrupt in the main thread, wherever it is.  Inside a callback whose
exceptions Python prints and drops (a ctypes callback such as llvmlite's object cache during a numba compile, a
``__del__``, a weakref callback) that exception is lost, and a run would go on to publish its output and exit 0.
:func:`handled` installs a handler that also records the stop; the pipeline's main loop and every commit of an
output call :func:`check`, which raises it again.  A signal that comes while the main thread imports a module is
not raised there: a native module's initialisation that runs Python code (onnx's nanobind enums) turns the
KeyboardInterrupt into a C++ exception that nothing catches (``terminate called``, SIGABRT), and an import lock's
callback drops it; the same signal comes again a moment later, until the import is over.  Inside
:func:`deferred` (torch's exporter, where Python runs under C++ that cannot carry an exception through: "terminate
called after throwing an instance of 'python_error'", SIGABRT) a stop is recorded and raised on the way out.

:class:`Thread` is a thread that a stop can wait for: on CPython 3.11 and 3.12 a ``Thread.join`` that a signal
interrupts marks the thread it waited for as ended while it still runs (python/cpython#90882), and a stop that
then closed the decoder under the decode thread's own close crashed the process (``free(): invalid pointer``).
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["SIGNALS", "Thread", "check", "deferred", "handled", "held", "request", "requested"]

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
AGAIN_S = 0.05  # a signal that came during an import comes again this much later
_requested = threading.Event()
_again: list[threading.Timer] = []
_deferring: list[list] = []  # the main thread's deferred() sections: [what, said]
_once = [False]  # handled(once=True): after one KeyboardInterrupt is raised, later signals are only recorded
_raised = threading.Event()


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
    if _once[0] and _raised.is_set():
        return  # a second stop must not cut the first one's cleanup short
    if _deferring:
        section = _deferring[-1]
        if not section[1]:  # the stop takes a while: said once (a status line clears itself for it)
            section[1] = True
            print(f"vsr: stopping once {section[0]} ends", file=sys.stderr, flush=True)
        return  # raised as the deferred section ends
    if _importing(frame):
        timer = threading.Timer(AGAIN_S, signal.pthread_kill, (threading.main_thread().ident, signum))
        timer.daemon = True
        _again[:] = [timer]
        timer.start()
        return
    _raised.set()
    raise KeyboardInterrupt


def _importing(frame) -> bool:
    """Whether ``frame`` (where the main thread was when a signal came) is inside an import."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


@contextmanager
def deferred(what: str) -> Iterator[None]:
    """While inside, a stop signal is recorded, not raised (``vsr: stopping once WHAT ends``); it is raised on
    the way out (:func:`check`).  For a call that runs Python code under native code that cannot carry an
    exception through (torch's exporter).  In another thread, which no signal handler interrupts, it does
    nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _deferring.append([what, False])
    try:
        yield
    finally:
        _deferring.pop()
    check()


@contextmanager
def held(signals=SIGNALS) -> Iterator[None]:
    """Hold ``signals`` back from this thread while inside (a few system calls that must not be cut in two); one
    that came meanwhile is handled on the way out."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


@contextmanager
def handled(signals=SIGNALS, then=None, once: bool = False) -> Iterator[None]:
    """While inside: each of ``signals`` records a stop and raises KeyboardInterrupt (SIGTERM and SIGHUP take
    Ctrl-C's path, so a temporary output is removed).  A signal ignored when vsr started stays ignored (``nohup``
    ignores SIGHUP, a shell's background job SIGINT).  On the way out the handlers and the record are restored,
    or the signals set to ``then`` (``signal.SIG_IGN``: the command is over).  ``once``: after the first
    KeyboardInterrupt, later signals are recorded only (a jobs worker gets Ctrl-C from the terminal and from its
    parent: the second must not cut short the first one's release of its claim).  Outside the main thread (a library
    caller's worker), where no handler can be set, it does nothing."""
    previous = {}
    main = threading.current_thread() is threading.main_thread()
    _once[0] = once and main
    for s in signals if main else ():
        if signal.getsignal(s) is not signal.SIG_IGN:
            previous[s] = signal.signal(s, _raise_stop)
    hook = sys.unraisablehook
    if main:
        sys.unraisablehook = _quiet_stops(hook)
    try:
        yield
    finally:
        for timer in _again:
            timer.cancel()  # (its signal must not reach the handler restored below)
        _again.clear()
        for s, h in previous.items():
            signal.signal(s, h if then is None else then)
        sys.unraisablehook = hook
        _requested.clear()
        _raised.clear()
        _once[0] = False


def _quiet_stops(hook):
    """``hook`` (``sys.unraisablehook``), silent for the KeyboardInterrupt of a recorded stop that Python drops
    in a callback ("Exception ignored on calling ctypes callback function", a traceback on the user's
    terminal): the stop itself is kept (:func:`check`), and the run says ``vsr: interrupted`` once."""
    def quiet(unraisable):
        if unraisable.exc_type is not None and issubclass(unraisable.exc_type, KeyboardInterrupt) and \
                _requested.is_set():
            return
        hook(unraisable)
    return quiet


START_S = 2.0  # how long a thread whose start a Ctrl-C cut short has to show that it exists


class Thread(threading.Thread):
    """A ``threading.Thread`` whose end is :attr:`finished`, an Event set as its ``run`` returns.

    Wait for it with :meth:`wait` (or ``finished.wait``) and ask :meth:`running`, never ``join``/``is_alive``
    where a signal can interrupt the wait (see the module's note).  :meth:`start` holds this module's signals
    back from this thread while it launches the new one, which takes them unblocked, as the programs it may start
    must; whether it was launched is what the new thread itself says (:attr:`launched`).  A subclass passes ``target``;
    it does not override ``run``, which sets :attr:`finished`.
    """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "run" in vars(cls):
            raise TypeError(f"{cls.__name__} overrides run(): pass target= instead (run sets finished)")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.finished = threading.Event()
        self._asked = False  # start() was called
        self._shown = threading.Event()  # set by the thread itself, first thing

    def start(self) -> None:
        self._asked = True
        with held():  # a signal that comes meanwhile is handled once the thread is launched
            super().start()

    @property
    def launched(self) -> bool:
        """Whether the thread runs or ran, as the thread itself says: a Ctrl-C can cut :meth:`start` short after
        the thread exists (held() keeps the signal from this thread, but another thread may take it, and the
        KeyboardInterrupt comes here at any instruction; seen in a full test session).  Where start() was cut
        short, the thread is given :data:`START_S` to show itself."""
        if self._asked and not self._shown.is_set() and not self._shown.wait(START_S):
            self._asked = False  # never launched
        return self._asked

    def run(self) -> None:
        self._shown.set()
        try:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
            super().run()
        finally:
            self.finished.set()

    def running(self) -> bool:
        return self.launched and not self.finished.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the thread ends (or ``timeout`` seconds); True if it has, or never launched."""
        return not self.launched or self.finished.wait(timeout)

    def wait_through(self) -> None:
        """Wait until the thread ends, through Ctrl-C (for a thread that ends within moments once told to): an
        interrupt that came meanwhile is raised after."""
        interrupted = False
        while True:
            try:
                if self.wait():
                    break
            except KeyboardInterrupt:
                interrupted = True
        if interrupted:
            raise KeyboardInterrupt
