"""A run report as one self-contained HTML page: inline CSS and SVG, no script, nothing fetched."""

from __future__ import annotations

from html import escape

from vsr.report import render
from vsr.report.load import Run
from vsr.report.render import fmt
from vsr.report.svg import KIND_COLOURS, gantt, step_bars

_CSS = """
body { font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px; color: #222; }
h1 { font-size: 20px; margin: 0 0 4px; } h2 { font-size: 16px; margin: 28px 0 8px; }
.headline { margin: 0 0 12px; color: #444; } .bottleneck { color: #c0392b; font-weight: 600; }
table { border-collapse: collapse; margin: 4px 0; } td, th { padding: 3px 10px; border-bottom: 1px solid #e4e4e4; }
th { text-align: left; background: #f4f4f4; } td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
tr.bottleneck td { background: #fdecea; }
svg text { font: 12px system-ui, sans-serif; fill: #333; } svg text.tick { fill: #777; font-size: 11px; }
.legend span { display: inline-block; width: 12px; height: 12px; margin: 0 4px 0 14px; vertical-align: -1px; }
.note { color: #777; }
"""


def render_html(run: Run) -> str:
    """The page of one run: headline, timeline, stages, backend steps (chart and table), memory plan, settings."""
    s = render.summary(run)
    body = [f"<h1>vsr run report</h1><p class=\"headline\">{escape(run.label)}: {run.frames} frames in "
            f"{run.wall_s:.2f} s{render.fps_text(run)}; bottleneck: "
            f"<span class=\"bottleneck\">{escape(s['bottleneck'] or '-')}</span></p>"]
    body += _timeline(run)
    body += ["<h2>Stages</h2>", _stage_table(run)]
    body += _steps(run, s)
    plan = render.memory_plan(run)
    if plan:
        body += ["<h2>Memory plan</h2>", _table(["", "value"], [[k, v] for k, v in plan.items()], numeric=False)]
    body += ["<h2>Settings</h2>", _table(["setting", "value"], [[k, v] for k, v in render.flat_settings(
        run.settings, named=True).items()], numeric=False)]
    return _page(f"vsr report: {run.label}", body)


def render_compare_html(a: Run, b: Run) -> str:
    """Two runs on one page: ratio tables (B / A), then each run's timeline."""
    c = render.compare(a, b)
    body = [f"<h1>vsr run comparison</h1><p class=\"headline\">A: {escape(a.label)}<br>B: {escape(b.label)}</p>",
            f'<p class="note">{escape(c["note"])}.</p>' if c["note"] else "",
            _table(["run", "A", "B", "B/A"], [[r["what"], fmt(r["a"], "" if r["what"] == "frames" else "rate"),
                                               fmt(r["b"], "" if r["what"] == "frames" else "rate"),
                                               fmt(r["ratio"], "x")] for r in c["summary"]]),
            "<h2>Stages (busy s)</h2>",
            _table(["stage", "A", "B", "B/A"], [[r["stage"], fmt(r["a_busy_s"]), fmt(r["b_busy_s"]),
                                                 fmt(r["ratio"], "x")] for r in c["stages"]])]
    if c["steps"]:
        body += ["<h2>Backend steps by kind (total s)</h2>",
                 _table(["kind", "A", "B", "B/A"], [[r["kind"], fmt(r["a_total_s"]), fmt(r["b_total_s"]),
                                                     fmt(r["ratio"], "x")] for r in c["kinds"]]),
                 "<h2>Backend steps (total s)</h2>",
                 _table(["step", "kind", "A", "B", "B/A", "A share", "B share"],
                        [[render.step_label(r), r["kind"], fmt(r["a_total_s"]), fmt(r["b_total_s"]),
                          fmt(r["ratio"], "x"), fmt(r["a_share"], "%"), fmt(r["b_share"], "%")] for r in c["steps"]])]
    if c["settings_differ"]:
        body += ["<h2>Settings that differ</h2>",
                 _table(["setting", "A", "B"], [[k, str(va or "-"), str(vb or "-")]
                                                for k, (va, vb) in c["settings_differ"].items()], numeric=False)]
    for tag, run in (("A", a), ("B", b)):
        body += [f"<h2>Timeline {tag}: {escape(run.label)}</h2>"] + _timeline(run, heading=False)
    return _page(f"vsr report: {a.label} vs {b.label}", body)


def _timeline(run: Run, heading: bool = True) -> list[str]:
    out = ["<h2>Timeline</h2>"] if heading else []
    if not run.has_timeline:
        return out + ['<p class="note">This report was written without a timeline.</p>']
    return out + ['<p class="note">Busy spans of each stage over the run (seconds from its start); '
                  "gaps are waits on a neighbour.</p>", gantt(run)]


def _stage_table(run: Run) -> str:
    rows, marks = [], []
    for r in render.stage_rows(run):
        rows.append([r["stage"] + (" (bottleneck)" if r["bottleneck"] else ""), str(r["items"]), fmt(r["busy_s"]),
                     fmt(r["wait_in_s"]), fmt(r["wait_out_s"]), fmt(r["items_per_s"], "rate"), fmt(r["share"], "%")])
        marks.append(r["bottleneck"])
    return _table(["stage", "items", "busy s", "wait in s", "wait out s", "items/s", "share of run"], rows, marks)


def _steps(run: Run, s: dict) -> list[str]:
    rows = render.step_rows(run)
    if not rows:
        return []
    legend = "".join(f'<span style="background:{c}"></span>{k}' for k, c in KIND_COLOURS.items() if k != "build")
    return ["<h2>Backend steps</h2>", f'<p class="legend note">{legend}</p>', step_bars(run),
            _table(["step", "kind", "calls", "total s", "mean ms", "p50 ms", "p95 ms", "share of infer"],
                   [[render.step_label(r), r["kind"], fmt(r["calls"], ""), fmt(r["total_s"]), fmt(r["mean_s"], "ms"),
                     fmt(r["p50_s"], "ms"), fmt(r["p95_s"], "ms"), fmt(r["share"], "%")] for r in rows]),
            f'<p class="note">{escape(render.accounting(s))}.</p>']


def _table(headers: list[str], rows: list[list[str]], marks: list[bool] | None = None, numeric: bool = True) -> str:
    def cells(tag: str, row: list[str]) -> str:
        return "".join(f'<{tag}{"" if i == 0 or not numeric else " class=n"}>{escape(str(c))}</{tag}>'
                       for i, c in enumerate(row))

    body = "".join(f'<tr{" class=bottleneck" if marks and marks[i] else ""}>{cells("td", r)}</tr>'
                   for i, r in enumerate(rows))
    return f"<table><thead><tr>{cells('th', headers)}</tr></thead><tbody>{body}</tbody></table>"


def _page(title: str, body: list[str]) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{escape(title)}</title><style>{_CSS}</style></head>\n<body>\n" + "\n".join(body)
            + "\n</body></html>\n")
