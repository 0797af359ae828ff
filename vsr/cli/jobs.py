"""``vsr jobs add|list|run|cancel|retry|report``: queued batch upscales in a job store (:mod:`vsr.jobs`).

The store is ``$XDG_DATA_HOME/vsr/jobs.db`` (``~/.local/share/vsr/jobs.db``; ``--store PATH`` or
``$VSR_JOBS_STORE``).  ``--broker URL`` sends the jobs to a Celery broker instead (:mod:`vsr.jobs.distributed`,
imported only then).  Every name printed is escaped (:func:`vsr.errors.printable`): a file name can hold a
newline or a terminal escape sequence.
"""

from __future__ import annotations

import argparse
import copy
import math
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from pathlib import Path

from vsr.cli.jobs_common import BROKER_ENV, broker as broker_of, distributed, job_id
from vsr.cli.jobs_show import list_jobs, report_job
from vsr.cli.settings import (add_upscale_options, parse_times, times_line, times_said, to_int, upscale_settings,
                              with_times)
from vsr.errors import InputError, VsrError, printable, tell

MAX_WORKERS = 256
MAX_LEASE_S = 7 * 24 * 3600.0
MAX_CHUNK_FRAMES = 10**9


def add_parser(sub) -> None:
    p = sub.add_parser("jobs", help="queue upscales and work through them (resumable, chunked)",
                       description="A queue of upscales that survives crashes: each video is cut into chunks, "
                                   "every chunk is committed once, the output appears when all are joined.")
    jobs = p.add_subparsers(dest="jobs_command", metavar="ACTION")
    jobs.required = True
    _add_add(jobs)
    q = _sub(jobs, "list", "show the jobs: state, progress, speed, ETA, error")
    q.add_argument("--json", action="store_true", help="print the jobs as JSON")
    q.add_argument("--broker", default=None, metavar="URL", help="show the jobs of a Celery broker instead "
                                                                 f"(default: ${BROKER_ENV})")
    r = _sub(jobs, "run", "work through the queue (several at once share it safely)")
    r.add_argument("--workers", default="1", metavar="N", help=f"worker processes (default 1, at most {MAX_WORKERS})")
    r.add_argument("--devices", default=None, metavar="all|0,1",
                   help="a worker (--workers of them) per GPU, each with its own backend: all, or GPU indices")
    r.add_argument("--until-empty", action="store_true", help="exit when no job is queued, running or waiting")
    r.add_argument("--lease", default=None, metavar="S",
                   help="seconds a chunk stays claimed by a worker that stopped answering (default 60)")
    r.add_argument("--max-attempts", default=None, metavar="N",
                   help="a chunk whose worker vanished N times fails its job (default 25)")
    r.add_argument("--quiet", action="store_true", help="no line per chunk and job")
    r.add_argument("--broker", default=None, metavar="URL", help="run a Celery worker on this broker instead "
                                                                 f"(default: ${BROKER_ENV})")
    for name, text in (("cancel", "stop a queued, running or waiting job"),
                       ("retry", "queue a failed or cancelled job again (its done chunks are kept)")):
        c = _sub(jobs, name, text)
        c.add_argument("id", help="job id (see vsr jobs list)")
        c.add_argument("--broker", default=None, metavar="URL", help=f"a job of a Celery broker (default: "
                                                                     f"${BROKER_ENV})")
    rep = _sub(jobs, "report", "the per-stage timing of a job, summed over its chunks")
    rep.add_argument("id", help="job id (see vsr jobs list)")
    rep.add_argument("--json", action="store_true", help="print the tables as JSON")
    rep.add_argument("--html", default=None, metavar="OUT.html",
                     help="also write the report as an HTML page (- : the page to standard output, instead of "
                          "the tables)")
    rep.add_argument("--overwrite", action="store_true", help="replace OUT.html if it exists")
    rep.add_argument("--broker", default=None, metavar="URL", help=f"a job of a Celery broker (default: "
                                                                   f"${BROKER_ENV})")


def _sub(jobs, name: str, text: str) -> argparse.ArgumentParser:
    p = jobs.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".")
    p.add_argument("--store", default=None, metavar="PATH", help="job store (default: $VSR_JOBS_STORE, else "
                                                                 "$XDG_DATA_HOME/vsr/jobs.db, i.e. "
                                                                 "~/.local/share/vsr/jobs.db)")
    p.set_defaults(func={"list": list_jobs, "report": report_job}.get(name) or globals()[f"_{name}"])
    return p


def _add_add(jobs) -> None:
    a = _sub(jobs, "add", "queue one job per video")
    a.add_argument("inputs", nargs="+", metavar="IN", help="video file, folder of videos, folder of frames (one "
                                                            "job), or job file (.toml, see jobs/example.toml)")
    a.add_argument("--out-dir", default=None, metavar="DIR", help="where the outputs go: DIR/<input stem>.<ext>")
    a.add_argument("--ext", default=None, help="output container, a bare suffix (default: the input's where it "
                                               "keeps timestamps, else mp4 or mkv)")
    a.add_argument("--chunk-frames", default=None, metavar="N", help="frames per chunk (default 300)")
    a.add_argument("--overwrite", action="store_true", help="replace outputs that exist")
    a.add_argument("--broker", default=None, metavar="URL", help="submit to a Celery broker (redis://HOST:PORT/N; "
                                                                 f"default: ${BROKER_ENV}, where no --store is given)")
    add_upscale_options(a)


def _seconds(value, option: str, low: float, high: float) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError, OverflowError):
        raise InputError(f"{option} must be a number of seconds, not {value!r}") from None
    if not (math.isfinite(v) and low <= v <= high):
        raise InputError(f"{option} must be between {low:g} and {high:g} seconds, not {value}")
    return v


def _bounded_int(value, option: str, low: int, high: int) -> int:
    v = to_int(value, option, low)
    if v > high:
        raise InputError(f"{option} must be at most {high}, not {v}")
    return v


def _groups(args) -> list[tuple[list[Path], Path, str | None, int | None, bool, object, object]]:
    """The command line's inputs as groups sharing out_dir, ext, chunk frames, overwrite and options: the
    videos and folders, then each job file (its keys over the command line's; last, its JobFile)."""
    from vsr.jobs.jobfile import read_job_file

    out_dir = Path(args.out_dir) if args.out_dir else None
    chunk = _bounded_int(args.chunk_frames, "--chunk-frames", 1, MAX_CHUNK_FRAMES) \
        if args.chunk_frames is not None else None
    plain = [Path(i) for i in args.inputs if Path(i).suffix.lower() != ".toml"]
    groups = []
    if plain:
        if out_dir is None:
            raise InputError("vsr jobs add needs --out-dir (or job files that name their out_dir)")
        groups.append((plain, out_dir, args.ext, chunk, args.overwrite, args, None))
    for i in args.inputs:
        if Path(i).suffix.lower() != ".toml":
            continue
        f = read_job_file(i)
        if f.out_dir is None and out_dir is None:
            raise InputError(f"job file {i} names no out_dir, and no --out-dir was given")
        options = copy.copy(args)
        for key, value in f.upscale.items():
            setattr(options, key, value)
        groups.append((list(f.inputs), f.out_dir or out_dir, f.ext or args.ext, f.chunk_frames or chunk,
                       args.overwrite if f.overwrite is None else f.overwrite, options, f))
    return groups


def _add(args) -> int:
    from vsr.jobs.inputs import output_folders

    broker = broker_of(args)
    with output_folders() as created:  # until the jobs are queued: a failed add leaves no new folder
        added, where = _queue(args, broker, created)
    for job, spec, chunks, times in added:
        frames = sum(c.stop - c.start for c in chunks)
        print(printable(f"job {job}: {spec.input} -> {spec.output} ({frames} frames in {len(chunks)} "
                        f"chunk{'s' if len(chunks) != 1 else ''}{times})"))
    how = ((f" --broker {where}" if args.broker is not None else f" (${BROKER_ENV} set)") if broker
           else f" --store {where}" if args.store is not None else "")
    place = "on the broker" if broker else "in the job store"
    print(printable(f"queued {len(added)} job{'s' if len(added) != 1 else ''} {place} {where}; `vsr jobs run{how}` "
                    "works through them"))
    _say_waits(added)
    return 0


def _say_waits(added: list) -> None:
    """The jobs this machine cannot run (``--backend cuda`` and no GPU) wait for a worker that can: said, not
    refused, since the store or the broker may be shared with machines that have one (docs/jobs.md)."""
    from vsr.jobs.needs import Machine, job_need, waiting_line

    machine, left, lacks = Machine(), [], None
    for job, spec, *_ in added:
        need = job_need(spec.to_dict())
        lacks = machine.lacks(need) or lacks
        if machine.lacks(need):
            left.append((job, need))
    if left:
        them = "it" if len(left) == 1 else "them"
        tell(printable(f"vsr: {waiting_line(left)}: this machine cannot run {them} ({lacks})"))


def _queue(args, broker: str | None, created: list[Path]) -> tuple[list, str]:
    """Check, plan and queue the jobs of ``vsr jobs add``: ``[(id, spec, chunks, times)]`` (``times``: what
    ``--start``/``--end`` chose, for the add line, or "") and where they went."""
    from vsr.jobs.inputs import job_specs
    from vsr.jobs.chunking import DEFAULT_CHUNK_FRAMES, plan_job

    taken: dict = {}
    planned = []  # (spec, chunk frames, job file, out_dir)
    said_times: dict[str, str] = {}  # output -> the frames --start/--end chose
    backends = []  # each group's, for the precision line
    said: set = set()
    if not broker:
        from vsr.jobs.store import JobStore, store_path

        store = store_path(args.store)
        # a file there must be a job store (said before any source is measured), or empty: SQLite's first step
        if store.exists() and not (store.is_file() and store.stat().st_size == 0):
            with JobStore(args.store, write=False):
                pass
    for inputs, out_dir, ext, chunk, overwrite, options, job_file in _groups(args):
        with _in_its_words(job_file, out_dir):
            with _in_its_words(job_file, out_dir, warnings=True):
                backend, encoder, runner = upscale_settings(options)
                times = parse_times(options)
            # whether an encoder prints its banner is the worker's to decide (`vsr -v jobs run`), not part of the
            # job: stored as before, so `vsr -v jobs add` and `vsr jobs add` make the same job (the same key, the
            # same chunks)
            encoder = replace(encoder, quiet=False)
            specs = list(job_specs(inputs, out_dir, ext, backend, encoder, runner, overwrite, taken, created,
                                   on_weights=_say_weights))
            if times is not None:  # once, now: the job is the --frames A:B job (its key, its chunks)
                specs = [_at_times(spec, times, options, said_times) for spec in specs]
        backends.append(backend)
        planned += [(spec, chunk or DEFAULT_CHUNK_FRAMES, job_file, out_dir) for spec in specs]
    if not broker:
        _not_the_store([spec for spec, *_ in planned], store_path(args.store))
    jobs, codecs = [], []
    for spec, frames, job_file, out_dir in planned:  # probes every input and encoder first
        with _in_its_words(job_file, out_dir):
            jobs.append(plan_job(spec, frames, on_encoder=lambda c, s=spec: codecs.append((s, c.default_line))))
    for backend in backends:  # once every input is known to be a video it can upscale: a refusal comes alone
        _say_precision(backend, said)
    if broker:
        celery = distributed()
        ids = celery.submit_planned(jobs, broker)
        created.clear()  # queued jobs write there: their folders stay whatever fails next
        where = celery.safe_url(broker)
        forgets = celery.forgets(broker)
        if forgets:  # this machine keeps the jobs (vsr.jobs.ledger); the operator should know the broker does not
            tell(printable(f"vsr: {forgets}; this machine keeps its own record of these jobs: `vsr jobs list` "
                            "shows one the broker forgot as lost, `vsr jobs retry` sends it again"))
    else:
        from vsr.jobs.store import JobStore

        with JobStore(args.store, create=True) as store:
            ids = store.add_jobs(jobs)
            where = str(store.path)
    for spec, line in codecs:  # a deep source's default codec, as vsr upscale says it: once the jobs are queued
        if line:
            tell(printable(f"vsr: {Path(spec.input).name}: {line}"))
    return [(i, spec, chunks, said_times.get(spec.output, "")) for i, (spec, chunks) in zip(ids, jobs)], where


def _at_times(spec, times: tuple, options, said: dict[str, str]):
    """``spec`` with the frames ``--start``/``--end`` name in its input; ``said``: its add line's words."""
    name = printable(Path(spec.input).name)
    runner = with_times(spec.runner, spec.input, times, f"{name}: {times_said(options)}")
    said[spec.output] = ", " + times_line(runner.frames, times)
    return replace(spec, runner=runner)


def _not_the_store(specs: list, store: Path) -> None:
    """No job's output is the store or a file SQLite keeps beside it: the join would replace the queue with the
    video (the job then said done, and its video was gone)."""
    from vsr.jobs.store import store_file_at

    for spec in specs:
        if store_file_at(spec.output, store) is not None:
            raise InputError(f"the output of {spec.input}, {spec.output}, is the job store's own file: give the job "
                             "another --out-dir or --ext, or the store another name")


@contextmanager
def _in_its_words(job_file, out_dir: Path, warnings: bool = False):
    """Errors (and with ``warnings``, the warnings) about the options a job file set name its keys, as its own
    type errors do, not the command line's options (`--tile 33: ...` for a job file's ``tile = 33``)."""
    import warnings as w

    if job_file is None:
        yield
        return
    from vsr.jobs.jobfile import in_its_words

    held = w.catch_warnings(record=True) if warnings else nullcontext([])
    try:
        with held as caught:
            yield
    except VsrError as e:
        said = in_its_words(job_file, str(e), out_dir)
        if said is None:
            raise
        raise type(e)(said) from None
    finally:
        for c in caught:
            w.showwarning(in_its_words(job_file, str(c.message), out_dir) or c.message, c.category, c.filename,
                          c.lineno)


def _say_precision(request, said: set) -> None:
    """The precision chosen for the jobs (once per choice): decided here, on the machine that adds them, and kept
    in each job, so that every worker runs it and a job's chunks never mix int8 and fp32 (docs/jobs.md)."""
    choice = request.precision
    if choice is not None and choice.asked == "auto" and choice not in said:
        said.add(choice)
        tell(printable(f"vsr: precision: {choice.line()}; kept in the job: every worker runs "
                        f"{choice.precision}"))


def _say_weights(src: Path, choice) -> None:
    tell(printable(f"vsr: weights for {src.name}: {choice.line()}"))


def _run(args) -> int:
    workers = _bounded_int(args.workers, "--workers", 1, MAX_WORKERS)
    broker = broker_of(args)
    devices = _devices(args.devices, workers, broker)
    if broker:
        local = [o for o, given in (("--until-empty", args.until_empty), ("--lease", args.lease is not None),
                                    ("--max-attempts", args.max_attempts is not None)) if given]
        if local:  # (it was ignored: `run --broker --until-empty` in a script never ended)
            raise InputError(f"{local[0]} is for workers on a job store: a Celery worker (--broker) runs until it "
                             "is stopped, and its broker hands a lost chunk back (docs/jobs.md)")
        distributed().run_worker(broker, concurrency=workers)
        return 0
    from vsr.jobs.store import store_path
    from vsr.jobs.worker import WorkerSettings, run_workers

    from functools import partial

    from vsr.cli import speak_as_vsr
    from vsr.cli.status import StatusLine

    # several workers share the terminal: each phase on a line of its own rather than one line rewritten by all
    status = partial(StatusLine, tty=False) if workers * len(devices or [0]) > 1 else StatusLine
    lease = _seconds("60" if args.lease is None else args.lease, "--lease", 1, MAX_LEASE_S)
    settings = WorkerSettings(lease_s=lease, until_empty=args.until_empty,
                              quiet=args.quiet, status=status, encoder_log=args.verbose,
                              setup=partial(speak_as_vsr, args.verbose))
    if args.max_attempts is not None:
        settings = replace(settings, max_attempts=_bounded_int(args.max_attempts, "--max-attempts", 1, 10**6))
    # SIGTERM/SIGHUP take Ctrl-C's path (vsr.cli.main): the claims in progress go back to the queue
    return run_workers(store_path(args.store), workers, settings, devices)


def _devices(text: str | None, workers: int, broker: str | None) -> list[str] | None:
    """``--devices``' torch device names (:func:`vsr.backends.cuda.device_list`), None without it."""
    if text is None:
        return None
    if broker:
        raise InputError("--devices is for local workers; a Celery worker (--broker) uses one device")
    from vsr.backends.cuda import device_list

    devices = device_list(text)
    if workers * len(devices) > MAX_WORKERS:
        raise InputError(f"--devices {text} with --workers {workers}: at most {MAX_WORKERS} workers")
    return devices


def _cancel(args) -> int:
    from vsr.jobs.store import JobStore

    broker = broker_of(args)
    if broker:
        if distributed().cancel(broker, args.id) == "lost":
            print(printable(f"cancelled job {args.id}: the broker had forgotten it; this machine's record of it is "
                            "removed (its committed chunks stay beside its output)"))
        else:
            print(printable(f"cancelled job {args.id} (a chunk in progress finishes, none starts)"))
        return 0
    job = job_id(args.id)
    with JobStore(args.store) as store:
        store.cancel(job)
        row = store.job(job)
    print(printable(f"cancelled job {job}: {row.input} -> {row.output} ({row.chunks_done} of {row.chunks_total} "
                    "chunks done; a chunk in progress finishes, none starts)"))
    return 0


def _retry(args) -> int:
    from vsr.jobs.chunks import is_committed
    from vsr.jobs.identity import check_unchanged
    from vsr.jobs.spec import ChunkSpec, JobSpec
    from vsr.jobs.store import JobStore

    broker = broker_of(args)
    if broker:
        sent = distributed().retry(broker, args.id)
        print(printable(f"job {args.id} queued again: {sent} chunk{'s' * (sent != 1)} sent"))
        return 0
    job = job_id(args.id)
    with JobStore(args.store) as store:
        spec = JobSpec.from_json(store.spec_json(job))
        check_unchanged(spec.input, spec.source)  # a job is bound to its input: a changed one fails again
        store.retry(job, committed=lambda chunk: is_committed(spec, ChunkSpec.from_dict(chunk)))
        row = store.job(job)
    print(printable(f"job {job} queued again: {row.input} -> {row.output} ({row.chunks_done} of "
                    f"{row.chunks_total} chunks kept, {row.chunks_total - row.chunks_done} to compute)"))
    return 0


def run(args) -> int:
    return args.func(args)
