"""Turn a training checkpoint into bundled weights: fp16 ``params`` (BasicSR layout) plus a JSON record.

``python -m vsr.train.ship runs/edvr-s-default/best.pth`` writes ``vsr/weights/default.pth`` and
``vsr/weights/default.json`` (what was trained, on what, for how long, and the validation curve).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from vsr.errors import InputError, VsrError, WeightsError, printable
from vsr.files import sha256_file
from vsr.model.weights import DEFAULT_WEIGHTS, read_checkpoint
from vsr.outfiles import write_file_output
from vsr.train.checkpoint import save_checkpoint


def ship(checkpoint: str | Path, out: str | Path = DEFAULT_WEIGHTS, *, which: str = "auto",
         record: dict | None = None) -> dict:
    """Write the chosen weights of ``checkpoint`` to ``out`` as fp16 ``params``; returns the JSON record.

    ``which``: ``"ema"``, ``"model"``, or ``"auto"`` (the weights that scored best, as noted in ``best.pth``).
    The file keeps ``vsr.config`` so :func:`vsr.model.load_model` picks the right configuration by itself.
    """
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
        events = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        info["curve"] = [{"iteration": e["iteration"], "wall_s": e["wall_s"],
                          **{f"{tag}:{name}": round(v["psnr_y"], 3) for tag, sets in e["val"].items()
                             for name, v in sets.items()},
                          **{f"bicubic:{name}": round(v["bicubic_y"], 3)
                             for name, v in next(iter(e["val"].values())).items()}}
                         for e in events if e.get("event") == "val"]
        info["runs"] = [{k: e[k] for k in ("event", "iteration") if k in e} for e in events
                        if e.get("event") in ("start", "resume")]
        info["data"] = next((e["data"] for e in events if e.get("event") == "start"), None)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    save_checkpoint({"params": {k: v.half().contiguous() for k, v in sd.items()},
                     "vsr": {"config": meta["config"], "iteration": info["iteration"], "weights": which}}, out)
    info = {"sha256": sha256_file(out), **info}  # checked whenever the weights are loaded
    write_file_output(out.with_suffix(".json"), json.dumps(info, indent=1) + "\n")  # (never through a link)
    return info


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m vsr.train.ship", description=__doc__.splitlines()[0])
    p.add_argument("checkpoint")
    p.add_argument("--out", default=str(DEFAULT_WEIGHTS))
    p.add_argument("--which", choices=("auto", "ema", "model"), default="auto")
    args = p.parse_args(argv)
    try:
        info = ship(args.checkpoint, args.out, which=args.which)
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
