"""Read a run report (the JSON of ``vsr upscale --report``) back, checked, into :class:`Run`.

Reports written before the timeline existed (no ``format``, ``backend_steps`` or ``timeline``) load too: their
steps have totals only and :attr:`Run.has_timeline` is False.  Anything else is one :class:`InputError` line.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from vsr.errors import InputError
from vsr.report.sample import step_kind
from vsr.report.timer import StageStats

_FORMAT_PREFIX = "vsr-run-report/"


@dataclass(frozen=True)
class StepRow:
    """One backend step as reported (seconds); ``calls`` and the percentiles are None where not recorded."""

    name: str
    kind: str
    total_s: float
    calls: int | None = None
    mean_s: float | None = None
    p50_s: float | None = None
    p95_s: float | None = None


@dataclass(frozen=True)
class Run:
    """A loaded report.  Stage ``intervals`` and ``step_intervals`` are in seconds from the run's start."""

    label: str
    settings: dict
    frames: int
    wall_s: float
    stages: tuple[StageStats, ...]
    steps: tuple[StepRow, ...]
    step_intervals: dict[str, tuple[tuple[float, float], ...]]
    has_timeline: bool

    @property
    def fps(self) -> float:
        return self.frames / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def bottleneck(self) -> StageStats | None:
        return max(self.stages, key=lambda s: s.busy_s, default=None)

    @property
    def infer_busy_s(self) -> float | None:
        """The inference stage's busy time: what the per-call steps divide up."""
        return next((s.busy_s for s in self.stages if s.name == "infer"), None)

    @property
    def call_steps(self) -> tuple[StepRow, ...]:
        """Steps run per inference call (segments, bridge kernels, padding...), not one-off builds."""
        return tuple(s for s in self.steps if s.kind != "build")


def load_run(path: str | Path) -> Run:
    """``path`` -> :class:`Run`; a missing, unreadable, broken or foreign file is an :class:`InputError`."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read run report {path}: {getattr(e, 'strerror', None) or e}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{path} is not JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    return parse_run(data, str(path))


def parse_run(data, label: str) -> Run:
    """A report's decoded JSON -> :class:`Run`; ``label`` names it in errors and in comparisons."""
    if not isinstance(data, dict) or not isinstance(data.get("stages"), list):
        raise InputError(f"{label} is not a vsr run report (no 'stages' list)")
    fmt = data.get("format")
    if fmt is not None and not (isinstance(fmt, str) and fmt.startswith(_FORMAT_PREFIX)):
        raise InputError(f"{label} is a {fmt!r} file, not a vsr run report")
    timeline = data.get("timeline")
    if timeline is not None and not (isinstance(timeline, dict) and isinstance(timeline.get("stages", {}), dict)
                                     and isinstance(timeline.get("steps", {}), dict)):
        raise InputError(f"{label}: 'timeline' is not an object of stages and steps")
    timeline = timeline or {}
    stage_spans = timeline.get("stages", {})
    stages = tuple(_stage(s, i, label, stage_spans) for i, s in enumerate(data["stages"]))
    settings = data.get("settings", {})
    if not isinstance(settings, dict):
        raise InputError(f"{label}: 'settings' is not an object")
    return Run(label=label, settings=settings, frames=int(_number(data, "frames", label)),
               wall_s=_number(data, "wall_s", label), stages=stages, steps=_steps(data, label),
               step_intervals={k: _spans(v, f"{label}: timeline step {k!r}")
                               for k, v in timeline.get("steps", {}).items()},
               has_timeline=bool(timeline))


def _stage(s, i: int, label: str, spans: dict) -> StageStats:
    where = f"{label}: stage {i}"
    if not isinstance(s, dict) or not isinstance(s.get("name"), str):
        raise InputError(f"{where} has no name")
    where = f"{label}: stage {s['name']!r}"
    entry = spans.get(s["name"])
    own = _spans(entry, where) if entry is not None else ()
    seen = entry.get("seen") if isinstance(entry, dict) else None
    return StageStats(s["name"], int(_number(s, "items", where)), _number(s, "busy_s", where),
                      _number(s, "wait_in_s", where), _number(s, "wait_out_s", where), str(s.get("unit", "frames")),
                      own, seen if isinstance(seen, int) and seen >= len(own) else len(own))


def _steps(data: dict, label: str) -> tuple[StepRow, ...]:
    rows = data.get("backend_steps")
    if rows is None:
        totals = data.get("backend_steps_s", {})
        if not isinstance(totals, dict):
            raise InputError(f"{label}: 'backend_steps_s' is not an object")
        return tuple(StepRow(k, step_kind(k), _number(totals, k, label)) for k in totals)
    if not isinstance(rows, list):
        raise InputError(f"{label}: 'backend_steps' is not a list")
    out = []
    for i, r in enumerate(rows):
        if not isinstance(r, dict) or not isinstance(r.get("name"), str):
            raise InputError(f"{label}: backend step {i} has no name")
        where = f"{label}: backend step {r['name']!r}"
        calls = r.get("calls")
        if calls is not None and not isinstance(calls, int):
            raise InputError(f"{where}: 'calls' is not an integer")
        out.append(StepRow(r["name"], str(r.get("kind") or step_kind(r["name"])), _number(r, "total_s", where),
                           calls, *(_number(r, k, where, optional=True) for k in ("mean_s", "p50_s", "p95_s"))))
    return tuple(out)


def _spans(entry, where: str) -> tuple[tuple[float, float], ...]:
    items = entry.get("intervals") if isinstance(entry, dict) else None
    if not isinstance(items, list):
        raise InputError(f"{where}: timeline has no 'intervals' list")
    try:
        spans = tuple((float(a), float(b)) for a, b in items)
    except (TypeError, ValueError):
        raise InputError(f"{where}: timeline intervals must be [start, end] pairs of numbers") from None
    if any(not (math.isfinite(a) and math.isfinite(b)) or b < a for a, b in spans):
        raise InputError(f"{where}: a timeline interval ends before it starts")
    return spans


def _number(d: dict, key: str, where: str, optional: bool = False) -> float | None:
    v = d.get(key)
    if v is None and optional:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise InputError(f"{where}: {key!r} is not a non-negative number ({v!r})")
    return float(v)
