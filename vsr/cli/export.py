"""``vsr export``: EDVR -> ONNX (and optionally the subgraph plan)."""

from __future__ import annotations

from vsr.cli.common import add_model_args, add_precision_args, positive_int

# The largest LR side exported: vsr upscale exports the frame (or tile) sizes it runs, and runs larger frames
# in tiles; a 4096 x 4096 export of EDVR-M already needs tens of GB.
MAX_SIDE = 4096


def add_parser(sub) -> None:
    p = sub.add_parser(
        "export", help="export EDVR to ONNX (opset 19, DeformConv + DepthToSpace)",
        description="Export EDVR to ONNX: input 'lr' float32 (N, T, 3, H, W) in [0, 1], output 'hr' float32 "
                    "(N, 3, 4H, 4W). Dynamic: N (batch). Fixed at export: T (the config's frames), H and W "
                    "(multiples of 4; vsr's backends pad other frame sizes up to such a bucket).")
    add_model_args(p, default_weights=None)
    p.add_argument("--height", type=positive_int, required=True,
                   help=f"LR frame height (multiple of 4, at most {MAX_SIDE})")
    p.add_argument("--width", type=positive_int, required=True,
                   help=f"LR frame width (multiple of 4, at most {MAX_SIDE})")
    p.add_argument("--out", required=True, help="output .onnx path")
    p.add_argument("--split", metavar="DIR", help="also write the subgraph plan (segments + manifest) to DIR: a "
                                                  "new or empty folder, or with --overwrite one of vsr's plans; "
                                                  "each frame's features are a per-frame segment of their own "
                                                  "(segment_features), as vsr's split backend runs them")
    p.add_argument("--per-window-features", action="store_true",
                   help="with --split: no per-frame segment, every window computes its frames' features (the plan "
                        "the CUDA runtime runs)")
    p.add_argument("--overwrite", action="store_true", help="replace --out, and the plan in --split DIR")
    add_precision_args(p)
    p.add_argument("--qdq", action="store_true",
                   help="with --precision int8: write --out in explicit Q/DQ, the form TensorRT builds INT8 from")
    p.set_defaults(func=run)


def run(args) -> int:
    from pathlib import Path

    from vsr.errors import InputError
    from vsr.export import export_onnx
    from vsr.model import load_model

    out = Path(args.out)
    if out.suffix != ".onnx":
        raise InputError(f"--out must name a .onnx file, got {out}")
    if not out.parent.is_dir():
        raise InputError(f"output folder does not exist: {out.parent}")
    if out.is_dir() or (out.exists() and not out.is_file()):
        raise InputError(f"--out {out} is {'a folder' if out.is_dir() else 'not a regular file'}: give the model's "
                         "file name")
    if out.exists() and not args.overwrite:
        raise InputError(f"{out} exists (pass --overwrite to replace it)")
    if max(args.height, args.width) > MAX_SIDE:
        raise InputError(f"--height {args.height} --width {args.width}: at most {MAX_SIDE} each (vsr upscale runs "
                         "larger frames in tiles of an export this size or smaller)")
    if args.split:
        _check_split(Path(args.split), args.overwrite)
    if args.qdq and args.precision != "int8":
        raise InputError("--qdq needs --precision int8")
    model, cfg = load_model(args.weights, args.config)
    path = export_onnx(model, cfg, out, args.height, args.width)
    print(f"wrote {path} ({cfg.name}, input (N, {cfg.num_frame}, 3, {args.height}, {args.width}))")
    if args.qdq:
        from vsr.quant import QuantConfig
        from vsr.quant.qdq import export_int8_qdq

        export_int8_qdq(path, path, QuantConfig(calibration=args.int8_calibration))
        print(f"rewrote {path} in explicit Q/DQ (int8 convolutions, for TensorRT)")
    if args.split:
        plan_dir = _write_plan(path, Path(args.split), args)
        print(f"wrote {args.precision} plan {plan_dir.directory}")
    return 0


def _check_split(folder, overwrite: bool) -> None:
    """``--split DIR`` must be new, empty, or (with ``--overwrite``) a plan vsr wrote: every file in it named by
    its manifest.  A folder holding anything else is refused before the export starts."""
    import json

    from vsr.errors import InputError
    from vsr.plan.plan import MANIFEST

    if not folder.exists():
        if not folder.absolute().parent.is_dir():  # (as an output file's: its folder must exist; it made them all)
            raise InputError(f"--split {folder}: no folder {folder.absolute().parent} to make it in")
        return
    if not folder.is_dir():
        raise InputError(f"--split {folder} is not a folder")
    names = {p.name for p in folder.iterdir()}
    if not names:
        return
    try:
        listed = set(json.loads((folder / MANIFEST).read_text())["files"]) | {MANIFEST}
    except (OSError, ValueError, KeyError, TypeError):
        listed = set()
    others = sorted(names - listed) if listed else sorted(names)
    if others:
        raise InputError(f"--split {folder} holds {others[0]!r}, which is not part of a vsr plan: give a new or "
                         "empty folder")
    if not overwrite:
        raise InputError(f"--split {folder} holds a plan already (pass --overwrite to replace it)")


def _write_plan(path, out, args):
    from vsr.plan import write_plan

    front = not args.per_window_features
    if args.precision == "fp32":
        return write_plan(path, out, front=front)
    from vsr.quant import QuantConfig, int8_plan_transform

    cfg = QuantConfig(calibration=args.int8_calibration)
    return write_plan(path, out, precision="int8", quant=cfg.digest, transform=int8_plan_transform(cfg),
                      front=front)
