"""Per-stage timing of a streaming run: items, busy time, and time spent waiting on neighbours.

A stage is *busy* while it does its own work, *waiting in* while it waits for its upstream neighbour to
hand it something, and *waiting out* while its downstream neighbour has no room (back-pressure).  The
stage with the most busy time is the bottleneck; the others should spend their spare time waiting.

Each stage also keeps a bounded, uniform sample of its busy intervals (the run's timeline), at most
``intervals`` per stage, so recording costs the same few hundred nanoseconds per item however long the run.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass

from vsr.report.sample import DEFAULT_INTERVALS, Reservoir, StepStats, step_kind


@dataclass(frozen=True)
class StageStats:
    """A finished stage's numbers (seconds).

    ``intervals``: (start, end) ``time.perf_counter`` pairs of a bounded sample of busy spans, sorted by start;
    ``intervals_seen``: how many busy spans there were in all.
    """

    name: str
    items: int
    busy_s: float
    wait_in_s: float
    wait_out_s: float
    unit: str = "frames"
    intervals: tuple[tuple[float, float], ...] = ()
    intervals_seen: int = 0

    @property
    def throughput(self) -> float:
        """Items per busy second: how fast this stage would run if it never waited."""
        return self.items / self.busy_s if self.busy_s > 0 else float("inf")


class StageTimer:
    """Accumulates one stage's times; the stage's own thread is the only writer.

    Use ``with timer.busy(): ...``, ``with timer.waiting_in(): ...``, ``with timer.waiting_out(): ...``
    and ``timer.count(n)``.  ``intervals``: how many busy spans to keep for the timeline (0: none).  A wait for
    input inside ``busy()`` (a generator stage pulling its next item) is not busy time: it cuts the busy span in
    two, so the busy time and the timeline's spans are the stage's own work only.
    """

    def __init__(self, name: str, unit: str = "frames", intervals: int = DEFAULT_INTERVALS):
        self.name = name
        self.unit = unit
        self.items = 0
        self.busy_s = 0.0
        self.wait_in_s = 0.0
        self.wait_out_s = 0.0
        self._spans = Reservoir(intervals)
        self._lock = threading.Lock()
        self._busy_from: float | None = None  # the start of the busy span in progress

    @contextmanager
    def busy(self):
        self._busy_from = time.perf_counter()
        try:
            yield
        finally:
            self._end_span(time.perf_counter())
            self._busy_from = None

    @contextmanager
    def waiting_in(self):
        t0 = time.perf_counter()
        busy = self._busy_from is not None
        if busy:
            self._end_span(t0)
        try:
            yield
        finally:
            t1 = time.perf_counter()
            self._add("wait_in_s", t1 - t0)
            if busy:
                self._busy_from = t1

    def _end_span(self, t1: float) -> None:
        t0 = self._busy_from
        if t0 is None or t1 <= t0:
            return
        with self._lock:
            self.busy_s += t1 - t0
            self._spans.add((t0, t1))

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

    def snapshot(self, now: float) -> tuple[int, float]:
        """(items, busy seconds) as of ``now``, the busy span in progress counted to ``now``: what another thread
        reads to split a run's numbers at a moment (the report's steady rate)."""
        with self._lock:
            started = self._busy_from
            return self.items, self.busy_s + (now - started if started is not None and now > started else 0.0)

    def _add(self, field: str, dt: float) -> None:
        with self._lock:
            setattr(self, field, getattr(self, field) + dt)

    def stats(self) -> StageStats:
        with self._lock:
            return StageStats(self.name, self.items, self.busy_s, self.wait_in_s, self.wait_out_s, self.unit,
                              tuple(sorted(self._spans.items)), self._spans.seen)


# Written into every report; a reader that finds another value (or none and no stages) is given something else.
REPORT_FORMAT = "vsr-run-report/2"


@dataclass
class RunReport:
    """Everything a run measured, with the settings it ran under.  ``steps`` are a backend's internal
    step timings (seconds per step, e.g. per subgraph), merged in as they are.

    ``started``: ``time.perf_counter()`` when the run began, the timeline's zero (default: the first busy
    span); ``step_stats``: per-call records of the steps (:class:`vsr.report.sample.StepTimes`), when the
    backend keeps them.
    """

    stages: list[StageStats]
    settings: dict
    wall_s: float
    frames: int
    steps: dict[str, float]
    started: float | None = None
    step_stats: dict[str, StepStats] | None = None
    written_at: list[float] | None = None
    marks: list[tuple[tuple[int, float], ...]] | None = None

    STEADY_AFTER = 60  # frames; a shorter run: a quarter of it (see ``steady``)

    @property
    def fps(self) -> float | None:
        """Frames per second of wall time; None where the wall time is 0 as the report records it (microseconds):
        not known, as ``vsr report`` says of it, never ``0.00 fps`` or a rate of millions."""
        return self.frames / self.wall_s if round(self.wall_s, 6) > 0 else None

    @property
    def steady(self) -> dict | None:
        """The frame rate once the pipeline is full: frames after the first ``k`` (60, or a quarter of a shorter
        run) over the time from the ``k``-th frame's write to the run's end (the encoder's flush included); None
        without per-frame write times (``written_at``, ``time.perf_counter()`` of each) or under 8 frames.

        With ``marks`` (each stage's (items, busy seconds) when each of the first frames was written), also each
        stage's items, busy seconds and own rate over that same span: a stage's rate over the whole run counts
        its start too, where an encoder that buffers (x264's lookahead and frame threads) takes its first frames
        without blocking, its work then done while the stage waits for input -- its whole-run rate looks
        faster than the stage is."""
        times, n = self.written_at or [], len(self.written_at or [])
        if n < 8 or self.started is None:
            return None
        k = min(self.STEADY_AFTER, n // 4)
        span = self.started + self.wall_s - times[k - 1]
        out = {"after_frames": k, "fps": round((n - k) / span, 4) if span > 0 else None}
        if self.marks is not None and len(self.marks) >= k and len(self.marks[k - 1]) == len(self.stages):
            stages = {}
            for s, (items, busy) in zip(self.stages, self.marks[k - 1]):
                d_items, d_busy = s.items - items, max(s.busy_s - busy, 0.0)
                stages[s.name] = {"items": d_items, "busy_s": round(d_busy, 6),
                                  "throughput": round(d_items / d_busy, 4) if d_busy > 0 else None}
            out["span_s"] = round(span, 6)
            out["stages"] = stages
        return out

    @property
    def bottleneck(self) -> StageStats | None:
        return max(self.stages, key=lambda s: s.busy_s, default=None)

    def to_dict(self) -> dict:
        """The JSON of ``--report`` (``format`` ``vsr-run-report/2``)::

            settings, frames, wall_s, fps, bottleneck,
            steady: {after_frames, fps, span_s, stages: {name: {items, busy_s, throughput}}} (None: too short),
            stages: [{name, items, busy_s, wait_in_s, wait_out_s, unit, throughput}],
            backend_steps_s: {step: total seconds},
            backend_steps: [{name, kind, total_s, calls, mean_s, p50_s, p95_s}]   (None where not recorded),
            timeline: {origin: "run start", unit: "s",
                       stages: {name: {seen, intervals: [[start, end], ...]}},
                       steps: {name: {seen, intervals: [...]}}}                 (None when nothing was kept)
        """
        b = self.bottleneck
        return {
            "format": REPORT_FORMAT,
            "settings": self.settings,
            "frames": self.frames,
            "wall_s": round(self.wall_s, 6),
            "fps": round(self.fps, 4) if self.fps is not None else None,
            "steady": self.steady,
            "bottleneck": b.name if b else None,
            "stages": [{"name": s.name, "items": s.items, "busy_s": s.busy_s, "wait_in_s": s.wait_in_s,
                        "wait_out_s": s.wait_out_s, "unit": s.unit,
                        "throughput": round(s.throughput, 4) if s.busy_s > 0 else None} for s in self.stages],
            "backend_steps_s": {k: round(v, 6) for k, v in self.steps.items()},
            "backend_steps": self._steps_list(),
            "timeline": self._timeline(),
        }

    def _steps_list(self) -> list[dict]:
        stats = self.step_stats or {}
        out = []
        for name in list(self.steps) + [n for n in stats if n not in self.steps]:
            st = stats.get(name)
            total = st.total_s if st is not None else self.steps[name]
            row = {"name": name, "kind": step_kind(name), "total_s": round(total, 6), "calls": None,
                   "mean_s": None, "p50_s": None, "p95_s": None}
            if st is not None:
                row.update(calls=st.calls, mean_s=_r(st.mean_s), p50_s=_r(st.p50_s), p95_s=_r(st.p95_s))
            out.append(row)
        return out

    def _timeline(self) -> dict | None:
        starts = [s.intervals[0][0] for s in self.stages if s.intervals]
        if not starts:
            return None
        origin = self.started if self.started is not None else min(starts)

        def spans(intervals, seen):
            return {"seen": seen, "intervals": [[round(a - origin, 6), round(z - origin, 6)] for a, z in intervals]}

        return {"origin": "run start", "unit": "s",
                "stages": {s.name: spans(s.intervals, s.intervals_seen) for s in self.stages},
                "steps": {n: spans(st.intervals, st.intervals_seen) for n, st in (self.step_stats or {}).items()
                          if st.intervals}}

    def table(self) -> str:
        """A short human table; the bottleneck is marked with ``*``."""
        b = self.bottleneck
        lines = [f"{'stage':<10} {'items':>7} {'busy s':>8} {'wait in':>8} {'wait out':>8} {'items/s':>9}"]
        for s in self.stages:
            tp = f"{s.throughput:9.2f}" if s.busy_s > 0 else f"{'-':>9}"
            mark = " *" if s is b else ""
            lines.append(f"{s.name:<10} {s.items:>7} {s.busy_s:8.2f} {s.wait_in_s:8.2f} {s.wait_out_s:8.2f} "
                         f"{tp}{mark}")
        rate = f" = {self.fps:.2f} fps" if self.fps is not None else ", fps not known (no wall time)"
        lines.append(f"{self.frames} frames in {self.wall_s:.2f} s{rate}; bottleneck: {b.name if b else '-'}")
        extra = [line for line in (self.memory_line(), self.encoder_line()) if line]
        return "\n".join(lines + extra)

    def memory_line(self) -> str | None:
        """``memory: budget 8192 MB (default: half of this machine's 16384 MB), whole frames, each frame's
        features kept``: the run's memory settings (the plan in ``settings``); None without a plan."""
        plan = self.settings.get("memory_plan")
        if not isinstance(plan, dict) or "budget_mb" not in plan:
            return None
        why = f" ({plan['budget_from']})" if plan.get("budget_from") else " (--memory-budget)"
        tile = plan.get("tile")
        tiles = self.settings.get("tiles_per_frame")
        parts = [f"budget {plan['budget_mb']:.0f} MB{why}",
                 f"tiles of {tile[0]}x{tile[1]} ({tiles} a frame)" if tile and tiles else "whole frames"]
        if plan.get("features"):
            parts.append("each frame's features kept" if plan["features"] == "kept" else "features per window")
        return "memory: " + ", ".join(parts)

    def encoder_line(self) -> str | None:
        """``encoder: libx264, crf 23, preset medium, yuv420p``: what the output was written with, the encoder's
        own defaults included (settings ``codec``, ``crf``, ``q`` (a fixed quantiser), ``preset``, ``pix_fmt``);
        an NVENC encoder's ``crf`` named ``cq``, the option it ran with (``encoder: h264_nvenc, cq 23, preset p4``:
        its scale is not x264's); the output's size where ``--scale`` set it, the Dolby Vision profile it carries;
        None without a codec."""
        s = self.settings
        if not s.get("codec"):
            return None
        label = {"crf": "cq"} if str(s["codec"]).endswith("_nvenc") else {}  # NVENC's constant quality is its own
        parts = [str(s["codec"])] + [f"{label.get(k, k)} {s[k]:g}" if isinstance(s[k], float) else
                                     f"{label.get(k, k)} {s[k]}"
                                     for k in ("crf", "q", "preset") if s.get(k) is not None]
        scaled = [f"{s.get('size')} (--scale {s['scale']})"] if s.get("scale") not in (None, "4") else []
        scaled += [f"Dolby Vision {s['dolby_vision']}"] if s.get("dolby_vision") else []
        return "encoder: " + ", ".join(parts + ([str(s["pix_fmt"])] if s.get("pix_fmt") else []) + scaled)


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 6)
