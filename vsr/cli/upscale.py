"""`vsr upscale IN OUT`: upscale a video (or a folder of frames, or a picture) x4, faithful to the source."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

from vsr.cli.settings import (PrecisionLine, add_upscale_options, parse_frames, parse_options, parse_times,
                              times_said, upscale_settings, with_times)
from vsr.errors import InputError, tell

__all__ = ["add_parser", "long_run_line", "parse_frames", "parse_options", "run"]

LONG_RUN_S = 3600.0  # a run estimated at longer than this hears once how vsr jobs would keep its work
ESTIMATE_AFTER = 3  # frames done before the rate is trusted (the first ones wait for the stages to fill)


def add_parser(sub) -> None:
    p = sub.add_parser("upscale", help="upscale a video, a folder of frames or a picture x4",
                       description="Upscale IN x4 into OUT.  OUT's suffix picks the container (.mp4, .mkv, .mov, "
                                   "...); a name without suffix, or a folder, gets %08d.png frames.  Audio and "
                                   "subtitles are copied; timestamps, colour and rotation kept.")
    p.add_argument("input", help="video file, folder of frames (*.png, *.jpg, *.tif, *.bmp, *.webp), picture, "
                                 "or - (a stream on standard input: Y4M, NUT, MPEG-TS, Matroska, ...)")
    p.add_argument("output", help="video file, folder for PNG frames, a .png, .jpg, .tif or .webp where IN is one "
                                  "picture, or - (a stream on standard output, see --format)")
    add_upscale_options(p)
    o = p.add_argument_group("output")
    o.add_argument("--format", default=None, choices=("y4m", "nut", "matroska", "mpegts"),
                   help="container of output - (default y4m: raw frames, no audio; nut, matroska and mpegts carry "
                        "audio and take -c as files do)")
    o.add_argument("--report", default=None, metavar="RUN.JSON",
                   help="write per-stage timings and settings (- : to standard output); an existing file is "
                        "replaced only with --overwrite")
    o.add_argument("--quiet", action="store_true",
                   help="no progress bar, no summary table, no line naming a default chosen for the source "
                        "(precision, weights, a deep source's codec); warnings and errors still said (default: off)")
    o.add_argument("--overwrite", action="store_true", help="replace OUTPUT (and --report) if it exists")
    p.set_defaults(func=run)


def run(args) -> int:
    from vsr.cli.status import StatusLine

    with StatusLine(quiet=args.quiet, log_after="loading model") as status:
        # before the imports below and the GPU probe of --backend auto (torch): a person hears from vsr at once
        status.phase("choosing backend")
        return _run(args, status)


def _check_report(args) -> Path | None:
    """The ``--report`` file, checked before any work: an output like the video (:mod:`vsr.outfiles`), and never
    a file the run reads."""
    import os

    from vsr.model.config import config_path
    from vsr.outfiles import STDOUT, check_file_output
    from vsr.video.output import is_png_folder, is_stream

    if args.report == STDOUT and is_stream(args.output):
        raise InputError("--report - and OUT - would both write standard output: give the report a file name")
    frames = () if is_stream(args.output) or not is_png_folder(Path(args.output)) else (args.output,)
    # a name that is an existing file is what the run reads (a named weights/config/cut mode never is one here)
    reads = [("--weights", args.weights), ("--config", config_path(args.config) if args.config else None),
             ("--scene-cuts", args.scene_cuts)]
    return check_file_output(args.report, "--report", "report", overwrite=args.overwrite, inputs=(args.input,),
                             outputs=(args.output,), folders=frames,
                             reads=tuple((o, p) for o, p in reads if p is not None and os.path.isfile(p)))


def _write_report(args, path: Path | None, report) -> None:
    from vsr.errors import OutputError
    from vsr.outfiles import write_file_output

    try:
        write_file_output(path, json.dumps(report.to_dict(), indent=2) + "\n")
    except OutputError as e:
        raise OutputError(f"{args.output} is written, but not its report: {e}") from e


def _run(args, status) -> int:
    from vsr.cli.status import AboveBars
    from vsr.pipeline import upscale

    report_path = _check_report(args) if args.report is not None else None
    request, encoder, runner = upscale_settings(args)
    times = parse_times(args)
    if times is not None:  # resolved to --frames A:B here: the run is that run in all else
        runner = with_times(runner, args.input, times, times_said(args))
    encoder = replace(encoder, container=args.format)
    precision = PrecisionLine(request, quiet=args.quiet)

    def on_phase(name):
        precision.phase(name)  # first: the run's first line, above the phase's own
        status.phase(name)

    bars = []
    totals = []
    above = AboveBars()
    long_run = _LongRun(args.input, args.output)

    def progress(total):
        if args.quiet:
            return None
        totals.append(total)

        def update(n):
            bars[-1].update(n)
            long_run.update(n, total)
        return update

    def on_start():
        precision.start()
        status.close()
        long_run.start()
        # the bar appears once the plan is made and the backend is warm: a run refused by its memory plan
        # prints only its error, and the bar's rate and ETA leave out the export, plan build and session load
        if totals:
            from vsr.report.progress import progress_bar  # a tqdm bar on a terminal, plain lines into a log

            bars.append(progress_bar(total=totals[-1], unit="frame", desc="upscale"))
            above.start()  # a warning during the run is a line of its own, above the bar

    try:
        report = upscale(args.input, args.output, backend=request, encoder=encoder, runner=runner,
                         overwrite=args.overwrite, progress=progress, on_start=on_start,
                         on_weights=None if args.quiet else precision.weights, on_phase=on_phase,
                         notices=not args.quiet)
    finally:
        status.close()
        above.stop()
        for bar in bars:
            bar.close()
    if args.report is not None:
        _write_report(args, report_path, report)
    if not args.quiet:
        tell(report.table())
    return 0


class _LongRun:
    """Says :func:`long_run_line` once, where the progress first estimates the whole run at over an hour."""

    def __init__(self, src: str, dst: str):
        self.src, self.dst = src, dst
        self.can = _jobs_can_take(src, dst)
        self.done, self.since, self.said = 0, None, False

    def start(self) -> None:
        self.since = time.monotonic()

    def update(self, n: int, total: int | None) -> None:
        self.done += n
        if self.said or not self.can or not total or self.since is None or self.done < ESTIMATE_AFTER:
            return
        spent = time.monotonic() - self.since
        whole = spent / self.done * total
        line = long_run_line(self.src, self.dst, whole, whole - spent)
        if line is not None:
            self.said = True
            tell(line)


def _jobs_can_take(src: str, dst: str) -> bool:
    """Whether `vsr jobs` can run this: a video file in, a video file out (not a stream, PNG frames or an
    animation, which jobs refuse)."""
    from vsr.video.codecs import ANIMATION_CONTAINERS
    from vsr.video.output import is_png_folder, is_stream

    if is_stream(src) or is_stream(dst) or not Path(src).is_file():
        return False
    return not is_png_folder(Path(dst)) and Path(dst).suffix.lower().lstrip(".") not in ANIMATION_CONTAINERS


def long_run_line(src: str, dst: str, whole_s: float, left_s: float) -> str | None:
    """The line for a run its progress estimates at ``whole_s`` seconds, ``left_s`` of them to go: the output is
    a temporary file renamed at the end, so a stop (a kill, a reboot) loses all of it, where `vsr jobs` keeps
    each chunk done.  None for a run of an hour or less, and where jobs cannot take it (a stream in or out:
    nothing keeps a pipe's run; PNG frames; an animation)."""
    import shlex

    from vsr.errors import printable

    if whole_s <= LONG_RUN_S or not _jobs_can_take(src, dst):
        return None
    left = f"{left_s / 3600:.0f} h" if left_s >= 2 * 3600 else f"{max(left_s, 60) / 60:.0f} min"
    out = Path(dst).absolute()
    add = " ".join(shlex.quote(printable(a)) for a in (src, "--out-dir", str(out.parent), "--ext", out.suffix[1:]))
    return (f"vsr: about {left} to go, and a stop (a kill, a reboot) loses the whole run: `vsr jobs add {add}` "
            "with this run's options, then `vsr jobs run --until-empty`, keeps each chunk done and resumes after one")
