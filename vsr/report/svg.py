"""Inline SVG charts of a run: the stages' timeline (Gantt) and the backend steps' bar chart.

Plain SVG text, no script and no external resource, so a page holding them opens anywhere offline.  Every
recorded busy interval is one ``<rect class="iv">``.
"""

from __future__ import annotations

import math
from html import escape

from vsr.report.load import Run
from vsr.report.render import infer_or_steps_s

STAGE_COLOURS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#b07aa1", "#edc948", "#9c755f")
KIND_COLOURS = {"segment": "#4e79a7", "bridge": "#f28e2b", "other": "#9c9c9c", "build": "#bab0ac"}
_LABEL_W = 170  # room for a row's name left of the plot
_PLOT_W = 900
_ROW_H = 22


def nice_step(span: float, ticks: int = 8) -> float:
    """A 1, 2 or 5 times a power of ten that cuts ``span`` into about ``ticks`` parts."""
    if span <= 0:
        return 1.0
    raw = span / ticks
    base = 10 ** math.floor(math.log10(raw))
    return next(m * base for m in (1, 2, 5, 10) if m * base >= raw)


def gantt(run: Run) -> str:
    """Timeline of the run: one row per stage (then per backend step, where recorded), a bar per busy span."""
    rows = [(s.name, s.intervals, STAGE_COLOURS[i % len(STAGE_COLOURS)], f"{s.intervals_seen} busy spans"
             + (f", {len(s.intervals)} sampled" if len(s.intervals) < s.intervals_seen else ""))
            for i, s in enumerate(run.stages)]
    kinds = {s.name: s.kind for s in run.steps}
    rows += [(f"  {name}", spans, KIND_COLOURS.get(kinds.get(name, "other"), "#9c9c9c"), f"{len(spans)} calls shown")
             for name, spans in run.step_intervals.items()]
    ends = [e for _, spans, _, _ in rows for _, e in spans]
    starts = [a for _, spans, _, _ in rows for a, _ in spans]
    t0 = min([0.0] + starts)
    t1 = max([run.wall_s] + ends) or 1.0
    x_of = _scale(t0, t1)
    height = 30 + _ROW_H * len(rows) + 30
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="gantt" width="{_LABEL_W + _PLOT_W + 20}" '
             f'height="{height}" role="img" aria-label="timeline of the run">']
    parts += _time_axis(t0, t1, x_of, 24, height - 28)
    for r, (name, spans, colour, note) in enumerate(rows):
        y = 30 + r * _ROW_H
        parts.append(f'<g><title>{escape(name.strip())}: {escape(note)}</title>'
                     f'<rect class="row" x="{_LABEL_W}" y="{y}" width="{_PLOT_W}" height="{_ROW_H - 4}" '
                     f'fill="{"#f4f4f4" if r % 2 == 0 else "#fafafa"}"/>'
                     f'<text x="{_LABEL_W - 8}" y="{y + 13}" text-anchor="end">{escape(name)}</text>')
        parts += [f'<rect class="iv" x="{x_of(a):.2f}" y="{y + 2}" width="{max(0.6, x_of(b) - x_of(a)):.2f}" '
                  f'height="{_ROW_H - 8}" fill="{colour}"/>' for a, b in spans]
        parts.append("</g>")
    parts.append("</svg>")
    return "\n".join(parts)


def _scale(t0: float, t1: float):
    def x_of(t: float) -> float:
        return _LABEL_W + (t - t0) / (t1 - t0) * _PLOT_W
    return x_of


def _time_axis(t0: float, t1: float, x_of, top: int, bottom: int) -> list[str]:
    step = nice_step(t1 - t0)
    out = []
    k = math.ceil(t0 / step)
    while k * step <= t1 + 1e-12:
        t = k * step
        x = x_of(t)
        out.append(f'<line x1="{x:.2f}" y1="{top}" x2="{x:.2f}" y2="{bottom}" stroke="#ddd"/>'
                   f'<text class="tick" x="{x:.2f}" y="{bottom + 14}" text-anchor="middle">{t:g} s</text>')
        k += 1
    return out


def step_bars(run: Run) -> str:
    """Horizontal bars: total seconds of each per-call backend step, coloured by kind, with its share."""
    steps = run.call_steps
    if not steps:
        return ""
    whole = infer_or_steps_s(run)  # (0: each share not known, not a share of 1 s)
    top = max(s.total_s for s in steps) or 1.0
    height = 10 + _ROW_H * len(steps) + 10
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="bars" width="{_LABEL_W + _PLOT_W + 20}" '
             f'height="{height}" role="img" aria-label="backend steps">']
    for r, s in enumerate(steps):
        y = 10 + r * _ROW_H
        w = max(0.6, s.total_s / top * (_PLOT_W - 160))
        label = f"{s.total_s:.3f} s" + (f" ({100 * s.total_s / whole:.1f}%)" if whole > 0 else "")
        parts.append(f'<g><title>{escape(s.name)} ({escape(s.kind)}): {escape(label)}</title>'
                     f'<text x="{_LABEL_W - 8}" y="{y + 13}" text-anchor="end">{escape(s.name)}</text>'
                     f'<rect class="bar" x="{_LABEL_W}" y="{y + 2}" width="{w:.2f}" height="{_ROW_H - 8}" '
                     f'fill="{KIND_COLOURS.get(s.kind, "#9c9c9c")}"/>'
                     f'<text x="{_LABEL_W + w + 6:.2f}" y="{y + 13}">{escape(label)}</text></g>')
    parts.append("</svg>")
    return "\n".join(parts)
