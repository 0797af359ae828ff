"""Several run reports of one job's chunks -> one run report of the job (``vsr jobs report``).

Each chunk is a run of its own (``vsr-run-report/2`` dicts).  The job's report sums them: frames, wall time
(the compute time of the chunks, one after another: with several workers the job took less clock time),
per-stage items and busy / waiting seconds, per-step totals and calls.  Percentiles of per-call times cannot be
combined from percentiles, so a combined step keeps its mean and leaves p50 / p95 out (None) unless there is
one chunk.  The timelines are laid end to end in chunk order, each shifted by the wall time before it, and
thinned to at most :data:`vsr.report.sample.DEFAULT_INTERVALS` spans per stage or step.
"""

from __future__ import annotations

from vsr.errors import InputError
from vsr.report.sample import DEFAULT_INTERVALS, step_kind
from vsr.report.timer import REPORT_FORMAT


def combine_reports(reports: list[dict], settings: dict | None = None) -> dict:
    """``[chunk report dict, ...]`` (in chunk order) -> one report dict of the same format.

    ``settings``: replaces keys of the first chunk's settings (the job's input, output, frames...); the result
    also says how many chunks it sums (``settings["chunks"]``).
    """
    if not reports:
        raise InputError("no chunk reports to combine (no chunk of the job is done yet)")
    if len(reports) == 1 and not settings:
        return dict(reports[0])
    merged_settings = {**reports[0].get("settings", {}), **(settings or {}), "chunks": len(reports)}
    cuts = _scene_cuts(reports)
    if cuts is not None:
        merged_settings["scene_cuts"] = cuts
    early = [r["settings"]["input_ended_early"] for r in reports
             if isinstance(r.get("settings"), dict) and isinstance(r["settings"].get("input_ended_early"), dict)]
    if early:  # the chunk whose input ran short (the last, as a rule), not the first chunk's settings alone
        merged_settings["input_ended_early"] = early[0]
    damage = damage_of([r["settings"].get("input_damaged") for r in reports if isinstance(r.get("settings"), dict)])
    merged_settings.pop("input_damaged", None)
    if damage is not None:  # any chunk's, not the first chunk's alone
        merged_settings["input_damaged"] = damage
    frames = sum(int(r.get("frames", 0)) for r in reports)
    wall = sum(float(r.get("wall_s", 0.0)) for r in reports)
    stages = _stages(reports)
    bottleneck = max(stages, key=lambda s: s["busy_s"], default=None)
    return {
        "format": REPORT_FORMAT,
        "settings": merged_settings,
        "frames": frames,
        "wall_s": round(wall, 6),
        "fps": round(frames / wall, 4) if wall > 0 else None,  # not known (vsr report's word), not 0
        "bottleneck": bottleneck["name"] if bottleneck else None,
        "stages": stages,
        "backend_steps_s": {s["name"]: s["total_s"] for s in _steps(reports)},
        "backend_steps": _steps(reports, keep_percentiles=len(reports) == 1),
        "timeline": _timeline(reports),
    }


def damage_of(records: list) -> dict | None:
    """The job's record of a damaged input (``input_damaged``, :mod:`vsr.video.damage`): its chunks' counts summed
    (frames that two chunks both decode, as context, count twice), the first sign's line and place."""
    found = [r for r in records if isinstance(r, dict)]
    if not found:
        return None
    merged = {**found[0], "frames_with_errors": sum(int(r.get("frames_with_errors") or 0) for r in found),
              "error_lines": sum(int(r.get("error_lines") or 0) for r in found)}
    demuxer = sum(int(r.get("demuxer_error_lines") or 0) for r in found)
    if demuxer:  # (as a run's record has it: where any was counted)
        merged["demuxer_error_lines"] = demuxer
    return merged


def _scene_cuts(reports: list[dict]) -> dict | None:
    """The job's scene cuts: each chunk lists those in its own frames, so the first chunk's alone said "none"
    of a job whose cuts all lie further on.  None where a chunk recorded no list (an older report)."""
    found = [r.get("settings", {}).get("scene_cuts") for r in reports]
    if not all(isinstance(sc, dict) for sc in found):
        return None
    if any(not isinstance(sc.get("cuts", []), list) for sc in found):
        return None
    merged = dict(found[0])
    if "cuts" in merged:
        merged["cuts"] = sorted({k for sc in found for k in sc.get("cuts", []) if isinstance(k, int)})
    return merged


def _stages(reports: list[dict]) -> list[dict]:
    out: dict[str, dict] = {}
    for r in reports:
        for s in r.get("stages", []):
            row = out.setdefault(s["name"], {"name": s["name"], "items": 0, "busy_s": 0.0, "wait_in_s": 0.0,
                                             "wait_out_s": 0.0, "unit": s.get("unit", "frames")})
            for k in ("items", "busy_s", "wait_in_s", "wait_out_s"):
                row[k] += s.get(k, 0)
    for row in out.values():
        row["throughput"] = round(row["items"] / row["busy_s"], 4) if row["busy_s"] > 0 else None
    return list(out.values())


def _steps(reports: list[dict], keep_percentiles: bool = False) -> list[dict]:
    out: dict[str, dict] = {}
    for r in reports:
        rows = r.get("backend_steps")
        if rows is None:  # an older report: totals only
            rows = [{"name": k, "total_s": v} for k, v in r.get("backend_steps_s", {}).items()]
        for s in rows:
            row = out.setdefault(s["name"], {"name": s["name"], "kind": s.get("kind") or step_kind(s["name"]),
                                             "total_s": 0.0, "calls": 0, "mean_s": None, "p50_s": None,
                                             "p95_s": None})
            row["total_s"] = round(row["total_s"] + float(s.get("total_s", 0.0)), 6)
            row["calls"] = None if row["calls"] is None or s.get("calls") is None else row["calls"] + s["calls"]
            if keep_percentiles:
                row["p50_s"], row["p95_s"] = s.get("p50_s"), s.get("p95_s")
    for row in out.values():
        row["mean_s"] = round(row["total_s"] / row["calls"], 6) if row["calls"] else None
    return list(out.values())


def _timeline(reports: list[dict]) -> dict | None:
    stages: dict[str, dict] = {}
    steps: dict[str, dict] = {}
    offset = 0.0
    for r in reports:
        t = r.get("timeline") or {}
        for kind, out in (("stages", stages), ("steps", steps)):
            for name, entry in (t.get(kind) or {}).items():
                row = out.setdefault(name, {"seen": 0, "intervals": []})
                row["seen"] += int(entry.get("seen", len(entry.get("intervals", []))))
                row["intervals"] += [[round(a + offset, 6), round(b + offset, 6)]
                                     for a, b in entry.get("intervals", [])]
        offset += float(r.get("wall_s", 0.0))
    if not stages:
        return None
    for row in [*stages.values(), *steps.values()]:
        row["intervals"] = _thin(row["intervals"], DEFAULT_INTERVALS)
    return {"origin": "run start", "unit": "s", "stages": stages, "steps": steps}


def _thin(items: list, size: int) -> list:
    """At most ``size`` of ``items``, evenly spaced (deterministic: the same chunks give the same page)."""
    if len(items) <= size:
        return items
    step = len(items) / size
    return [items[int(i * step)] for i in range(size)]
