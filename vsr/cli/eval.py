"""`vsr eval`: PSNR/SSIM (Y and RGB) of the model and of bicubic x4 on a PNG sequence with ground truth."""

from __future__ import annotations

import json
import sys

from vsr.cli.common import add_precision_args, check_int8_options, precision_options

NO_MODEL = "bicubic"


def add_parser(sub) -> None:
    p = sub.add_parser(
        "eval", help="PSNR/SSIM of model vs bicubic on a sequence of frames with ground truth",
        description="Score x4 super-resolution against ground truth (BasicSR conventions: Y = BT.601 "
                    "limited range, no border crop, mean of per-frame values). Without --lr the LR is made "
                    "from the GT with MATLAB bicubic x1/4.")
    p.add_argument("--gt", required=True, metavar="DIR",
                   help="ground-truth frames (PNG, JPEG, TIFF, BMP or WebP, in the order their names number them: "
                        "9.png before 10.png)")
    p.add_argument("--lr", metavar="DIR", help="LR frames, GT size / 4, named as the GT frames they pair with "
                   "(default: made from the GT)")
    p.add_argument("--weights", default="default", metavar="W",
                   help="checkpoint path, 'default', 'real', 'random' (testing) or 'bicubic' (no model; default: "
                        "default)")
    p.add_argument("--no-model", action="store_true",
                   help="score only the bicubic baseline (same as --weights bicubic)")
    p.add_argument("--config", metavar="C", help="model configuration name or file (default: from the weights)")
    p.add_argument("--backend", default="auto", metavar="B", help="inference backend (default: auto)")
    p.add_argument("--frames", metavar="A:B",
                   help="score frames A..B-1 only (0-based; neighbours still feed the model)")
    p.add_argument("--crop-border", type=int, default=0, metavar="N", help="ignore N pixels at each edge (default 0)")
    p.add_argument("--batch", type=int, default=2, metavar="N", help="windows per inference call (default 2)")
    add_precision_args(p)
    p.add_argument("--degrade", metavar="D", help="make the LR from the whole GT clip with this degradation: "
                   "eval-x264-crf28 (BI then x264 CRF 28), real, mix, clean, or a TOML path (configs/degrade/)")
    p.add_argument("--seed", type=int, default=None, metavar="S", help="seed of --degrade's random draws (default 0)")
    p.add_argument("--json", action="store_true", help="print a JSON object (with per-frame values) instead of a table")
    p.set_defaults(func=run)


def parse_frames(text: str | None) -> slice | None:
    """``"A:B"``, ``"A:"``, ``":B"`` or ``"A"`` (one frame) -> a slice of frame indices."""
    from vsr.errors import InputError

    if text is None:
        return None
    try:
        if ":" not in text:
            a = int(text)
            bounds = (a, a + 1)
        else:
            lo, hi = text.split(":")
            bounds = (int(lo) if lo.strip() else None, int(hi) if hi.strip() else None)
    except ValueError:
        raise InputError(f"--frames {text!r}: expected A:B with whole numbers (e.g. 0:10)") from None
    if any(b is not None and b < 0 for b in bounds):
        raise InputError(f"--frames {text!r}: frame numbers start at 0")
    return slice(*bounds)


def run(args) -> int:
    from tqdm import tqdm

    from vsr.errors import InputError, printable
    from vsr.quality.evaluate import evaluate
    from vsr.train.degrade import clip_degradation

    frames = parse_frames(args.frames)
    if args.no_model and args.weights not in ("default", NO_MODEL):
        raise InputError(f"--no-model scores the bicubic baseline alone: --weights {printable(args.weights)} would not "
                         "be used (give one of them)")
    if args.seed is not None and args.degrade is None:
        raise InputError("--seed draws --degrade's random choices: give --degrade too (without it the LR frames "
                         "are a fixed bicubic reduction of the GT or --lr's)")
    weights = None if args.no_model or args.weights == NO_MODEL else args.weights
    if weights is None:  # (they were dropped without a word: the table gave bicubic alone)
        unused = [flag for flag, given in (
            ("--config", args.config is not None), ("--backend", args.backend != "auto"),
            ("--batch", args.batch != 2), ("--precision int8", args.precision != "fp32"),
            ("--int8-scales", args.int8_scales != "runtime"), ("--int8-calibration", args.int8_calibration is not None))
            if given]
        if unused:
            raise InputError(f"no model runs (--no-model, --weights bicubic): {', '.join(unused)} would not be used")
    if weights is not None:
        check_int8_options(args, args.precision)
    degrade = None if args.degrade is None else clip_degradation(args.degrade, args.seed or 0)
    with tqdm(desc="vsr eval", unit="frame", file=sys.stderr, disable=None, leave=False) as bar:
        def progress(done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)

        result = evaluate(args.gt, args.lr, weights=weights, config=args.config, backend=args.backend,
                          frames=frames, crop_border=args.crop_border, batch_size=args.batch, degrade=degrade,
                          progress=progress, backend_options=precision_options(args))
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print(format_table(result))
    return 0


def format_table(result) -> str:
    from vsr.errors import printable
    from vsr.quality.evaluate import LR_FROM_GT

    rows, notes = [], []
    for method in ("model", "bicubic") if result.model is not None else ("bicubic",):
        name = f"model ({printable(result.model_name)})" if method == "model" else method
        rows.append((name, result.mean(method)))
        same = result.identical(method)
        if same:  # BasicSR's mean is inf then: the other frames' figures, on a row of their own
            finite, rest = result.finite_mean(method), result.count - same
            if finite is not None:
                rows.append(("  the other frame" if rest == 1 else f"  the other {rest} frames", finite))
            which = ("the frame is" if same == 1 else f"all {same} frames are") if finite is None else \
                f"{same} of {result.count} frames {'is' if same == 1 else 'are'}"
            left = "" if finite is None else f"; the row below leaves {'it' if same == 1 else 'them'} out"
            notes.append(f"{name}: {which} identical to the ground truth (PSNR inf, as in BasicSR's mean){left}")
    width = max(len(name) for name, _ in rows)
    made = "" if result.lr_source == LR_FROM_GT else f" by {result.lr_source}"
    lr = "LR given" if result.lr_dir else f"LR made from GT{made}"
    crop = f", crop border {result.crop_border}" if result.crop_border else ""
    frames = "1 frame" if result.count == 1 else f"mean over {result.count} frames"
    lines = [f"{printable(result.gt_dir)}: {frames} ({lr}{crop})",
             f"{'':{width}}  {'PSNR-Y':>7}  {'SSIM-Y':>7}  {'PSNR-RGB':>8}  {'SSIM-RGB':>8}"]
    for name, s in rows:
        lines.append(f"{name:{width}}  {s.psnr_y:7.2f}  {s.ssim_y:7.4f}  {s.psnr_rgb:8.2f}  {s.ssim_rgb:8.4f}")
    return "\n".join(lines + notes)
