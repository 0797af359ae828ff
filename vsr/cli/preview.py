"""`vsr preview IN`: a few frames upscaled beside bicubic, and what the whole run will cost on this machine."""

from __future__ import annotations

import time
from dataclasses import replace

from vsr.cli.settings import PrecisionLine, add_upscale_options, to_int, upscale_settings


def add_parser(sub) -> None:
    p = sub.add_parser("preview", help="upscale a few frames, compare with bicubic, estimate the whole run",
                       description="Upscale a few frames of IN around --at with the options of 'vsr upscale', write "
                                   "bicubic | vsr side by side (PNG, with a zoomed crop) or an HTML page with a "
                                   "slider, and print the estimated time and output size of the whole run.")
    p.add_argument("input", help="video file, or folder of frames (*.png, *.jpg, *.tif, *.bmp, *.webp)")
    p.add_argument("--at", default=None, metavar="TIME|FRAME",
                   help="where: a frame index (120) or a time (12.5s, 1:02.5); default: the middle")
    p.add_argument("--frames", dest="preview_frames", default="3", metavar="N",
                   help="frames to upscale around it, 2 or more (default 3; they time the run)")
    p.add_argument("--out", default="preview.png", metavar="FILE.png|FILE.html",
                   help="the picture (default preview.png)")
    p.add_argument("--suffix", default=None, metavar=".mp4",
                   help="container the whole run would write (default: the input's; it picks the default codec)")
    p.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    add_upscale_options(p, frames=False)
    p.set_defaults(func=run)


def _duration(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}h{s // 60 % 60:02d}m{s % 60:02d}s" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


def _cached(p) -> str:
    if p.cached_build_s < 0.05:
        return ""
    return f" ({p.cached_build_s:.1f} s of it export and plan, which the run finds in the engine cache)"


def summary(p) -> str:
    """The estimate as a few lines (also shown on the HTML page)."""
    from vsr.pipeline.memory import Budget

    plan = p.memory_plan
    tile = plan.get("tile")
    budget = Budget(int(plan.get("budget_mb", 0)), plan.get("budget_from"))
    first = f", the first frame {p.first_frame_s:.1f} s later" if p.first_frame_s is not None else ""
    lines = [f"preview: frames {p.first}..{p.first + len(p.sr) - 1}: a warm-up of {p.warmup_s:.1f} s{_cached(p)}"
             f"{first}, then {p.seconds_per_frame:.2f} s per frame; {p.bits_per_pixel:.3f} bits per output pixel",
             f"memory plan: {'whole frames' if not tile else 'tiles of %sx%s' % tuple(tile)}, about "
             f"{plan.get('total_mb', 0):.0f} MB of {budget.named()}"]
    if p.total_frames is None:
        lines.append("whole run: the source does not say how many frames it has; no estimate")
    else:
        lines.append(f"whole run ({p.total_frames} frames): about {_duration(p.estimate_s)} on this machine, "
                     f"output about {_size(p.estimate_bytes or 0)}"
                     + (f" ({p.encoder.describe()})" if p.encoder is not None else ""))
    return "\n".join(lines)


def run(args) -> int:
    started = time.perf_counter()  # before the imports below (torch, ONNX Runtime): a run pays them too
    from vsr.errors import printable, tell
    from vsr.quality.preview import check_source, preview
    from vsr.quality.preview_page import check_out, write_preview

    request, encoder, runner = upscale_settings(args)
    encoder = replace(encoder, quiet=True)
    precision = PrecisionLine(request)  # said once the checks are past: a refused preview says its error alone
    frames = to_int(args.preview_frames, "--frames", 2)
    check_source(args.input)  # first: a missing input is the news, not an old preview.png in the way
    check_out(args.out, args.overwrite, inputs=(args.input,))
    if args.suffix is not None and not args.suffix.startswith("."):
        args.suffix = "." + args.suffix
    p = preview(args.input, at=args.at, frames=frames, backend=request, encoder=encoder, runner=runner,
                suffix=args.suffix, on_weights=precision.weights, on_start=precision.start, started=started)
    text = summary(p)
    out = write_preview(p, args.out, text, overwrite=args.overwrite)
    print(text)
    tell(f"wrote {printable(out)} (left: bicubic, right: vsr)")
    return 0
