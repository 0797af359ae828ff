"""Generator stages run in threads joined by bounded queues: the machinery of the frame-queue runner.

A stage is a generator function ``run(inbox) -> outputs``: ``inbox`` iterates what the stage before it
yielded (the first stage gets None), and what it yields goes on to the next.  Each stage runs in its own
thread; between two stages a bounded queue holds back a fast stage (back-pressure), so memory stays bounded.
:class:`StagePipeline` owns the threads, the queues, the stop event, cancellation and error capture.
"""

from __future__ import annotations

import gc
import logging
import queue
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Generator, Iterator, Sequence

from vsr import interrupt
from vsr.report import StageStats, StageTimer

log = logging.getLogger(__name__)

POLL_S = 0.1  # how often a waiting stage looks at the stop event
_END = object()

# threads a stop left inside a call (see StagePipeline.wind_down); the list is only ever appended to here
_abandoned: list[interrupt.Thread] = []
_abandoned_lock = threading.Lock()


_running = 0  # pipelines running in this process (worker threads may run several): the last one unfreezes
_running_lock = threading.Lock()


@contextmanager
def _old_objects_frozen():
    """Objects alive now are left out of garbage collection (``gc.freeze``) until the last pipeline ends."""
    global _running
    with _running_lock:
        if _running == 0:
            gc.freeze()
        _running += 1
    try:
        yield
    finally:
        with _running_lock:
            _running -= 1
            if _running == 0:
                gc.unfreeze()


def abandoned_still_running() -> bool:
    """True while a stage thread that a stop left behind is still running.

    A process must not run its normal interpreter shutdown then: the native libraries' global state would be
    torn down under the running call.
    """
    with _abandoned_lock:
        _abandoned[:] = [t for t in _abandoned if t.running()]
        return bool(_abandoned)


class Cancelled(Exception):
    """A stage was told to stop because another failed or the caller was interrupted."""


def _one(item: object) -> int:
    return 1


@dataclass(frozen=True)
class Stage:
    """One stage: ``run(inbox) -> outputs`` and how it is timed and stopped.

    unit: what ``count(item)`` counts for the report; idle_s: when set, ``inbox`` yields None after waiting this
    long for an item (so the stage may act on what it holds); grace_s: None for a stage that touches the
    source or the sink, which a stop always waits for; else how long a stop waits for the stage's current
    call before leaving it behind.
    """

    name: str
    run: Callable[[Iterator | None], Generator]
    unit: str = "frames"
    count: Callable[[object], int] = _one
    idle_s: float | None = None
    grace_s: float | None = None


class _Inbox:
    """A stage's view of the queue before it: an iterator that raises :class:`Cancelled` on a stop."""

    def __init__(self, q: queue.Queue, stop: threading.Event, timer: StageTimer, idle_s: float | None):
        self.q, self.stop, self.timer, self.idle_s = q, stop, timer, idle_s
        self.ended = False

    def __iter__(self) -> _Inbox:
        return self

    def ready(self) -> bool:
        """Whether ``next`` would return at once: an item (or the end) waits in the queue."""
        return self.ended or not self.q.empty()

    def __next__(self):
        if self.ended:
            raise StopIteration
        with self.timer.waiting_in():
            deadline = None if self.idle_s is None else time.perf_counter() + self.idle_s
            while True:
                if self.stop.is_set():
                    raise Cancelled()
                wait = POLL_S if deadline is None else min(POLL_S, deadline - time.perf_counter())
                if wait <= 0:
                    return None
                try:
                    item = self.q.get(timeout=wait)
                except queue.Empty:
                    continue
                if item is _END:
                    self.ended = True
                    raise StopIteration
                return item


class StagePipeline:
    """Runs ``stages`` in order, ``queue_sizes[i]`` items between stage ``i`` and ``i + 1``.

    ``on_output(item)`` (if given) sees each item the last stage yields, in that stage's thread.
    """

    def __init__(self, stages: Sequence[Stage], queue_sizes: Sequence[int],
                 on_output: Callable[[object], None] | None = None):
        if len(queue_sizes) != len(stages) - 1:
            raise ValueError(f"{len(stages)} stages need {len(stages) - 1} queues, not {len(queue_sizes)}")
        self.stages = list(stages)
        self.on_output = on_output
        self.stop = threading.Event()
        self.timers = [StageTimer(s.name, s.unit) for s in self.stages]
        self._queues = [queue.Queue(max(n, 1)) for n in queue_sizes]
        self._errors: list[BaseException] = []
        self._threads: list[interrupt.Thread] = []

    def run(self) -> None:
        """Run every stage to its end.  The first error of a stage stops the others and is raised here once
        they have ended; an exception in the caller's thread (Ctrl-C) stops them, winds down, and goes on.

        The objects alive when the stages start (the interpreter's modules, the backend, the model: ~250k with
        torch and numba) are left out of garbage collection until they end (``gc.freeze``): a collection runs in
        whichever stage thread allocates, and a full one walked them all, 130-160 ms inside a stage."""
        self._threads = [interrupt.Thread(target=self._work, args=(i,), name=f"vsr-{s.name}", daemon=True)
                         for i, s in enumerate(self.stages)]
        with _old_objects_frozen():
            self._run_threads()

    def _run_threads(self) -> None:
        try:
            for t in self._threads:  # a Ctrl-C may come while the last ones start: the first ones already run
                t.start()
            for t in self._threads:  # waits that a signal may interrupt: never Thread.join (vsr.interrupt)
                while not t.wait(POLL_S):
                    interrupt.check()  # a Ctrl-C that a callback in this thread swallowed
        except BaseException:
            self.stop.set()
            self.wind_down()
            raise
        if self._errors:
            raise self._errors[0]

    def stats(self) -> list[StageStats]:
        """Per stage: items, busy time (own work only: the timer leaves out the time spent waiting for input)
        and the time spent waiting on each neighbour."""
        return [timer.stats() for timer in self.timers]

    def snapshot(self) -> tuple[tuple[int, float], ...]:
        """Each stage's (items, busy seconds) now, from any thread (:meth:`StageTimer.snapshot`)."""
        now = time.perf_counter()
        return tuple(timer.snapshot(now) for timer in self.timers)

    def _work(self, i: int) -> None:
        stage, timer, stop = self.stages[i], self.timers[i], self.stop
        if stop.is_set():  # stopped while the threads were being started
            return
        inbox = _Inbox(self._queues[i - 1], stop, timer, stage.idle_s) if i > 0 else None
        outbox = self._queues[i] if i < len(self._queues) else None
        outputs = stage.run(inbox)
        try:
            while True:
                with timer.busy():  # the waits inside ``inbox`` cut the busy span: they are not busy time
                    item = next(outputs, _END)
                if item is _END:
                    break
                timer.count(stage.count(item))
                if outbox is not None:
                    self._put(outbox, item, timer)
                elif self.on_output is not None:
                    self.on_output(item)
                item = None  # a stage holds nothing while it waits for its next input
            if outbox is not None:
                self._put(outbox, _END, timer)
            if inbox is not None:
                # a stage may be done before its input is (the windows of --frames A:B end before the frames
                # the decoder reads past B): take the rest, or the stage before blocks on a full queue forever
                for _ in inbox:
                    pass
        except Cancelled:
            pass
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            self._errors.append(e)
            stop.set()
        finally:
            outputs.close()  # here, in this thread: a stage's own cleanup (closing a decoder) runs before join

    def _put(self, q: queue.Queue, item, timer: StageTimer) -> None:
        with timer.waiting_out():
            while True:
                if self.stop.is_set():
                    raise Cancelled()
                try:
                    q.put(item, timeout=POLL_S)
                    return
                except queue.Full:
                    continue

    def wind_down(self) -> None:
        """After a stop: wait until no stage touches the source or the sink any more.

        A stage without ``grace_s`` finishes its current item within moments (one frame decoded, one tile
        converted, one frame encoded) and then sees the stop, so it is always waited for: only then may the
        caller close the containers.  A stage with ``grace_s`` (inference) may be inside a call that lasts
        minutes on a CPU and touches neither; it gets that long and is otherwise left to finish on its own
        (a daemon thread, recorded for :func:`abandoned_still_running`).  A second Ctrl-C does not cut this
        short: closing a container under a running encoder corrupts the heap.
        """
        start = time.monotonic()
        for stage, t in zip(self.stages, self._threads):
            if stage.grace_s is None:
                _join(t)
        for stage, t in zip(self.stages, self._threads):
            if stage.grace_s is not None and not _join(t, start + stage.grace_s):
                log.info("%s is still inside a call; not waiting for it", stage.name)
                with _abandoned_lock:
                    _abandoned.append(t)


def _join(t: interrupt.Thread, until: float | None = None) -> bool:
    """Wait for ``t`` (until the ``time.monotonic()`` deadline, if given) through Ctrl-C; True if it ended."""
    while True:
        if until is not None and time.monotonic() >= until:
            return not t.running()
        try:
            if t.wait(POLL_S):
                return True
        except KeyboardInterrupt:
            pass
