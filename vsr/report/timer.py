"""Per-stage timing of a streaming run: items, busy time, and time spent waiting on neighbours.

A stage is *busy* while it does its own work, *waiting in* while it waits for its upstream neighbour to
hand it something, and *waiting out* while its downstream neighbour has no room (back-pressure).  The
stage with the most busy time is the bottleneck; the others should spend their spare time waiting.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class StageStats:
    """A finished stage's numbers (seconds)."""

    name: str
    items: int
    busy_s: float
    wait_in_s: float
    wait_out_s: float
    unit: str = "frames"

    @property
    def throughput(self) -> float:
        """Items per busy second: how fast this stage would run if it never waited."""
        return self.items / self.busy_s if self.busy_s > 0 else float("inf")


class StageTimer:
    """Accumulates one stage's times; the stage's own thread is the only writer.

    Use ``with timer.busy(): ...``, ``with timer.waiting_in(): ...``, ``with timer.waiting_out(): ...``
    and ``timer.count(n)``.
    """

    def __init__(self, name: str, unit: str = "frames"):
        self.name = name
        self.unit = unit
        self.items = 0
        self.busy_s = 0.0
        self.wait_in_s = 0.0
        self.wait_out_s = 0.0
        self._lock = threading.Lock()

    @contextmanager
    def busy(self):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self._add("busy_s", time.perf_counter() - t0)

    @contextmanager
    def waiting_in(self):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self._add("wait_in_s", time.perf_counter() - t0)

    @contextmanager
    def waiting_out(self):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self._add("wait_out_s", time.perf_counter() - t0)

    def count(self, n: int = 1) -> None:
        with self._lock:
            self.items += n

    def _add(self, field: str, dt: float) -> None:
        with self._lock:
            setattr(self, field, getattr(self, field) + dt)

    def stats(self) -> StageStats:
        with self._lock:
            return StageStats(self.name, self.items, self.busy_s, self.wait_in_s, self.wait_out_s, self.unit)


@dataclass
class RunReport:
    """Everything a run measured, with the settings it ran under.  ``steps`` are a backend's internal
    step timings (seconds per step, e.g. per subgraph), merged in as they are."""

    stages: list[StageStats]
    settings: dict
    wall_s: float
    frames: int
    steps: dict[str, float]

    @property
    def fps(self) -> float:
        return self.frames / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def bottleneck(self) -> StageStats | None:
        return max(self.stages, key=lambda s: s.busy_s, default=None)

    def to_dict(self) -> dict:
        b = self.bottleneck
        return {
            "settings": self.settings,
            "frames": self.frames,
            "wall_s": round(self.wall_s, 6),
            "fps": round(self.fps, 4),
            "bottleneck": b.name if b else None,
            "stages": [dict(asdict(s), throughput=(round(s.throughput, 4) if s.busy_s > 0 else None))
                       for s in self.stages],
            "backend_steps_s": {k: round(v, 6) for k, v in self.steps.items()},
        }

    def table(self) -> str:
        """A short human table; the bottleneck is marked with ``*``."""
        b = self.bottleneck
        lines = [f"{'stage':<10} {'items':>7} {'busy s':>8} {'wait in':>8} {'wait out':>8} {'items/s':>9}"]
        for s in self.stages:
            tp = f"{s.throughput:9.2f}" if s.busy_s > 0 else f"{'-':>9}"
            mark = " *" if s is b else ""
            lines.append(f"{s.name:<10} {s.items:>7} {s.busy_s:8.2f} {s.wait_in_s:8.2f} {s.wait_out_s:8.2f} "
                         f"{tp}{mark}")
        lines.append(f"{self.frames} frames in {self.wall_s:.2f} s = {self.fps:.2f} fps; "
                     f"bottleneck: {b.name if b else '-'}")
        return "\n".join(lines)
