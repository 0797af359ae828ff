"""`vsr upscale IN OUT`: upscale a video (or a folder of PNG frames) x4, faithful to the source."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

from vsr.cli.common import add_precision_args, precision_options
from vsr.errors import InputError


def add_parser(sub) -> None:
    p = sub.add_parser("upscale", help="upscale a video or a folder of PNG frames x4",
                       description="Upscale IN x4 into OUT.  OUT's suffix picks the container (.mp4, .mkv, .mov, "
                                   "...); a name without suffix, or a folder, gets %08d.png frames.  Audio and "
                                   "subtitles are copied; timestamps, colour and rotation kept.")
    p.add_argument("input", help="video file, or folder of *.png frames")
    p.add_argument("output", help="video file, or folder for PNG frames")
    m = p.add_argument_group("model")
    m.add_argument("--weights", default="default", help="checkpoint file, 'default' (bundled) or 'random' (tests)")
    m.add_argument("--config", default=None, help="model config name or TOML file (default: from the weights)")
    m.add_argument("--backend", default="auto", help="auto | ort | torch | cuda (default: auto = cuda where torch "
                   "sees a GPU and cupy or pycuda is installed, else ONNX Runtime)")
    m.add_argument("--plan", default="auto", help="auto | whole | split (ONNX Runtime graph plan)")
    m.add_argument("--threads", default=None, help="inference threads (default: all cores)")
    add_precision_args(p)
    r = p.add_argument_group("runner")
    r.add_argument("--batch", default="1", help="windows (or tiles) per inference call (default 1)")
    r.add_argument("--frames", default=None, metavar="A:B", help="only output frames A..B-1 (0-based)")
    r.add_argument("--tile", default=None, help="LR tile side in pixels; 0 = never tile (default: from "
                                                "--memory-budget)")
    r.add_argument("--tile-overlap", default="16", help="LR pixels of context around each tile (default 16)")
    r.add_argument("--memory-budget", default="3072", metavar="MB",
                   help="peak memory of the whole run (model, frames in flight, encoder); sets the automatic "
                        "tile size (default 3072)")
    e = p.add_argument_group("encoder")
    e.add_argument("--codec", default=None, help="video encoder: libx264 (default where the container holds "
                                                 "H.264), libx265, libsvtav1, ffv1, prores_ks, ...")
    e.add_argument("--crf", default=None, help="constant rate factor (codec's default if omitted)")
    e.add_argument("--preset", default=None, help="encoder preset")
    e.add_argument("--pix-fmt", default=None, help="output pixel format (default: the source's, e.g. "
                                                   "yuv420p10le for 10-bit)")
    e.add_argument("-x", dest="encoder_options", action="append", default=[], metavar="KEY=VALUE",
                   help="encoder option, repeatable (e.g. -x tune=film -x x264-params=aq-mode=3)")
    o = p.add_argument_group("output")
    o.add_argument("--report", default=None, metavar="RUN.JSON", help="write per-stage timings and settings")
    o.add_argument("--quiet", action="store_true", help="no progress bar, no summary table")
    o.add_argument("--overwrite", action="store_true", help="replace OUTPUT if it exists")
    p.set_defaults(func=run)


def _int(value, option: str, minimum: int) -> int:
    try:
        v = int(value)
    except (TypeError, ValueError):
        raise InputError(f"{option} must be an integer, not {value!r}") from None
    if v < minimum:
        raise InputError(f"{option} must be >= {minimum}, not {v}")
    return v


def parse_frames(text: str | None) -> tuple[int, int | None]:
    """``"A:B"``, ``"A:"``, ``":B"`` -> (A, B or None)."""
    if text is None:
        return 0, None
    parts = text.split(":")
    if len(parts) != 2:
        raise InputError(f"--frames must be A:B (e.g. 0:100), not {text!r}")
    a = _int(parts[0], "--frames start", 0) if parts[0] else 0
    b = _int(parts[1], "--frames stop", 1) if parts[1] else None
    if b is not None and b <= a:
        raise InputError(f"--frames {text}: stop must be greater than start")
    return a, b


def parse_options(items: list[str]) -> tuple[tuple[str, str], ...]:
    out = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InputError(f"-x takes KEY=VALUE, not {item!r}")
        out.append((key, value))
    return tuple(out)


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def run(args) -> int:
    from vsr.backends import BACKENDS, PLANS, BackendRequest, backend_options
    from vsr.pipeline import RunnerSettings, upscale
    from vsr.video import EncoderSettings

    if args.backend not in BACKENDS:
        raise InputError(f"--backend must be auto, ort, torch or cuda, not {args.backend!r}")
    if args.plan not in PLANS:
        raise InputError(f"--plan must be auto, whole or split, not {args.plan!r}")
    crf = None
    if args.crf is not None:
        try:
            crf = float(args.crf)
        except ValueError:
            raise InputError(f"--crf must be a number, not {args.crf!r}") from None
    threads = _int(args.threads, "--threads", 1) if args.threads is not None else None
    request = BackendRequest(args.weights, args.config, backend_options(args.backend, args.plan, threads,
                                                                               **precision_options(args)))
    tile = _int(args.tile, "--tile", 0) if args.tile is not None else None
    overlap = _int(args.tile_overlap, "--tile-overlap", 0)
    if tile and tile <= 2 * overlap:
        raise InputError(f"--tile {tile} must be larger than twice --tile-overlap {overlap}")
    runner = RunnerSettings(batch=_int(args.batch, "--batch", 1), tile=tile, overlap=overlap,
                            memory_budget_mb=_int(args.memory_budget, "--memory-budget", 256),
                            frames=parse_frames(args.frames))
    encoder = EncoderSettings(codec=args.codec, crf=crf, preset=args.preset, pix_fmt=args.pix_fmt,
                              options=parse_options(args.encoder_options), quiet=args.quiet)
    report_path = Path(args.report) if args.report else None
    if report_path is not None and not report_path.parent.is_dir():
        raise InputError(f"--report folder does not exist: {report_path.parent}")

    bars = []
    totals = []

    def progress(total):
        if args.quiet:
            return None
        totals.append(total)
        return lambda n: bars[-1].update(n)

    def on_start():
        # the bar appears once the plan is made and the backend is warm: a run refused by its memory plan
        # prints only its error, and the bar's rate and ETA leave out the export, plan build and session load
        if totals:
            from tqdm import tqdm

            bars.append(tqdm(total=totals[-1], unit="frame", desc="upscale", file=sys.stderr, dynamic_ncols=True))

    # SIGTERM/SIGHUP take the same path as Ctrl-C, so the temporary output is removed
    previous = {s: signal.signal(s, _raise_interrupt) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        report = upscale(args.input, args.output, backend=request, encoder=encoder, runner=runner,
                         overwrite=args.overwrite, progress=progress, on_start=on_start)
    finally:
        for bar in bars:
            bar.close()
        for s, h in previous.items():
            signal.signal(s, h)
    if report_path is not None:
        tmp = report_path.with_name(f".{report_path.name}.vsr-partial-{os.getpid()}")
        tmp.write_text(json.dumps(report.to_dict(), indent=2) + "\n")
        os.replace(tmp, report_path)
    if not args.quiet:
        print(report.table(), file=sys.stderr)
    return 0
