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
                   help="checkpoint (.pth: BasicSR, mmagic or plain state dict), 'default' (bundled) "
                        "or 'random' (seeded random init, for testing)"
                        + ("" if req else f"; default: {default_weights}"))
    p.add_argument("--config", default=None,
                   help="model config name in configs/ or a .toml path (default: recognised from the "
                        "checkpoint, else edvr-m); see 'vsr models'")
