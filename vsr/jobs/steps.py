"""A chunk's own share of a reused backend's step timings.

A worker keeps one opened backend across chunks; its ``timings()`` and ``step_stats()`` count every call since it
was opened, so a chunk's report subtracts what the backend had counted before the chunk started.
"""

from __future__ import annotations


def step_totals(backend) -> dict[str, tuple[float, int | None]]:
    """A reused backend's step totals so far: (seconds, calls) per step."""
    if backend is None:
        return {}
    stats = backend.step_stats() or {}
    return {k: (v, stats[k].calls if k in stats else None) for k, v in backend.timings().items()}


def chunk_only(report: dict, before: dict[str, tuple[float, int | None]]) -> dict:
    """A chunk's report without the steps of the earlier chunks that its (reused) backend also counts.

    The per-call percentiles of such a step mix in the earlier chunks' calls, so they are left out.
    """
    if not before:
        return report
    steps = []
    for row in report.get("backend_steps", []):
        total, calls = before.get(row["name"], (0.0, None))
        row = dict(row, total_s=round(max(0.0, row["total_s"] - total), 6))
        if calls is not None and row.get("calls") is not None:
            row.update(calls=row["calls"] - calls, p50_s=None, p95_s=None)
            row["mean_s"] = round(row["total_s"] / row["calls"], 6) if row["calls"] else None
        steps.append(row)
    totals = {k: round(max(0.0, v - before.get(k, (0.0, None))[0]), 6)
              for k, v in report.get("backend_steps_s", {}).items()}
    timeline = report.get("timeline")
    if timeline:  # spans of earlier chunks lie before this run's start
        timeline = dict(timeline, steps={k: dict(v, intervals=[i for i in v["intervals"] if i[0] >= 0])
                                         for k, v in timeline.get("steps", {}).items()})
    return dict(report, backend_steps=steps, backend_steps_s=totals, timeline=timeline)
