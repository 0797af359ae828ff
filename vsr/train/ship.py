"""Turn a training checkpoint into bundled weights: fp16 ``params`` (BasicSR layout) plus a JSON record.

``python -m vsr.train.ship runs/edvr-s-default/best.pth --overwrite`` writes ``vsr/weights/default.pth`` and
``vsr/weights/default.json`` (what was trained, on what, for how long, and the validation curve).  The JSON holds
the weights' sha256, checked at every load: both files are written under temporary names and renamed into place
with a stop deferred over the renames, so a Ctrl-C never leaves weights beside another file's record (vsr's
default weights would then fail to load), and in an order that leaves a pair the loader accepts even where a kill
lands between them (:func:`_publish`).  An existing output is replaced only with ``--overwrite``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch

from vsr import interrupt
from vsr.errors import InputError, VsrError, WeightsError, printable
from vsr.files import create_new, sha256_file, write_new
from vsr.leftovers import remove_partials
from vsr.model.weights import DEFAULT_WEIGHTS, read_checkpoint


def ship(checkpoint: str | Path, out: str | Path = DEFAULT_WEIGHTS, *, which: str = "auto",
         record: dict | None = None, overwrite: bool = False) -> dict:
    """Write the chosen weights of ``checkpoint`` to ``out`` as fp16 ``params``; returns the JSON record.

    ``which``: ``"ema"``, ``"model"``, or ``"auto"`` (the weights that scored best, as noted in ``best.pth``).
    The file keeps ``vsr.config`` so :func:`vsr.model.load_model` picks the right configuration by itself.
    An existing ``out`` or record beside it is an :class:`InputError` unless ``overwrite``.
    """
    out = Path(out)
    for existing in (out, out.with_suffix(".json")):
        # (a folder is one line at the rename, with or without --overwrite)
        if os.path.lexists(existing) and not os.path.isdir(existing) and not overwrite:
            raise InputError(f"{printable(existing)} exists (pass --overwrite to replace it)")
    if which not in ("auto", "ema", "model"):
        raise InputError(f"which={which!r}: must be one of auto, ema, model")
    ck = read_checkpoint(checkpoint)
    meta = ck.get("vsr", {})
    if which == "auto":
        which = meta.get("best_of", "ema")
    key = "params_ema" if which == "ema" else "params"
    if key not in ck or "config" not in meta:
        raise WeightsError(f"{checkpoint}: not a vsr training checkpoint (no {key!r} or no vsr.config)")
    sd = ck[key]
    train = ck.get("train", {})
    info = {
        "config": meta["config"],
        "weights": which,
        "iteration": int(train.get("iteration", 0)),
        "train_wall_s": float(train.get("wall_s", 0.0)),
        "options": meta.get("options", {}),
        "validation": train.get("history", []),
        **(record or {}),
    }
    log = Path(checkpoint).with_name("log.jsonl")
    if log.is_file():  # the whole run (all resumptions): validation curve and where each run started
        events = [e for e in map(_record, log.read_text().splitlines()) if e is not None]
        info["curve"] = [{"iteration": e["iteration"], "wall_s": e["wall_s"],
                          **{f"{tag}:{name}": round(v["psnr_y"], 3) for tag, sets in e["val"].items()
                             for name, v in sets.items()},
                          **{f"bicubic:{name}": round(v["bicubic_y"], 3)
                             for name, v in next(iter(e["val"].values())).items()}}
                         for e in events if e.get("event") == "val"]
        info["runs"] = [{k: e[k] for k in ("event", "iteration") if k in e} for e in events
                        if e.get("event") in ("start", "resume")]
        info["data"] = next((e["data"] for e in events if e.get("event") == "start"), None)
    out.parent.mkdir(parents=True, exist_ok=True)
    return _publish({"params": {k: v.half().contiguous() for k, v in sd.items()},
                     "vsr": {"config": meta["config"], "iteration": info["iteration"], "weights": which}}, info, out)


def _record(line: str) -> dict | None:
    """A log line's record; None for a blank line, or one a kill left half-written in a run not resumed since (a
    resume cuts it: vsr.train.resume)."""
    try:
        rec = json.loads(line)
    except ValueError:
        return None
    return rec if isinstance(rec, dict) else None


def _publish(weights: dict, info: dict, out: Path) -> dict:
    """``weights`` at ``out`` and ``info`` with their sha256 at ``out``'s ``.json``: both written under temporary
    names (never through a link planted there), then renamed with a stop deferred over the renames.

    A kill (nothing defers SIGKILL) between two renames leaves a pair the loader accepts, the old or the new: the
    record goes first, naming the weights it replaces as ``previous_sha256`` (the loader accepts those too), then
    the weights, then the record again without it.  A mismatch is damaged weights: vsr fails to load them."""
    record = out.with_suffix(".json")
    targets = (out, record, record.with_name(f"{record.name}.next"))
    for p in targets:
        remove_partials(p)  # (what runs killed outright left)
    temps = [p.with_name(f".{p.name}.vsr-partial-{os.getpid()}") for p in targets]
    try:
        with open(create_new(temps[0]), "wb") as f:
            torch.save(weights, f)
        info = {"sha256": sha256_file(temps[0]), **info}  # checked whenever the weights are loaded
        previous = _valid_pair_digest(out, record)
        write_new(temps[1], (json.dumps(info, indent=1) + "\n").encode())
        if previous is not None:
            write_new(temps[2], (json.dumps({**info, "previous_sha256": previous}, indent=1) + "\n").encode())
        interrupt.check()  # nothing published after a stop
        with interrupt.deferred(f"writing {printable(out)} and its record"):
            if previous is not None:
                os.replace(temps[2], record)  # the old weights and the new record: a pair (previous_sha256)
            os.replace(temps[0], out)  # the new weights: a pair with either record
            os.replace(temps[1], record)
    finally:
        for tmp in temps:
            tmp.unlink(missing_ok=True)
    return info


def _valid_pair_digest(weights: Path, record: Path) -> str | None:
    """The sha256 of the weights at ``weights`` where the record at ``record`` is theirs (a pair the loader
    accepts now, to be kept acceptable until the new one is in place), else None (none there, or a damaged one:
    never made acceptable)."""
    try:
        recorded = json.loads(record.read_text()).get("sha256")
        digest = sha256_file(weights) if os.path.isfile(weights) else None
    except (OSError, ValueError, AttributeError):
        return None
    return digest if isinstance(recorded, str) and recorded and digest and digest.startswith(recorded) else None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m vsr.train.ship", description=__doc__.splitlines()[0])
    p.add_argument("checkpoint", help="a checkpoint `vsr train` wrote (runs/NAME/best.pth, last.pth)")
    p.add_argument("--out", default=str(DEFAULT_WEIGHTS), metavar="FILE",
                   help=f"write the weights to FILE, and their record beside it, FILE with the suffix .json (default "
                        f"{DEFAULT_WEIGHTS}: vsr's bundled default weights, --weights default)")
    p.add_argument("--which", choices=("auto", "ema", "model"), default="auto",
                   help="the checkpoint's weights to ship: ema (their moving average), model (as trained), or auto: "
                        "the ones that scored best, as the checkpoint notes, else ema (default auto)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out (and its .json record)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        with interrupt.handled():  # a stop during the renames waits for both (interrupt.deferred)
            info = ship(args.checkpoint, args.out, which=args.which, overwrite=args.overwrite)
    except KeyboardInterrupt:
        print("vsr: interrupted", file=sys.stderr)
        return 130
    except VsrError as e:
        print(f"vsr: error: {e}", file=sys.stderr)
        return e.exit_code
    except OSError as e:  # --out a folder, a folder that cannot be written, a full disk: one line, as vsr's
        print(f"vsr: error: cannot write {printable(args.out)}: {e.strerror or e}", file=sys.stderr)
        return 2
    print(f"wrote {args.out} ({info['config']}, {info['weights']} weights of iteration {info['iteration']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
