"""``vsr jobs list`` and ``vsr jobs report``: what the store (or the broker) holds, read without a lock and
without the model (:mod:`vsr.cli.jobs`)."""

from __future__ import annotations

import json

from vsr.cli.jobs_common import broker as broker_of, distributed, job_id
from vsr.errors import printable, tell


def list_jobs(args) -> int:
    from vsr.jobs.rows import clock
    from vsr.report.render import table

    broker = broker_of(args)
    if broker:
        rows = distributed().status(broker)
    else:
        from vsr.jobs.store import JobStore

        with JobStore(args.store, write=False) as store:
            rows = [r.to_dict() for r in store.jobs()]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    cells = [[str(r.get("id")), _state(r), _progress(r), f"{r.get('chunks_done', '-')}/"
              f"{r.get('chunks_total', '-')}", f"{r['fps']:.2f}" if r.get("fps") else "-", clock(r.get("eta_s")),
              str(r.get("input")), r.get("error") or _short(r) or _waits(r)] for r in rows]
    cells = [[printable(c) for c in row] for row in cells]
    print(table(["id", "state", "progress", "chunks", "fps", "ETA", "input", "error"], cells, right=False)
          if cells else "no jobs")
    return 0


def _state(row: dict) -> str:
    """The state, ``, short`` added for a job whose input ended before what it declared, ``, damaged`` for one
    whose input was damaged (:mod:`vsr.video.damage`)."""
    marks = [m for m, key in ((", short", "ended_early"), (", damaged", "damaged")) if isinstance(row.get(key), dict)]
    return str(row.get("state")) + "".join(marks)


def _short(row: dict) -> str | None:
    early, damaged = row.get("ended_early"), row.get("damaged")
    if isinstance(early, dict):
        return (f"the input ended early ({early.get('frames_decoded')} frames of "
                f"{early.get('frames_declared') or 'more'}): {early.get('detail')}")
    if isinstance(damaged, dict):
        return (f"the input is damaged ({damaged.get('frames_with_errors')} frames decoded with errors, "
                f"{damaged.get('error_lines')} FFmpeg errors): {damaged.get('first_error')}")
    return None


def _waits(row: dict) -> str:
    """What a queued (or interrupted) job waits for, where it needs more than a CPU (a GPU): a worker with it."""
    needs = row.get("needs")
    return f"waits for a worker with {needs}" if needs and row.get("state") in ("queued", "interrupted") else ""


def _progress(row: dict) -> str:
    total, done = row.get("frames_total"), row.get("frames_done")
    if not isinstance(total, int) or not isinstance(done, int) or total <= 0:
        return "-"
    return f"{100 * min(done, total) // total}% ({done}/{total})"


def report_job(args) -> int:
    from vsr.outfiles import check_file_output, write_file_output
    from vsr.report import html, render
    from vsr.report.combine import combine_reports
    from vsr.report.load import escaped, parse_run

    broker = broker_of(args)
    if args.html is not None:  # before the store is read; never the store's own file
        from vsr.jobs.store import store_files, store_path

        out = check_file_output(args.html, "--html", "page", overwrite=args.overwrite,
                                inputs=() if broker else store_files(store_path(args.store)))
    if broker:
        reports, total = distributed().chunk_reports(broker, args.id), None
        settings, label, state = {"job": args.id}, f"job {args.id}", "on the broker"
    else:
        reports, total, label, state, settings = _stored_reports(job_id(args.id), args.store)
    for i, r in enumerate(reports):
        parse_run(r, f"{label}: the report of chunk {i}")  # checked and bounded before they are combined
    run = parse_run(combine_reports(reports, settings), label)
    if args.html:
        write_file_output(out, html.render_html(escaped(run)))  # (a page on a terminal too)
    if not (args.html and out is None):  # else the page is what standard output holds
        print(json.dumps(render.to_json(run), indent=2) if args.json else render.render_text(escaped(run)))
    if total is not None and len(reports) < total:
        tell(f"vsr: {label} is {state}: the report covers {len(reports)} of its {total} chunks")
    if args.html and out is not None:  # as vsr report says it: on stderr, no part of --json
        tell(f"vsr: wrote {printable(str(out))}")
    return 0


def _stored_reports(job: int, store_arg) -> tuple[list[dict], int, str, str, dict]:
    from vsr.jobs.store import JobStore, StoreError

    with JobStore(store_arg, write=False) as store:
        row = store.job(job)
        chunks = store.chunks(job)
    for c in chunks:
        if c["state"] == "done" and c["report_error"]:
            raise StoreError(f"job {job}: the stored report of chunk {c['idx']} is {c['report_error']}; the store "
                             "is damaged")
    reports = [c["report"] for c in chunks if c["state"] == "done" and c["report"]]
    frames = f"{chunks[0]['start']}:{chunks[-1]['stop']}" if chunks else "0:0"
    settings = {"input": row.input, "output": row.output, "frames": frames, "job": job}
    return reports, len(chunks), f"job {job}", row.state, settings
