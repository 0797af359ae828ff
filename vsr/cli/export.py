"""``vsr export``: EDVR -> ONNX (and optionally the subgraph plan)."""

from __future__ import annotations

from vsr.cli.common import add_model_args, add_precision_args, positive_int


def add_parser(sub) -> None:
    p = sub.add_parser(
        "export", help="export EDVR to ONNX (opset 19, DeformConv + DepthToSpace)",
        description="Export EDVR to ONNX: input 'lr' float32 (N, T, 3, H, W) in [0, 1], output 'hr' float32 "
                    "(N, 3, 4H, 4W). Dynamic: N (batch). Fixed at export: T (the config's frames), H and W "
                    "(multiples of 4; vsr's backends pad other frame sizes up to such a bucket).")
    add_model_args(p, default_weights=None)
    p.add_argument("--height", type=positive_int, required=True, help="LR frame height (multiple of 4)")
    p.add_argument("--width", type=positive_int, required=True, help="LR frame width (multiple of 4)")
    p.add_argument("--out", required=True, help="output .onnx path")
    p.add_argument("--split", metavar="DIR", help="also write the subgraph plan (segments + manifest) to DIR, with "
                                                  "each frame's features as a per-frame segment of its own "
                                                  "(segment_features), as vsr's split backend runs it")
    p.add_argument("--per-window-features", action="store_true",
                   help="with --split: no per-frame segment, every window computes its frames' features (the plan "
                        "the CUDA runtime runs)")
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
    if not out.parent.exists():
        raise InputError(f"output folder does not exist: {out.parent}")
    model, cfg = load_model(args.weights, args.config)
    if args.qdq and args.precision != "int8":
        raise InputError("--qdq needs --precision int8")
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


def _write_plan(path, out, args):
    from vsr.plan import write_plan

    front = not args.per_window_features
    if args.precision == "fp32":
        return write_plan(path, out, front=front)
    from vsr.quant import QuantConfig, int8_plan_transform

    cfg = QuantConfig(calibration=args.int8_calibration)
    return write_plan(path, out, precision="int8", quant=cfg.digest, transform=int8_plan_transform(cfg),
                      front=front)
