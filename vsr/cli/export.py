"""``vsr export``: EDVR -> ONNX (and optionally the subgraph plan).

Everything asked is checked before the model loads: one ``vsr: error:`` line, exit 2, nothing written.  The model,
its Q/DQ rewrite and the plan are then made under temporary names beside ``--out`` and ``--split DIR`` and
published together once all of them are done (:class:`Staged`): a failure or a stop leaves neither, and an old
``--out`` or plan as it was.
"""

from __future__ import annotations

from vsr.cli.common import add_model_args, add_precision_args, check_calibration_folder, positive_int

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
    add_precision_args(p, scales=False)  # (the scales are chosen where a plan runs)
    p.add_argument("--qdq", action="store_true",
                   help="with --precision int8: write --out in explicit Q/DQ, the form TensorRT builds INT8 from "
                        "(not with --split, whose int8 plan is made from the fp32 model)")
    p.set_defaults(func=run)


def run(args) -> int:
    from vsr.errors import printable
    from vsr.model import load_model

    out, split, quant = _checked(args)
    model, cfg = load_model(args.weights, args.config)
    staged = Staged(out, split)
    try:
        _build(model, cfg, args, quant, staged)
        staged.publish()
    finally:
        staged.clean()
    form = ", explicit Q/DQ: int8 convolutions, for TensorRT" if args.qdq else ""
    print(f"wrote {printable(args.out)} ({cfg.name}, input (N, {cfg.num_frame}, 3, {args.height}, {args.width})"
          f"{form})")
    if split is not None:
        print(f"wrote {args.precision} plan {printable(args.split)}")
    return 0


def _build(model, cfg, args, quant, staged: "Staged") -> None:
    """The model (and its Q/DQ form, and the plan) under ``staged``'s temporary names."""
    from vsr.export import export_onnx

    export_onnx(model, cfg, staged.model, args.height, args.width)
    if args.qdq:
        from vsr.quant.qdq import export_int8_qdq

        export_int8_qdq(staged.model, staged.model, quant)
    if staged.split is not None:
        _write_plan(staged.model, staged.plan(), staged.out, args.per_window_features, quant)


def _checked(args):
    """``(--out, --split DIR or None, the int8 QuantConfig or None)``, every rule of the command checked (a one-line
    :class:`~vsr.errors.InputError`), before anything loads or is written."""
    from pathlib import Path

    from vsr.errors import InputError
    from vsr.outfiles import check_file_output

    if args.split == "":
        raise InputError("--split is empty: give the plan's folder")
    if args.out and Path(args.out).suffix != ".onnx":
        raise InputError(f"--out must name a .onnx file, got {args.out}")
    theirs = tuple((o, p) for o, p in (("--weights", args.weights), ("--config", args.config))
                   if p is not None and Path(p).is_file())
    split = () if args.split is None else (args.split,)
    # the rules of every small output (vsr.outfiles), the plan folder replaced whole among them
    out = check_file_output(args.out, "--out", "model", overwrite=args.overwrite, reads=theirs, outputs=split,
                            folders=split, stdout=False)
    _check_size(args.height, args.width)
    quant = _check_precision(args)
    plan = None if args.split is None else _check_split(args.split, args.overwrite)
    return out, plan, quant


def _check_size(height: int, width: int) -> None:
    from vsr.errors import InputError

    if max(height, width) > MAX_SIDE:
        raise InputError(f"--height {height} --width {width}: at most {MAX_SIDE} each (vsr upscale runs larger "
                         "frames in tiles of an export this size or smaller)")
    if height % 4 or width % 4:
        raise InputError(f"--height {height} --width {width}: an export's sizes are multiples of 4 (vsr's "
                         "backends pad other frame sizes up to such a bucket)")


def _check_precision(args):
    """The options of ``--precision`` that this export uses, or a one-line error naming what an option needs;
    returns the int8 :class:`~vsr.quant.QuantConfig` (None: fp32)."""
    from vsr.errors import InputError

    int8 = args.precision == "int8"
    if args.int8_scales is not None:
        raise InputError("--int8-scales is chosen where a plan runs (vsr upscale --int8-scales), not stored in an "
                         "export: leave it out")
    if args.per_window_features and args.split is None:
        raise InputError("--per-window-features needs --split DIR: it chooses the segments of the plan written there")
    if args.qdq and not int8:
        raise InputError("--qdq needs --precision int8")
    if args.qdq and args.split is not None:
        # the plan's int8 transform finds no conv to quantize in a Q/DQ graph (an "int8" plan of fp32 convs), and
        # the per-frame front is not found through its Q/DQ nodes
        raise InputError("--qdq and --split are two different int8 models (the Q/DQ model for TensorRT; the plan's "
                         "int8 segments for ONNX Runtime, made from the fp32 model): export them in two runs")
    if args.int8_calibration is not None and not int8:
        raise InputError("--int8-calibration needs --precision int8 (with --split DIR or --qdq)")
    if int8 and args.split is None and not args.qdq:
        raise InputError("--precision int8 needs --split DIR (the int8 plan) or --qdq (the model in Q/DQ): a plain "
                         "export is fp32")
    if not int8:
        return None
    return _quant_config(args.int8_calibration)


def _quant_config(calibration: str | None):
    """The int8 settings, the calibration folder's frames read now: a missing folder or one without PNG frames is
    said before the export, not after it."""
    from vsr.quant import QuantConfig

    check_calibration_folder(calibration)
    cfg = QuantConfig(calibration=calibration)
    cfg.digest  # noqa: B018 -- hashes the frames now: one that cannot be read is said before the export
    return cfg


def _check_split(typed: str, overwrite: bool):
    """The folder ``--split DIR`` names (a link to a folder: the folder): new, empty, or (with ``--overwrite``) a
    plan vsr wrote, every file in it named by its manifest, where a folder can be made beside it.  A folder
    holding anything else is refused before the export starts."""
    import json
    import os
    from pathlib import Path

    from vsr.errors import InputError
    from vsr.outfiles import check_writable
    from vsr.plan.plan import MANIFEST

    folder = Path(typed)
    if os.path.islink(folder) and not folder.exists():
        raise InputError(f"--split {typed} is a symbolic link to nothing: give a new or empty folder")
    folder = Path(os.path.realpath(folder)) if os.path.islink(folder) else folder.absolute()
    if not folder.exists():
        if not folder.parent.is_dir():  # (as an output file's: its folder must exist; it made them all)
            raise InputError(f"--split {typed}: no folder {folder.parent} to make it in")
        check_writable(folder.parent, "--split")
        return folder
    if not folder.is_dir():
        raise InputError(f"--split {typed} is not a folder")
    names = {p.name for p in folder.iterdir()}
    if names:
        try:
            listed = set(json.loads((folder / MANIFEST).read_text())["files"]) | {MANIFEST}
        except (OSError, ValueError, KeyError, TypeError):
            listed = set()
        others = sorted(names - listed) if listed else sorted(names)
        if others:
            raise InputError(f"--split {typed} holds {others[0]!r}, which is not part of a vsr plan: give a new or "
                             "empty folder")
        if not overwrite:
            raise InputError(f"--split {typed} holds a plan already (pass --overwrite to replace it)")
        check_writable(folder, "--split")  # (its old files are removed)
    check_writable(folder.parent, "--split")  # the new plan is made beside it and renamed into place
    return folder


def _write_plan(model, folder, source, per_window_features: bool, quant):
    from vsr.plan import write_plan

    front = not per_window_features
    if quant is None:
        return write_plan(model, folder, front=front, source=source)
    from vsr.quant import int8_plan_transform

    return write_plan(model, folder, precision="int8", quant=quant.digest, transform=int8_plan_transform(quant),
                      front=front, source=source)


class Staged:
    """The outputs of one export under temporary names beside where they go: :attr:`model` beside ``out``, the
    plan folder (:meth:`plan`) beside ``split``.  :meth:`publish` renames them into place with the stop signals
    held (an old plan folder renamed aside first, removed after); :meth:`clean` removes what was not published."""

    def __init__(self, out, split=None):
        import os

        from vsr.leftovers import files_only, remove_partials

        self.out, self.split = out, split
        remove_partials(out)  # (what runs killed outright left)
        if split is not None:
            remove_partials(split, tail="-[0-9a-f]{8}", folder=files_only)
            remove_partials(split, folder=files_only, aside=True)  # (an old plan a killed publish left aside)
        self.model = out.with_name(f".{out.name}.vsr-partial-{os.getpid()}")
        self._plan = self._aside = None

    def plan(self):
        """A new, empty folder beside ``split`` (the user's usual permissions, unlike mkdtemp's 0700)."""
        import os

        self._plan = self.split.with_name(f".{self.split.name}.vsr-partial-{os.getpid()}-{os.urandom(4).hex()}")
        os.mkdir(self._plan)
        return self._plan

    def publish(self) -> None:
        import os

        from vsr import interrupt

        moves = []
        if self._plan is not None:
            if os.path.lexists(self.split):
                self._aside = self.split.with_name(f".{self.split.name}.vsr-old-{os.getpid()}")
                moves.append((self.split, self._aside))
            moves.append((self._plan, self.split))
        moves.append((self.model, self.out))
        done = []
        with interrupt.held():
            interrupt.check()  # nothing published after a stop (vsr.interrupt)
            try:
                for a, b in moves:
                    os.replace(a, b)
                    done.append((a, b))
            except BaseException:
                for a, b in reversed(done):  # (the old plan back in place, the new one to be removed)
                    os.replace(b, a)
                raise
            self._plan = None  # published: no longer clean()'s

    def clean(self) -> None:
        import shutil

        from vsr import interrupt

        with interrupt.held():  # (a stop now would leave a temporary behind)
            self.model.unlink(missing_ok=True)
            for folder in (self._plan, self._aside):
                if folder is not None:
                    shutil.rmtree(folder, ignore_errors=True)
