"""Bounded records of a run: a fixed-size uniform sample of a stream, and per-step call times of a backend.

Both are written once per item or call, on the hot path, so ``add`` is a few attribute updates and at most one
random number: no allocation beyond the bounded list, no lock (each has a single writer).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Iterable

# Enough intervals for a readable timeline of a long run; a JSON report stays under ~1 MB.
DEFAULT_INTERVALS = 4096
# Enough per-call samples for a stable p95.
DEFAULT_SAMPLES = 1024


# Steps a backend runs once per model or frame size (export, plan build, session load), not per call.
_ONE_OFF = {"export", "session", "warmup"}


def step_kind(name: str) -> str:
    """What a backend step is, from its name: ``segment`` (a subgraph), ``bridge`` (one of vsr's kernels),
    ``build`` (one-off: export, plan, load), or ``other`` (padding, cropping, a whole-model run)."""
    if name.startswith("build:") or name in _ONE_OFF:
        return "build"
    if name.startswith("segment"):
        return "segment"
    if name.startswith("bridge"):
        return "bridge"
    return "other"


class Reservoir:
    """At most ``size`` items of a stream, each item seen kept with the same chance (Vitter's algorithm R).

    ``seen`` counts every item offered; ``items`` holds the kept ones (in no particular order once full).
    The generator is seeded, so a run's kept sample depends only on its stream.
    """

    __slots__ = ("size", "seen", "items", "_random")

    def __init__(self, size: int, seed: int = 0):
        self.size = size
        self.seen = 0
        self.items: list = []
        self._random = random.Random(seed).random

    def add(self, item) -> None:
        self.seen += 1
        if len(self.items) < self.size:
            self.items.append(item)
            return
        j = int(self._random() * self.seen)
        if j < self.size:
            self.items[j] = item


def percentile(values: Iterable[float], q: float) -> float | None:
    """The ``q``-th percentile (0..100) of ``values``, interpolating between ranks; None for no values."""
    v = sorted(values)
    if not v:
        return None
    pos = (len(v) - 1) * min(100.0, max(0.0, q)) / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


@dataclass(frozen=True)
class StepStats:
    """One backend step's calls (seconds): exact ``calls`` and ``total_s``, percentiles from a bounded sample.

    ``intervals`` are (start, end) ``time.perf_counter`` pairs of a bounded sample of calls (the timeline);
    ``intervals_seen`` the number of calls they were sampled from.
    """

    name: str
    calls: int
    total_s: float
    samples: tuple[float, ...] = ()
    intervals: tuple[tuple[float, float], ...] = ()
    intervals_seen: int = 0

    @property
    def mean_s(self) -> float | None:
        return self.total_s / self.calls if self.calls else None

    @property
    def p50_s(self) -> float | None:
        return percentile(self.samples, 50)

    @property
    def p95_s(self) -> float | None:
        return percentile(self.samples, 95)


class StepTimes:
    """Accumulates a backend's per-step call times; the thread that runs the steps is the only writer.

    ``add(name, start, end)`` with ``time.perf_counter`` values, once per call.  ``totals()`` is the
    ``{step: seconds}`` mapping a backend's ``timings()`` returns; ``stats()`` adds calls, percentiles and a
    bounded timeline per step.
    """

    def __init__(self, names: Iterable[str] = (), samples: int = DEFAULT_SAMPLES,
                 intervals: int = DEFAULT_INTERVALS):
        self._samples = samples
        self._intervals = intervals
        self._steps: dict[str, list] = {}
        for name in names:
            self._entry(name)

    def _entry(self, name: str) -> list:
        # [calls, total, duration sample, interval sample]; a list, not an object, to keep add() cheap
        entry = self._steps[name] = [0, 0.0, Reservoir(self._samples, seed=len(self._steps)),
                                     Reservoir(self._intervals, seed=len(self._steps))]
        return entry

    def add(self, name: str, start: float, end: float) -> None:
        entry = self._steps.get(name) or self._entry(name)
        entry[0] += 1
        entry[1] += end - start
        entry[2].add(end - start)
        entry[3].add((start, end))

    def totals(self) -> dict[str, float]:
        """Seconds per step, in the order the steps were first named."""
        return {name: e[1] for name, e in self._steps.items()}

    def stats(self) -> dict[str, StepStats]:
        return {name: StepStats(name, e[0], e[1], tuple(e[2].items), tuple(sorted(e[3].items)), e[3].seen)
                for name, e in self._steps.items()}


def merge_step_stats(parts: Iterable[dict[str, StepStats]], samples: int = DEFAULT_SAMPLES,
                     intervals: int = DEFAULT_INTERVALS) -> dict[str, StepStats]:
    """Sums several recorders' stats by step name (e.g. one executor per frame-size bucket).

    Calls and totals add up exactly; the samples are pooled and thinned evenly back to their bounds.
    """
    out: dict[str, StepStats] = {}
    for part in parts:
        for name, s in part.items():
            o = out.get(name)
            if o is None:
                out[name] = s
                continue
            out[name] = StepStats(name, o.calls + s.calls, o.total_s + s.total_s,
                                  _thin(o.samples + s.samples, samples),
                                  tuple(sorted(_thin(o.intervals + s.intervals, intervals))),
                                  o.intervals_seen + s.intervals_seen)
    return out


def _thin(items: tuple, size: int) -> tuple:
    if len(items) <= size:
        return items
    step = len(items) / size
    return tuple(items[int(i * step)] for i in range(size))
