"""A finished benchmark as reports: one ``vsr-run-report/2`` per case (``vsr report`` reads it), a summary JSON
(``vsr-bench/1``) and the terminal table.

Each case's report has one stage, ``infer`` (its timed frames), and the backend's steps over those frames; its
timeline starts with the benchmark's timed part, so the interleaving of the cases shows.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from vsr import interrupt
from vsr.bench.cases import bench_cases
from vsr.bench.results import BenchResult, CaseResult
from vsr.errors import InputError, printable
from vsr.files import read_small_text, write_new
from vsr.leftovers import PARTIAL, remove_old_partials, remove_partials
from vsr.outfiles import check_file_output, check_writable
from vsr.report import RunReport, StageStats
from vsr.report.render import fmt, table
from vsr.report.sample import percentile

SUMMARY_FORMAT = "vsr-bench/1"
SUMMARY_LIMIT = 64 << 20  # bytes: a summary of every case and a million timed frames is well under this


def case_report(result: BenchResult, r: CaseResult) -> RunReport:
    """One case as a run report: stage ``infer`` over the timed frames, the steps, and the settings."""
    s = result.settings
    busy = sum(r.times)
    settings = {"bench": r.case.name, "backend": r.backend, "plan": r.case.plan, "precision": r.case.precision,
                "device": r.device, "config": result.config, "weights": s.model_weights,
                "size": f"{s.size[0]}x{s.size[1]}", "frames": len(r.times), "threads": s.threads or "all",
                "input": result.input.source, "baseline": result.baseline, "build_s": round(r.build_s, 3),
                "machine": result.machine}
    stage = StageStats("infer", len(r.times), busy, 0.0, 0.0, "frames", tuple(r.spans), len(r.spans))
    return RunReport([stage], settings, busy, len(r.times), dict(r.steps), started=result.started,
                     step_stats=dict(r.step_stats) or None)


def upscale_report(result: BenchResult, r: CaseResult) -> dict:
    """An upscale case's report: its last run's own, with the bench's figures added to the settings."""
    report = dict(r.report)
    report["settings"] = dict(report["settings"], bench=r.case.name, baseline=result.baseline,
                              process_s=[round(p, 3) for p in r.process_s], build_s=round(r.build_s, 3),
                              runs=len(r.process_s), machine=result.machine)
    return report


def summary(result: BenchResult, reports: dict[str, str] | None = None) -> dict:
    """The summary JSON: settings, machine, and per case the median / p95 / mean seconds per frame, fps, the
    median of its per-frame time ratios to the baseline (and of the baseline's to it: the speed-up), and the
    largest difference of its first output from the baseline's.  ``reports``: case name -> report file."""
    s = result.settings
    base = next(r for r in result.cases if r.case.name == result.baseline)
    rows = []
    for r in result.cases:
        # paired with the baseline frame by frame, or run by run for whole upscale runs: never across the two
        ratios = [t / b for t, b in zip(r.times, base.times)] if r.case.kind == base.case.kind else []
        median = percentile(r.times, 50)
        rows.append({"case": r.case.name, "kind": r.case.kind, "backend": r.backend, "plan": r.case.plan,
                     "precision": r.case.precision, "streams": r.case.streams, "device": r.device,
                     "report": (reports or {}).get(r.case.name), "frames": len(r.times),
                     "median_s": median, "p95_s": percentile(r.times, 95), "mean_s": sum(r.times) / len(r.times),
                     "fps": 1.0 / median if median else None,
                     "time_ratio": percentile(ratios, 50) if ratios else None,
                     "speedup": percentile([1.0 / q for q in ratios], 50) if ratios else None, "build_s": r.build_s,
                     "process_s": percentile(r.process_s, 50) if r.process_s else None,
                     "max_abs_diff": _max_diff(r.first_output, base.first_output), "times_s": list(r.times),
                     "time_ratios": ratios})
    return {"format": SUMMARY_FORMAT, "baseline": result.baseline, "config": result.config,
            "settings": {"weights": s.model_weights, "size": list(s.size), "frames": s.frames,
                         "threads": s.threads, "input": result.input.source, "seed": s.seed},
            "machine": result.machine, "wall_s": result.wall_s, "cases": rows}


def _max_diff(a: np.ndarray | None, b: np.ndarray | None) -> float | None:
    if a is None or b is None or a.shape != b.shape:
        return None
    return float(np.max(np.abs(a - b)))


def render_table(data: dict) -> str:
    """The terminal table of a :func:`summary`: one row per case, the baseline marked with ``*``."""
    st, m = data["settings"], data["machine"]
    h, w = st["size"]
    # the config and the input are names the user gave (a file name may hold a newline or an escape sequence)
    head = [f"vsr bench: {printable(data['config'])} ({printable(st['weights'])} weights), LR {h}x{w} -> "
            f"{4 * h}x{4 * w}, {_n(st['frames'], 'timed frame')} per case, cases interleaved; threads: "
            f"{st['threads'] or 'all'}", f"input: {printable(st['input'])}",
            f"machine: {m['cpu']}, {m['cores']} cores" + (f", {m['gpu']}" if m.get("gpu") else "")
            + f"; onnxruntime {m['onnxruntime']}, torch {m['torch']}", ""]
    rows = [[r["case"] + (" *" if r["case"] == data["baseline"] else ""), fmt(r["median_s"]), fmt(r["p95_s"]),
             _g(r["fps"], ".3g"), fmt(r["time_ratio"], "x"), fmt(r["speedup"], "x"), fmt(r["build_s"]),
             fmt(r.get("process_s")), _g(r["max_abs_diff"], ".1e")] for r in data["cases"]]
    pairs = _n(st["frames"], "per-frame pair")
    foot = ["", f"* baseline; time and speed-up are medians of the {pairs} with it (of the "
                "runs, for upscale- cases against an upscale- baseline); max |diff|: its first output against the "
                "baseline's", "upscale- cases: s/frame is the run after warm-up, build s the rest of the process "
                "(start, model, plans, warm-up), process s its wall time"]
    return "\n".join(head + [table(["case", "median s/frame", "p95 s/frame", "fps", "time vs base", "speed-up",
                                    "build s", "process s", "max |diff|"], rows)] + foot)


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _g(v: float | None, spec: str) -> str:
    """fps spans 0.005 (EDVR-M on a shared CPU) to hundreds: significant digits, not decimals."""
    return "-" if v is None else format(v, spec)


def bench_paths(out: str | Path, cases: list[str], html: bool) -> tuple[Path, dict[str, Path], dict[str, Path]]:
    """Where the files go: ``out`` ending in ``.json`` is the summary, with ``<stem>.<case>.json`` beside it;
    anything else is a folder holding ``summary.json`` and ``<case>.json`` (and ``<case>.html``)."""
    out = Path(out)
    if out.suffix == ".json":
        folder, summary_path, stem = out.parent, out, f"{out.stem}."
        if not folder.is_dir():
            raise InputError(f"--out folder does not exist: {folder}")
    else:
        folder, summary_path, stem = out, out / "summary.json", ""
        if not folder.parent.is_dir():
            raise InputError(f"--out folder does not exist: {folder.parent}")
        if folder.exists() and not folder.is_dir():
            raise InputError(f"--out {out} is a file: give a folder, or a summary file name ending in .json")
    reports = {c: folder / f"{stem}{c}.json" for c in cases}
    pages = {c: folder / f"{stem}{c}.html" for c in cases} if html else {}
    return summary_path, reports, pages


def check_out(out: str | Path, cases: list[str], html: bool, overwrite: bool):
    """:func:`bench_paths`, checked before the bench runs by the rules of :mod:`vsr.outfiles` (the folder can be
    written; no file to replace without ``overwrite``; never a symbolic link, a folder or a device), and the
    earlier bench's files there that this one does not write: removed by :func:`write_bench` (``overwrite``)."""
    if not os.fspath(out):
        raise InputError("--out is empty: give a folder, or a summary file name ending in .json")
    summary_path, reports, pages = bench_paths(out, cases, html)
    folder = summary_path.parent
    if not folder.is_dir():  # made by write_bench: nothing there yet
        check_writable(folder, "--out")
        return summary_path, reports, pages, ()
    files = [(summary_path, "summary"), *((p, "report") for p in reports.values()),
             *((p, "page") for p in pages.values())]
    for p, what in files:
        check_file_output(p, "--out", what, overwrite=overwrite, stdout=False)
    stem = f"{Path(out).stem}." if Path(out).suffix == ".json" else ""
    return summary_path, reports, pages, _earlier_files(summary_path, stem, {p for p, _ in files})


def _earlier_files(summary_path: Path, stem: str, writing: set[Path]) -> tuple[Path, ...]:
    """The reports and pages of the bench whose summary ``summary_path`` is, which this one does not replace:
    left, they would sit beside a summary that does not list them.  Only what that summary lists (a case of
    :func:`~vsr.bench.cases.bench_cases` and the report name bench gives it, and that case's page), and only
    regular files: never a file of the user's."""
    if not os.path.lexists(summary_path):
        return ()
    try:
        data = json.loads(read_small_text(summary_path, SUMMARY_LIMIT, "bench summary", "JSON text"))
    except (InputError, ValueError, RecursionError):
        return ()  # not a summary bench wrote: nothing is known to be its
    if not isinstance(data, dict) or data.get("format") != SUMMARY_FORMAT or not isinstance(data.get("cases"), list):
        return ()
    known = {c.name for c in bench_cases()}
    found = []
    for row in data["cases"]:
        case = row.get("case") if isinstance(row, dict) else None
        if not isinstance(case, str) or case not in known or row.get("report") != f"{stem}{case}.json":
            continue
        for p in (summary_path.with_name(f"{stem}{case}.json"), summary_path.with_name(f"{stem}{case}.html")):
            if p not in writing and not os.path.islink(p) and p.is_file():
                found.append(p)
    return tuple(found)


def write_bench(result: BenchResult, out: str | Path, html: bool = False, overwrite: bool = False) -> dict:
    """Writes the summary, one report per case (and with ``html`` its page) under ``out`` (see
    :func:`bench_paths`), all or none; returns the summary.  Existing files are replaced only with ``overwrite``,
    and then an earlier bench's reports and pages of cases this one did not run are removed (:func:`check_out`)."""
    from vsr.report.html import render_html
    from vsr.report.load import parse_run

    summary_path, reports, pages, earlier = check_out(out, [r.case.name for r in result.cases], html, overwrite)
    made = not summary_path.parent.exists()
    data = summary(result, {n: p.name for n, p in reports.items()})
    texts = {summary_path: json.dumps(data, indent=2) + "\n"}
    for r in result.cases:
        report = case_report(result, r).to_dict() if r.report is None else upscale_report(result, r)
        texts[reports[r.case.name]] = json.dumps(report, indent=2) + "\n"
        if html:
            texts[pages[r.case.name]] = render_html(parse_run(report, reports[r.case.name].name))
    try:
        summary_path.parent.mkdir(exist_ok=True)
        _write_all(texts)
    except BaseException:
        if made:
            summary_path.parent.rmdir()
        raise
    for p in earlier:
        p.unlink(missing_ok=True)
    return data


def _write_all(texts: dict[Path, str]) -> None:
    """Every file to a temporary name first, then all renamed into place: a failure leaves none of them."""
    for p in texts:
        remove_partials(p)  # (what runs killed outright left)
        remove_old_partials(p, ".part")  # (and older vsr's: .N.PID.part)
    tmps = {p: p.with_name(f".{p.name}{PARTIAL}{os.getpid()}") for p in texts}
    try:
        for p, text in texts.items():
            write_new(tmps[p], text.encode())  # (a link planted at the name is replaced, not written through)
        interrupt.check()  # nothing published after a stop (vsr.interrupt)
        for p, tmp in tmps.items():
            os.replace(tmp, p)
    finally:
        for tmp in tmps.values():
            tmp.unlink(missing_ok=True)
