"""Argument helpers shared by subcommands."""

from __future__ import annotations

import argparse


def positive_int(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {s!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {s!r}")
    return v


def add_model_args(p: argparse.ArgumentParser, default_weights: str | None = "default") -> None:
    req = default_weights is None
    p.add_argument("--weights", required=req, default=default_weights,
                   help="checkpoint (.pth: BasicSR, mmagic or plain state dict), 'default' or 'real' "
                        "(bundled; 'real' for compressed video), a fetched official checkpoint's name (vsr models) "
                        "or 'random' (seeded random init, for testing)"
                        + ("" if req else f"; default: {default_weights}"))
    p.add_argument("--config", default=None,
                   help="model config name in configs/ or a .toml path (default: recognised from the "
                        "checkpoint, else edvr-m); see 'vsr models'")


def add_precision_args(p: argparse.ArgumentParser, auto: bool = False, scales: bool = True) -> None:
    """``--precision``, ``--int8-scales``, ``--int8-calibration`` (the split plan's int8 segments); ``auto``: with
    ``--precision auto``, the default (``vsr upscale``, ``preview``, ``jobs add``: :mod:`vsr.backends.precision`);
    ``scales=False``: a command that runs no plan (``vsr export``), where ``--int8-scales`` is not in the help and
    is None unless given (the command refuses it: the scales are chosen when a plan runs)."""
    g = p.add_argument_group("precision")
    if auto:  # None: $VSR_PRECISION, else auto (vsr.backends.precision.asked_precision)
        g.add_argument("--precision", default=None, choices=("auto", "fp32", "int8"),
                       help="auto (default: int8 in the split plan where this CPU's int8 instructions measured it "
                            "faster than fp32, AVX-512 VNNI or AMX; else fp32; said in the run's first line), "
                            "fp32, or int8 convolutions in the split plan's segments")
    else:
        g.add_argument("--precision", default="fp32", choices=("fp32", "int8"),
                       help="fp32, or int8 convolutions in the split plan's segments (default fp32)")
    g.add_argument("--int8-scales", default="runtime" if scales else None, choices=("runtime", "static", "exact"),
                   help="int8 activation scales: runtime = follow the frames (default), static = calibration, "
                        "exact = re-run until every window has its own ranges (slower)" if scales else
                   argparse.SUPPRESS)
    g.add_argument("--int8-calibration", default=None, metavar="DIR",
                   help="folder of frames (PNG, JPEG, TIFF, BMP or WebP) that calibrates the int8 plan (default: "
                        "synthetic frames)")


def precision_options(args) -> dict:
    """The keyword arguments of :func:`vsr.backends.backend_options` that ``add_precision_args`` (and
    ``--per-window-features``, where the command has it) parsed."""
    return {"precision": args.precision, "int8_scales": args.int8_scales,
            "int8_calibration": args.int8_calibration,
            "stream_features": not getattr(args, "per_window_features", False)}


def unused_int8_options(args) -> list[str]:
    """The int8 options given that only an int8 plan uses: ``--int8-scales`` other than its default (runtime
    asks for nothing a run without it would not do) and ``--int8-calibration``."""
    return [option for option, given in (
        ("--int8-scales", getattr(args, "int8_scales", None) not in (None, "runtime")),
        ("--int8-calibration", args.int8_calibration is not None)) if given]


def check_int8_options(args, precision: str, why: str = "") -> None:
    """``--int8-scales`` or ``--int8-calibration`` where the run builds no int8 plan (``precision``: the one it
    runs): one line, as `vsr export` refuses them (upscale, preview, jobs add and eval dropped them without a
    word); ``why``: what chose that precision, where the options do not say it.  Where the run is int8, the
    calibration folder is checked now, before any model loads."""
    from vsr.errors import InputError

    unused = unused_int8_options(args)
    if unused and precision != "int8":
        what = {"--int8-scales": "chooses the activation scales of", "--int8-calibration": "calibrates"}
        raise InputError(f"{unused[0]} needs --precision int8 (it {what[unused[0]]} the split plan's int8 "
                         "segments)" + (f": {why}" if why else ""))
    if precision == "int8":
        check_calibration_folder(args.int8_calibration)


def check_calibration_folder(calibration: str | None) -> None:
    """A ``--int8-calibration`` folder that is missing, not a folder or holds no frame
    (:func:`~vsr.quant.config.calibration_frames`): one line when the options are checked (an int8 run found it
    once the model had loaded and the run had begun)."""
    import os

    from vsr.errors import InputError
    from vsr.quant.config import calibration_frames
    from vsr.video.png_frames import KIND_NAMES

    if calibration is None:
        return
    if not os.path.isdir(calibration):
        why = "not a folder" if os.path.lexists(calibration) else "no such folder"
        raise InputError(f"--int8-calibration {calibration}: {why} (give a folder of {KIND_NAMES} frames)")
    if not calibration_frames(calibration):
        raise InputError(f"--int8-calibration {calibration}: no frames in it (give a folder of {KIND_NAMES} "
                         "frames)")
