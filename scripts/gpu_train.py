"""Train in time slices on a GPU lent for minutes at a time; each slice resumes exactly from the last one's
checkpoint.  ``scripts/gpu_train.sh`` is the command a device run executes; this is what it runs.

    python scripts/gpu_train.py pack --src ../shared/data/train/images --out .gpu/train [--limit-mib 24]
    python scripts/gpu_train.py slice --data .gpu/train --carried .gpu/run --out DIR [--slice-s 480]
                                      [--config edvr-s-wide] [--iters 20000] [--stop-after N] [...]

``pack``: the training images, each cut to its central 256x256 (PNG, lossless), added in a fixed order until
``--limit-mib``; Vid4 and every validation sequence are refused (the sources are training sets only).  Only
still images: the device has no PyAV, and they train through vsr's synthetic camera motion
(``vsr.train.data``).

``slice``: restores ``--carried`` (the files a previous slice returned: the checkpoint in parts of at most
15 MiB -- the device returns files of at most 16 MiB -- its sha256, the log), trains until ``--slice-s`` seconds
have passed or ``--iters`` are done (``--stop-after``: a number of iterations instead, for rehearsals), and
writes into ``--out``: ``latest.pth.partNN``, ``latest.sha256``, ``log.jsonl`` and ``curve.json`` (the training
loss per logged iteration).  Copy them back into ``--carried`` for the next slice; the checkpoint is joined and
checked against its sha256 before training resumes from it (``vsr.train``: exact resume).
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import shutil
import sys
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PART_BYTES = 15 << 20
CROP = 256
REFUSED = ("vid4", "calendar", "city", "foliage", "walk")  # validation sequences: never trained on


def pack(src: Path, out: Path, limit_mib: float) -> dict:
    """Centre crops of the images under ``src`` into ``out`` until ``limit_mib``; returns what was packed."""
    import cv2

    files = sorted(p for p in src.rglob("*") if p.suffix.lower() in (".png", ".jpg", ".jpeg", ".bmp"))
    if any(word in str(p).lower() for p in files for word in REFUSED):
        raise SystemExit(f"gpu_train: error: {src} holds validation sequences (Vid4); pack training sets only")
    out.mkdir(parents=True, exist_ok=True)
    total, kept = 0, 0
    for p in files:
        img = cv2.imread(str(p), cv2.IMREAD_COLOR)
        if img is None or min(img.shape[:2]) < CROP:
            continue
        y, x = (img.shape[0] - CROP) // 2, (img.shape[1] - CROP) // 2
        ok, data = cv2.imencode(".png", img[y:y + CROP, x:x + CROP], [cv2.IMWRITE_PNG_COMPRESSION, 9])
        if not ok or total + len(data) > limit_mib * 2**20:
            continue
        name = "_".join(p.relative_to(src).with_suffix(".png").parts)
        (out / name).write_bytes(data.tobytes())
        total, kept = total + len(data), kept + 1
    return {"images": kept, "of": len(files), "mib": round(total / 2**20, 2)}


def join_checkpoint(carried: Path, run: Path) -> bool:
    """The carried checkpoint parts joined into ``run/latest.pth`` (checked against their sha256); False when
    nothing was carried (a first slice)."""
    parts = sorted(carried.glob("latest.pth.part*")) if carried.is_dir() else []
    if not parts:
        return False
    data = b"".join(p.read_bytes() for p in parts)
    want = (carried / "latest.sha256").read_text().split()[0]
    if hashlib.sha256(data).hexdigest() != want:
        raise SystemExit(f"gpu_train: error: the checkpoint parts in {carried} do not match latest.sha256")
    run.mkdir(parents=True, exist_ok=True)
    (run / "latest.pth").write_bytes(data)
    if (carried / "log.jsonl").is_file():
        shutil.copyfile(carried / "log.jsonl", run / "log.jsonl")
    return True


def split_checkpoint(run: Path, out: Path) -> list[str]:
    """``run/latest.pth`` into ``out`` as parts of at most 15 MiB, its sha256, the log and the loss curve."""
    out.mkdir(parents=True, exist_ok=True)
    data = (run / "latest.pth").read_bytes()
    names = []
    for i in range(0, len(data), PART_BYTES):
        name = f"latest.pth.part{i // PART_BYTES:02d}"
        (out / name).write_bytes(data[i:i + PART_BYTES])
        names.append(name)
    (out / "latest.sha256").write_text(f"{hashlib.sha256(data).hexdigest()}  latest.pth\n")
    log = run / "log.jsonl"
    records = [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []
    curve = [{"iteration": r["iteration"], "loss": r["loss"], "wall_s": r.get("wall_s")}
             for r in records if r.get("event") == "train"]
    (out / "curve.json").write_text(json.dumps(curve, indent=0) + "\n")
    if log.is_file():
        shutil.copyfile(log, out / "log.jsonl")
    return names + ["latest.sha256", "curve.json", "log.jsonl"]


class _Absent:
    """Any attribute of the PyAV stand-in: attributes and operators give more of it; a call raises."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str) -> "_Absent":
        return _Absent(f"{self._name}.{attr}")

    def __call__(self, *args, **kwargs):
        raise ImportError(f"PyAV is not installed here ({self._name}): gpu_train.py trains from still images only")

    def __mro_entries__(self, bases):
        return (object,)

    def __or__(self, other) -> "_Absent":
        return self

    __ror__ = __and__ = __rand__ = __add__ = __radd__ = __or__


def _absent_attribute(module: str, attr: str):
    if attr.startswith("__"):  # introspection (torch._dynamo reads every module's dunders) sees plain absence
        raise AttributeError(attr)
    return _Absent(f"{module}.{attr}")


class _NoPyAV(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports of ``av`` and ``av.*`` give stand-in modules (see :func:`without_pyav`)."""

    def find_spec(self, name, path, target=None):
        if name == "av" or name.startswith("av."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__file__ = f"<{spec.name}: PyAV stand-in of scripts/gpu_train.py>"
        module.__getattr__ = functools.partial(_absent_attribute, spec.name)
        return module

    def exec_module(self, module) -> None:
        pass


def without_pyav() -> None:
    """Let ``vsr.train`` import where PyAV is absent (the GPU image): vsr imports it at module level through
    ``vsr.video``, but training from still images never calls it.  Its 34 MiB wheel would not fit a session's
    64 MiB beside the checkpoint and the images.  Every use of the stand-in raises ImportError."""
    sys.meta_path.insert(0, _NoPyAV())


def train_slice(args) -> dict:
    if importlib.util.find_spec("av") is None or os.environ.get("VSR_TRAIN_NO_PYAV"):
        without_pyav()
    from vsr.train import TrainOptions, Trainer

    run = Path(args.work)
    if run.exists():
        shutil.rmtree(run)
    resumed = join_checkpoint(Path(args.carried), run)
    options = TrainOptions(config=args.config, data=(args.data,), out=str(run), iters=args.iters,
                           batch_size=args.batch_size, lr_patch=args.patch, lr=args.lr, warmup=args.warmup,
                           seed=args.seed, video_fraction=0.0, val=(), val_every=0, log_every=args.log_every,
                           ckpt_every=max(args.iters, 1), threads=args.threads, device=args.device)
    trainer = Trainer(options)
    start = trainer.state.iteration
    deadline = time.time() + args.slice_s
    state = trainer.run(stop_after=args.stop_after, progress=False, deadline=deadline)
    files = split_checkpoint(run, Path(args.out))
    return {"resumed": resumed, "from": start, "to": state.iteration, "of": args.iters, "files": files,
            "device": str(trainer.device), "seconds": round(args.slice_s - (deadline - time.time()), 1)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    pk = sub.add_parser("pack", help="pack training images (see the module docstring)")
    pk.add_argument("--src", required=True)
    pk.add_argument("--out", required=True)
    pk.add_argument("--limit-mib", type=float, default=24.0)
    sl = sub.add_parser("slice", help="train one time slice (see the module docstring)")
    sl.add_argument("--data", required=True, help="packed training images")
    sl.add_argument("--carried", required=True, help="what the previous slice returned (may be empty)")
    sl.add_argument("--out", required=True, help="where this slice's checkpoint parts, log and curve go")
    sl.add_argument("--work", default="/tmp/vsr-gpu-train", help="the run folder while training (replaced)")
    sl.add_argument("--slice-s", type=float, default=480.0, help="training time of this slice (default 480)")
    sl.add_argument("--stop-after", type=int, default=None, help="iterations instead (rehearsals)")
    sl.add_argument("--config", default="edvr-s-wide")
    sl.add_argument("--iters", type=int, default=20000, help="the whole schedule (cosine decay), all slices")
    sl.add_argument("--batch-size", type=int, default=16)
    sl.add_argument("--patch", type=int, default=32)
    sl.add_argument("--lr", type=float, default=4e-4)
    sl.add_argument("--warmup", type=int, default=200)
    sl.add_argument("--seed", type=int, default=0)
    sl.add_argument("--log-every", type=int, default=50)
    sl.add_argument("--threads", type=int, default=0)
    sl.add_argument("--device", default="auto")
    args = p.parse_args(argv)
    result = pack(Path(args.src), Path(args.out), args.limit_mib) if args.cmd == "pack" else train_slice(args)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
