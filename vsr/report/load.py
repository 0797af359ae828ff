"""Read a run report (the JSON of ``vsr upscale --report``) back, checked, into :class:`Run`.

Reports written before the timeline existed (no ``format``, ``backend_steps`` or ``timeline``) load too: their
steps have totals only and :attr:`Run.has_timeline` is False.  A report of another format version, or anything
else, is one :class:`InputError` line.  A report is bounded before anything renders it: at most
:data:`MAX_REPORT_BYTES`, nested at most :data:`MAX_DEPTH` deep, every number finite and within
:data:`MAX_NUMBER` (no ``10**400`` frames, no timeline from -1e308 to 1e308).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

from vsr.errors import InputError, printable
from vsr.files import read_small_text
from vsr.report.sample import step_kind
from vsr.report.timer import REPORT_FORMAT, StageStats

_FORMAT_PREFIX = "vsr-run-report/"
KNOWN_FORMATS = (REPORT_FORMAT,)  # and none: the reports from before the format was written into them
MAX_REPORT_BYTES = 64 << 20  # a real report is kilobytes: its timeline is a bounded sample
MAX_DEPTH = 32  # a real report nests 6 deep
MAX_NUMBER = 1e15  # seconds, frames, bytes: a real report's largest numbers are far below
MAX_ITEMS = 4_000_000


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
    def fps(self) -> float | None:
        """Frames per second of wall time; None where the report's wall time is 0 (a hand-edited report, a run
        of no frames): not known, never a 0 fps."""
        return self.frames / self.wall_s if self.wall_s > 0 else None

    @property
    def bottleneck(self) -> StageStats | None:
        """The busiest stage; None where no stage was busy at all (a run of no frames: no stage held it up)."""
        b = max(self.stages, key=lambda s: s.busy_s, default=None)
        return b if b is not None and b.busy_s > 0 else None

    @property
    def infer_busy_s(self) -> float | None:
        """The inference stage's busy time: what the per-call steps divide up."""
        return next((s.busy_s for s in self.stages if s.name == "infer"), None)

    @property
    def call_steps(self) -> tuple[StepRow, ...]:
        """Steps run per inference call (segments, bridge kernels, padding...), not one-off builds."""
        return tuple(s for s in self.steps if s.kind != "build")


def escaped(run: Run) -> Run:
    """``run`` with every name and setting in it as :func:`vsr.errors.printable` shows it: for a terminal (a
    report's settings hold file names, which may hold newlines or escape sequences)."""
    def clean(value):
        if isinstance(value, str):
            return printable(value)
        if isinstance(value, dict):
            return {printable(k): clean(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(clean(v) for v in value)
        return value

    return replace(run, label=printable(run.label), settings=clean(run.settings),
                   stages=tuple(replace(s, name=printable(s.name), unit=printable(s.unit)) for s in run.stages),
                   steps=tuple(replace(s, name=printable(s.name), kind=printable(s.kind)) for s in run.steps),
                   step_intervals={printable(k): v for k, v in run.step_intervals.items()})


def load_run(path: str | Path) -> Run:
    """``path`` -> :class:`Run`; a missing, unreadable, broken or foreign file is an :class:`InputError`."""
    path = Path(path)
    text = read_small_text(path, MAX_REPORT_BYTES, "run report", "JSON text")  # (not /dev/zero: it read for ever)
    try:
        data = json.loads(text, parse_int=_parse_int, parse_constant=_parse_constant)
    except json.JSONDecodeError as e:
        raise InputError(f"{path} is not JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except RecursionError:
        raise InputError(f"{path} nests deeper than any run report ({MAX_DEPTH} levels at most)") from None
    except ValueError as e:
        raise InputError(f"{path}: {e}") from None
    return parse_run(data, str(path))


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > 18:
        raise ValueError(f"the number {text[:20]}... ({len(text)} digits) is beyond any in a run report")
    return int(text)


def _parse_constant(name: str):
    raise ValueError(f"{name} is not a number a run report holds")


def check_bounds(data, label: str) -> None:
    """:class:`InputError` unless ``data`` (decoded JSON) nests at most :data:`MAX_DEPTH` deep, holds at most
    :data:`MAX_ITEMS` values, and every number in it is finite and within :data:`MAX_NUMBER`."""
    stack, seen = [(data, 1)], 0
    while stack:
        value, depth = stack.pop()
        seen += 1
        if depth > MAX_DEPTH or seen > MAX_ITEMS:
            what = f"nests deeper than {MAX_DEPTH} levels" if depth > MAX_DEPTH else f"holds over {MAX_ITEMS} values"
            raise InputError(f"{label} {what}: not a run report")
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and not _small(value):
            shown = f"{value:.3g}" if isinstance(value, float) else f"a number of {len(str(abs(value)))} digits"
            raise InputError(f"{label} holds {shown}: beyond any number in a run report (|x| <= {MAX_NUMBER:g})")


def _small(value: int | float) -> bool:
    if isinstance(value, int):
        return -MAX_NUMBER <= value <= MAX_NUMBER
    return math.isfinite(value) and abs(value) <= MAX_NUMBER


def parse_run(data, label: str) -> Run:
    """A report's decoded JSON -> :class:`Run`; ``label`` names it in errors and in comparisons.  Checked
    (:func:`check_bounds`, the format version, every field's type) before anything reads it."""
    check_bounds(data, label)
    if not isinstance(data, dict) or not isinstance(data.get("stages"), list):
        raise InputError(f"{label} is not a vsr run report (no 'stages' list)")
    fmt = data.get("format")
    if fmt is not None and fmt not in KNOWN_FORMATS:
        if isinstance(fmt, str) and fmt.startswith(_FORMAT_PREFIX):
            raise InputError(f"{label} is a run report of format {fmt}, which this vsr cannot read (it reads "
                             f"{', '.join(KNOWN_FORMATS)}): read it with the vsr that wrote it")
        raise InputError(f"{label} is a {str(fmt)[:60]!r} file, not a vsr run report")
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
