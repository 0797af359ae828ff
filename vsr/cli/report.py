"""``vsr report RUN.json [B.json] [--html OUT.html] [--json]``: read the report of ``vsr upscale --report``."""

from __future__ import annotations


def add_parser(sub) -> None:
    p = sub.add_parser("report", help="show a run report (from vsr upscale --report), or compare two",
                       description="Print the per-stage and per-backend-step tables of a run report, the memory "
                                   "plan and the settings; with two reports, the second beside the first with "
                                   "ratios B/A.  --html writes one self-contained page with the run's timeline.")
    p.add_argument("reports", nargs="+", metavar="RUN.json", help="one report, or two to compare (A B)")
    p.add_argument("--html", default=None, metavar="OUT.html",
                   help="also write the report as an HTML page (- : the page to standard output, instead of the "
                        "tables)")
    p.add_argument("--json", action="store_true", help="print the tables as JSON instead of text")
    p.add_argument("--overwrite", action="store_true", help="replace OUT.html if it exists")
    p.set_defaults(func=run)


def run(args) -> int:
    import json

    from vsr.errors import InputError, printable, tell
    from vsr.outfiles import check_file_output, write_file_output
    from vsr.report import html, render
    from vsr.report.load import escaped, load_run

    if len(args.reports) > 2:
        raise InputError(f"vsr report takes one report, or two to compare, not {len(args.reports)}")
    if args.json and args.html == "-":
        raise InputError("--html - puts the page on standard output, where --json would print the tables: give "
                         "one of them (or --html FILE)")
    if args.html is not None:
        out = check_file_output(args.html, "--html", "page", overwrite=args.overwrite, inputs=tuple(args.reports))
    runs = [load_run(p) for p in args.reports]
    shown = [escaped(r) for r in runs]  # the terminal's copy: a report's settings hold file names
    if len(runs) == 1:
        data, text = render.to_json(runs[0]), render.render_text(shown[0])
        page = html.render_html(shown[0]) if args.html else None  # (a page on a terminal too: escaped)
    else:
        data, text = render.compare(*runs), render.render_compare_text(*shown)
        page = html.render_compare_html(*shown) if args.html else None
    if page is not None:
        write_file_output(out, page)
        if out is None:
            return 0  # the page is what standard output holds
    print(json.dumps(data, indent=2) if args.json else text)
    if page is not None:  # after the report, on stderr: the last thing a person sees, and no part of --json
        tell(f"vsr: wrote {printable(str(out))}")
    return 0
