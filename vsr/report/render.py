"""A loaded run (:class:`vsr.report.load.Run`) as rows, terminal tables and JSON; two runs side by side.

The rows (:func:`stage_rows`, :func:`step_rows`, :func:`compare`) are the single source of every number: the
terminal tables, ``--json`` and the HTML page (:mod:`vsr.report.html`) all print them.
"""

from __future__ import annotations

from vsr.report.load import Run


def stage_rows(run: Run) -> list[dict]:
    """Per stage: items, busy / waiting seconds, items per busy second, share of the run's wall time."""
    b = run.bottleneck
    return [{"stage": s.name, "items": s.items, "busy_s": s.busy_s, "wait_in_s": s.wait_in_s,
             "wait_out_s": s.wait_out_s, "items_per_s": s.items / s.busy_s if s.busy_s > 0 else None,
             "share": s.busy_s / run.wall_s if run.wall_s > 0 else None, "bottleneck": s is b}
            for s in run.stages]


# Steps whose time another step holds too: a whole-model "run" beside the steps it is made of (the torch
# backend's "features" and "windows" when it keeps each frame's features; the CUDA runtime's segments,
# deformable convolutions and pixel shuffles when it records them).  A name ending in ":" or "_" is a prefix.
PARTS_OF = {"run": ("features", "windows", "segment_", "dcn:", "shuffle:")}


def parts(run: Run) -> dict[str, str]:
    """Step name -> the step that holds its time (:data:`PARTS_OF`), where that parent is there and holds at
    least the parts' sum (a "run" of other calls beside them, or of none, is no parent); the accounting counts
    the parent once and not its parts."""
    steps = {s.name: s for s in run.call_steps}
    out: dict[str, str] = {}
    for parent, names in PARTS_OF.items():
        kids = [s for s in run.call_steps if s.name != parent and any(
            s.name == n or (n.endswith((":", "_")) and s.name.startswith(n)) for n in names)]
        held = sum(k.total_s for k in kids)
        if parent in steps and held > 0 and steps[parent].total_s >= 0.99 * held:
            out.update((k.name, parent) for k in kids)
    return out


def step_rows(run: Run) -> list[dict]:
    """Per backend step: kind, calls, total / mean / p50 / p95 seconds, share of the inference stage's busy time,
    and the step it is part of (:func:`parts`; None for most).

    One-off build steps get a share only where they ran inside that stage (see :func:`summary`).
    """
    whole = infer_or_steps_s(run)
    inside = builds_in_infer(run)
    part_of = parts(run)
    return [{"step": s.name, "kind": s.kind, "calls": s.calls, "total_s": s.total_s,
             "mean_s": s.mean_s, "p50_s": s.p50_s, "p95_s": s.p95_s,
             "share": s.total_s / whole if whole and (inside or s.kind != "build") else None,
             "part_of": part_of.get(s.name)} for s in run.steps]


def infer_or_steps_s(run: Run) -> float:
    """What a step's share is of: the inference stage's busy time, or the steps' sum in a report without that
    stage.  An infer stage busy 0 s stays 0 (each share then not known), never another denominator."""
    infer = run.infer_busy_s
    return infer if infer is not None else sum(s.total_s for s in run.call_steps)


def counted_s(run: Run) -> float:
    """The per-call steps' seconds, each counted once: a parent's, not again its parts' (:func:`parts`)."""
    part_of = parts(run)
    return sum(s.total_s for s in run.call_steps if s.name not in part_of)


def parents_first(names: list[str], part_of: dict[str, str]) -> list[str]:
    """``names`` with each step that holds others (:func:`parts`) right above the steps it holds."""
    out = []
    for n in names:
        if n not in part_of:
            out += [n] + [m for m in names if part_of.get(m) == n]
    return out + [m for m in names if m not in out]


def step_label(row: dict) -> str:
    """A step's name in a table: a part indented under the step that holds it ("  features")."""
    return f"  {row['step']}" if row.get("part_of") else row["step"]


def builds_in_infer(run: Run) -> bool:
    """Whether the one-off builds (export, plan, session load) ran inside the inference stage's busy time.

    A backend that builds on its first call puts them there; one prepared before the run does not.  The report
    does not say which, so this picks the accounting that comes closer to the stage's measured busy time.
    """
    infer = run.infer_busy_s
    steps = counted_s(run)
    build = sum(s.total_s for s in run.steps if s.kind == "build")
    return bool(infer and build) and abs(steps + build - infer) < abs(steps - infer)


def summary(run: Run) -> dict:
    """The headline numbers, and how much of the inference stage's busy time the backend steps account for."""
    b = run.bottleneck
    steps = counted_s(run)
    build = sum(s.total_s for s in run.steps if s.kind == "build")
    inside = builds_in_infer(run)
    infer = run.infer_busy_s
    accounted = steps + (build if inside else 0.0)
    return {"report": run.label, "frames": run.frames, "wall_s": run.wall_s, "fps": run.fps,
            "bottleneck": b.name if b else None, "infer_busy_s": infer, "steps_s": steps, "build_s": build,
            "builds_in_infer": inside, "accounted_s": accounted,
            "accounted_share_of_infer": accounted / infer if infer else None, "has_timeline": run.has_timeline}


# FFmpeg's names of the colour codes a report keeps as numbers (av_color_primaries_name, av_color_transfer_name)
PRIMARIES = {1: "bt709", 2: "unknown", 4: "bt470m", 5: "bt470bg", 6: "smpte170m", 7: "smpte240m", 8: "film",
             9: "bt2020", 10: "smpte428", 11: "smpte431", 12: "smpte432", 22: "ebu3213"}
TRANSFERS = {1: "bt709", 2: "unknown", 4: "bt470m", 5: "bt470bg", 6: "smpte170m", 7: "smpte240m", 8: "linear",
             9: "log100", 10: "log316", 11: "iec61966-2-4", 12: "bt1361e", 13: "iec61966-2-1", 14: "bt2020-10",
             15: "bt2020-12", 16: "smpte2084", 17: "smpte428", 18: "arib-std-b67"}
COLOUR_CODES = {"colour.primaries": PRIMARIES, "colour.transfer": TRANSFERS}


def flat_settings(settings: dict, prefix: str = "", named: bool = False) -> dict[str, str]:
    """Nested settings as ``{"source.width": "256", ...}``; the memory plan is left to its own table.  ``named``:
    the source's colour primaries and transfer by FFmpeg's names, as its matrix (for people: ``--json`` keeps the
    numbers, as the report does)."""
    out: dict[str, str] = {}
    for k, v in settings.items():
        key = f"{prefix}{k}"
        names = next((n for tail, n in COLOUR_CODES.items() if key.endswith(tail)), None) if named else None
        if isinstance(v, dict) and v and key != "memory_plan":
            out.update(flat_settings(v, key + ".", named))
        elif names is not None and type(v) is int and v in names:
            out[key] = names[v]
        elif key != "memory_plan":
            out[key] = ", ".join(map(str, v)) if isinstance(v, (list, tuple)) else ("-" if v in (None, {}) else str(v))
    return out


def memory_plan(run: Run) -> dict[str, str]:
    plan = run.settings.get("memory_plan")
    return {k: str(v) for k, v in plan.items()} if isinstance(plan, dict) else {}


def to_json(run: Run) -> dict:
    """``vsr report --json``: the rows the tables show, as numbers."""
    return {"summary": summary(run), "stages": stage_rows(run), "steps": step_rows(run),
            "memory_plan": run.settings.get("memory_plan"), "settings": flat_settings(run.settings)}


def compare(a: Run, b: Run) -> dict:
    """Two runs side by side; every ``ratio`` is B / A (above 1: B took longer, or B is faster for fps)."""
    stages = {s.name: s for s in a.stages}
    stages_b = {s.name: s for s in b.stages}
    steps_a = {s.name: s for s in a.steps}
    steps_b = {s.name: s for s in b.steps}
    sa, sb = flat_settings(a.settings), flat_settings(b.settings)
    part_of = {**parts(a), **parts(b)}
    return {
        "a": a.label, "b": b.label,
        "summary": [{"what": k, "a": va, "b": vb, "ratio": _ratio(va, vb)} for k, va, vb in (
            ("frames", a.frames, b.frames), ("wall_s", a.wall_s, b.wall_s), ("fps", a.fps, b.fps),
            ("infer_busy_s", a.infer_busy_s, b.infer_busy_s))],
        "stages": [{"stage": n, "a_busy_s": _busy(stages.get(n)), "b_busy_s": _busy(stages_b.get(n)),
                    "ratio": _ratio(_busy(stages.get(n)), _busy(stages_b.get(n)))}
                   for n in _union(stages, stages_b)],
        "steps": [{"step": n, "kind": (steps_a.get(n) or steps_b.get(n)).kind,
                   "a_total_s": _total(steps_a.get(n)), "b_total_s": _total(steps_b.get(n)),
                   "ratio": _ratio(_total(steps_a.get(n)), _total(steps_b.get(n))),
                   "a_share": _share(steps_a.get(n), a), "b_share": _share(steps_b.get(n), b),
                   "part_of": part_of.get(n)}
                  for n in parents_first(_union(steps_a, steps_b), part_of)],
        "kinds": kind_rows(a, b),
        "settings_differ": {k: [sa.get(k), sb.get(k)] for k in _union(sa, sb) if sa.get(k) != sb.get(k)
                            and k not in ("input", "output")},
        "note": (f"A wrote {a.frames} frames and B {b.frames}: the ratios compare totals, not per-frame times"
                 if a.frames != b.frames else None),
    }


# Step kinds in the order a comparison lists them; "per call" sums all but the one-off builds.
_KINDS = ("segment", "bridge", "other", "per call", "build")


def kind_totals(run: Run) -> dict[str, float]:
    """Seconds per step kind, and ``per call``: every step but the one-off builds (what inference costs); a
    parent's parts are counted in it only (:func:`parts`)."""
    out: dict[str, float] = {}
    part_of = parts(run)
    for s in run.steps:
        if s.name not in part_of:
            out[s.kind] = out.get(s.kind, 0.0) + s.total_s
    if run.steps:
        out["per call"] = counted_s(run)
    return out


def kind_rows(a: Run, b: Run) -> list[dict]:
    """Step totals by kind, B / A: the comparison that holds when the two runs cut the model differently (the
    whole graph's single ``run`` against the split plan's segments and bridges)."""
    ka, kb = kind_totals(a), kind_totals(b)
    return [{"kind": k, "a_total_s": ka.get(k), "b_total_s": kb.get(k), "ratio": _ratio(ka.get(k), kb.get(k))}
            for k in _KINDS if k in ka or k in kb]


def _share(step, run: Run) -> float | None:
    """A per-call step's share of its run's per-call steps, each counted once (:func:`counted_s`: a parent's
    time, not again its parts'); None for a build, or a step the run lacks."""
    if step is None or step.kind == "build":
        return None
    whole = counted_s(run)
    return step.total_s / whole if whole else None


def _union(a: dict, b: dict) -> list[str]:
    return list(a) + [k for k in b if k not in a]


def _busy(s) -> float | None:
    return None if s is None else s.busy_s


def _total(s) -> float | None:
    return None if s is None else s.total_s


def _ratio(a, b) -> float | None:
    return b / a if a and b is not None else None


# -- terminal ------------------------------------------------------------------------------------------------
def table(headers: list[str], rows: list[list[str]], right: bool = True) -> str:
    """Columns padded to their widest cell; the first left-aligned, the rest right-aligned if ``right``."""
    widths = [max(len(r[i]) for r in [headers] + rows) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) if i == 0 or not right else c.rjust(w)
                                for i, (c, w) in enumerate(zip(r, widths))).rstrip() for r in [headers] + rows)


def fmt(v, unit: str = "s") -> str:
    """A number for a table cell: seconds with 3 decimals, ms with 2, shares as %, ratios with an x."""
    if v is None:
        return "-"
    if unit == "s":
        return f"{v:.3f}"
    if unit == "ms":
        return f"{v * 1e3:.2f}"
    if unit == "%":
        return f"{100 * v:.1f}%"
    if unit == "x":
        return f"{v:.2f}x"
    if unit == "rate":
        return f"{v:.2f}"
    return str(v)


def render_text(run: Run) -> str:
    """The terminal report: headline, stages (bottleneck marked), backend steps, memory plan, settings."""
    s = summary(run)
    out = [f"{run.label}: {run.frames} frames in {run.wall_s:.2f} s{fps_text(run)}; "
           f"bottleneck: {s['bottleneck'] or '-'}"]
    cuts = scene_cuts(run)
    if cuts:
        out.append(cuts)
    out += input_notes(run)
    out.append("")
    out.append(table(["stage", "items", "busy s", "wait in s", "wait out s", "items/s", "share of run"],
                     [[r["stage"] + (" *" if r["bottleneck"] else ""), str(r["items"]), fmt(r["busy_s"]),
                       fmt(r["wait_in_s"]), fmt(r["wait_out_s"]), fmt(r["items_per_s"], "rate"), fmt(r["share"], "%")]
                      for r in stage_rows(run)]))
    steps = step_rows(run)
    if steps:
        out += ["", table(["backend step", "kind", "calls", "total s", "mean ms", "p50 ms", "p95 ms",
                           "share of infer"],
                          [[step_label(r), r["kind"], fmt(r["calls"], ""), fmt(r["total_s"]), fmt(r["mean_s"], "ms"),
                            fmt(r["p50_s"], "ms"), fmt(r["p95_s"], "ms"), fmt(r["share"], "%")] for r in steps])]
        out.append(accounting(s))
    plan = memory_plan(run)
    if plan:
        out += ["", table(["memory plan", "value"], [[k, v] for k, v in plan.items()], right=False)]
    out += ["", table(["setting", "value"], [[k, v] for k, v in flat_settings(run.settings, named=True).items()],
                        right=False)]
    if not run.has_timeline:
        out += ["", "(no timeline: the report was written without one)"]
    return "\n".join(out)


def fps_text(run: Run) -> str:
    """The headline's rate after its wall time: `` = 12.34 fps``, or where the wall time is 0, that the rate is not
    known (``0.00 fps`` was untrue, and a ratio of it too)."""
    return f" = {run.fps:.2f} fps" if run.fps is not None else ", fps not known (no wall time)"


def input_notes(run: Run) -> list[str]:
    """Lines under the headline for what the run's input lacked, as the run said it (its settings'
    ``input_ended_early`` and ``input_damaged``): they were only rows deep in the settings table."""
    notes = []
    early, damage = run.settings.get("input_ended_early"), run.settings.get("input_damaged")
    if isinstance(early, dict):
        notes.append(f"input ended early: {early.get('detail')}; {early.get('frames_decoded')} frames decoded, "
                     f"{early.get('frames_written')} written")
    if isinstance(damage, dict):
        near = f", first near {damage['first_s']} s" if damage.get("first_s") is not None else ""
        notes.append(f"input damaged: {damage.get('frames_with_errors', 0)} frames decoded with errors, "
                     f"{damage.get('error_lines', 0)} FFmpeg errors (first: {damage.get('first_error')}){near}")
    return notes


def scene_cuts(run: Run) -> str | None:
    """One line: the scene cuts among the output frames (the windows do not cross them); None if not recorded."""
    sc = run.settings.get("scene_cuts")
    if not isinstance(sc, dict) or "mode" not in sc:
        return None
    if sc["mode"] == "off":
        return "scene cuts: off (windows run across cuts)"
    cuts = sc.get("cuts") if isinstance(sc.get("cuts"), list) else []
    where = f"{len(cuts)}, before frame{'s' if len(cuts) > 1 else ''} {', '.join(map(str, cuts))}" if cuts else "none"
    rule = f", threshold {sc['threshold']}" if "threshold" in sc else ""
    return f"scene cuts ({sc['mode']}{rule}): {where}"


def accounting(s: dict) -> str:
    """One line: how much of the inference stage's busy time the backend steps account for."""
    if not s["infer_busy_s"]:  # no infer stage, or one busy 0 s: no share of it to give
        busy = "" if s["infer_busy_s"] is None else "; the infer stage was busy 0 s"
        return f"backend steps {s['steps_s']:.3f} s{busy}; one-off builds {s['build_s']:.3f} s"
    where = "inside it (built on the first call)" if s["builds_in_infer"] else "before the run"
    return (f"backend steps account for {s['accounted_s']:.3f} s = {fmt(s['accounted_share_of_infer'], '%')} of "
            f"the infer stage's busy {s['infer_busy_s']:.3f} s; one-off builds {s['build_s']:.3f} s, {where}")


def render_compare_text(a: Run, b: Run) -> str:
    """Two runs side by side: summary, stages and steps with B / A ratios, and the settings that differ."""
    c = compare(a, b)
    out = [f"A: {a.label}", f"B: {b.label}"] + ([f"note: {c['note']}"] if c["note"] else []) + [""]
    out.append(table(["run", "A", "B", "B/A"],
                     [[r["what"], fmt(r["a"], "rate" if r["what"] != "frames" else ""),
                       fmt(r["b"], "rate" if r["what"] != "frames" else ""), fmt(r["ratio"], "x")]
                      for r in c["summary"]]))
    out += ["", table(["stage busy s", "A", "B", "B/A"],
                      [[r["stage"], fmt(r["a_busy_s"]), fmt(r["b_busy_s"]), fmt(r["ratio"], "x")]
                       for r in c["stages"]])]
    if c["steps"]:
        out += ["", table(["backend steps by kind, s", "A", "B", "B/A"],
                          [[r["kind"], fmt(r["a_total_s"]), fmt(r["b_total_s"]), fmt(r["ratio"], "x")]
                           for r in c["kinds"]])]
        out += ["", table(["backend step s", "kind", "A", "B", "B/A", "A share", "B share"],
                          [[step_label(r), r["kind"], fmt(r["a_total_s"]), fmt(r["b_total_s"]), fmt(r["ratio"], "x"),
                            fmt(r["a_share"], "%"), fmt(r["b_share"], "%")] for r in c["steps"]])]
        out.append("share: of the run's per-call steps (all but the one-off builds)")
    if c["settings_differ"]:
        out += ["", table(["setting", "A", "B"], [[k, str(va or "-"), str(vb or "-")]
                                                  for k, (va, vb) in c["settings_differ"].items()], right=False)]
    return "\n".join(out)
