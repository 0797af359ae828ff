"""Train in time slices on a GPU lent for minutes at a time; each slice resumes exactly from the last one's
checkpoint, and each window (a lent machine) from the weights the previous window left in the repository.
``scripts/gpu_train.sh`` is the command a device run executes; this is what it runs.

    python scripts/gpu_train.py pack --src ../shared/data/train/images --out .gpu/train [--limit-mib 24] [--crop 320]
                                     [--videos ../shared/data/train/videos] [--video-share 0.5]
    python scripts/gpu_train.py slice --data .gpu/train --carried .gpu/run --out DIR [--slice-s 420] [--probe-s 0]
                                      [--continue training/edvr-s-wide.pth] [--iters auto] [--stop-after N] [...]
    python scripts/gpu_train.py keep --returned DIR [--carry training/edvr-s-wide.pth]
    python scripts/gpu_train.py gate [--candidate training/edvr-s-wide.pth] [--reference default] [--frames A:B]

``pack``: whole training videos (H.264 as they are, up to ``--video-share`` of the limit), then the training images,
each cut to its central ``--crop`` square (PNG, lossless), added in a fixed order until ``--limit-mib``; the gate's
sets are refused (the sources are training sets only).  Videos give windows of real motion and camera footage (half
the batches when the pack has any; the device reads them with OpenCV, having no PyAV), still images windows of
vsr's synthetic camera motion (``vsr.train.data``).  Windows 1 and 2 trained on still images alone, and their
weights lost 1.6 dB to EDVR-S on a real clip (docs/weights.md).

``slice`` (on the device): restores ``--carried`` (the files a previous slice of the window returned: the
checkpoint in parts of at most 15 MiB -- the device returns files of at most 16 MiB -- its sha256, the log), or,
for a window's first slice, starts from ``--continue``'s weights when that file exists (weights only: a fresh
optimiser, the schedule's warm-up again, and a seed of the window's own, so that it sees new batches).  It trains
EDVR-S-wide at batch 32, LR patch 48, bf16 autocast, the batches made by worker processes (all cores but one,
``vsr.train.stream``), until ``--slice-s`` seconds of training have passed or the schedule is done; ``--iters
auto`` sizes the cosine decay to end with the slice, at the speed its warm-up ran.  ``--probe-s``: first that long
at batch 16, LR patch 32 in a throwaway run (the speed figure of issues 31 and 36: >= 60 it/s for EDVR-S-wide on
an H100), whose ``probe.json`` (it/s, device) and ``probe-log.jsonl`` go into ``--out`` as soon as it ends, so
that they come back even if the slice after it does not finish.  It writes into ``--out``:
``latest.pth.partNN``, ``latest.sha256``, ``log.jsonl``, ``curve.json`` (the training loss per logged iteration)
and ``slice.json`` (what it did: iterations, schedule, seed, device, it/s, the share of time it waited for
batches, the probe's figures).  Copy them into ``--carried`` for a next slice of the same window (exact resume).

``keep`` (here, after a window): its EMA weights into ``--carry`` (fp16, ``vsr.train.ship``'s format) and the
record of every window into the JSON beside it -- what the repository carries to the next window.  ``gate``
(here): Y-PSNR of the carried weights against the bundled default on Vid4 calendar and city, REDS 000 and a real
clip, none ever trained on; exit 0 and ``"verdict": "ship"`` only when they are better on the mean and lose at
most 0.05 dB on any one set (:func:`verdict`).
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
# Packed images' side: still images train through a synthetic camera motion (vsr.train.data.synth_window) that
# needs 1.45x the HR patch plus 23 pixels of room, else its windows stand still: 320 serves LR patch 48 (HR 192)
# and keeps BSD200's 321-pixel-high photos; LR patch 64 would need 392 and lose 100 of the 165 training images.
CROP = 320
CARRY = "training/edvr-s-wide.pth"  # the weights carried from one GPU window to the next (see keep())
REFUSED = ("vid4", "calendar", "city", "foliage", "walk", "reds_demo", "cockatoo")  # the gate's sets: never trained on
PROBE_BATCH, PROBE_PATCH = 16, 32  # the measuring probe's shape (issue 31's figure, issue 36's target)


VIDEO_SHARE = 0.5  # of a pack's bytes for whole training videos (H.264: far more frames per byte than PNG)
VIDEO_FRACTION = 0.5  # of the windows drawn from videos when the pack has any (vsr train's default)
PACK_RECORD = "pack.json"


def pack(src: Path, out: Path, limit_mib: float, crop: int = CROP, videos: Path | None = None,
         video_share: float = VIDEO_SHARE) -> dict:
    """Whole training videos from ``videos`` (byte for byte, in name order, each that fits in ``video_share`` of
    ``limit_mib``), then centre crops (``crop`` square, PNG) of the images under ``src`` until ``limit_mib``;
    returns what was packed, also written to ``out/pack.json``.  The gate's sets are refused in both."""
    import cv2

    from vsr.train.data import VIDEO_SUFFIXES

    files = sorted(p for p in src.rglob("*") if p.suffix.lower() in (".png", ".jpg", ".jpeg", ".bmp"))
    clips = sorted(p for p in videos.rglob("*") if p.suffix.lower() in VIDEO_SUFFIXES) if videos else []
    if any(word in str(p).lower() for p in files + clips for word in REFUSED):
        raise SystemExit(f"gpu_train: error: {src} holds the gate's sets (Vid4, REDS demo, the cockatoo clip); "
                         "pack training sets only")
    out.mkdir(parents=True, exist_ok=True)
    limit = limit_mib * 2**20
    total, packed_clips = 0, []
    for p in clips:
        size = p.stat().st_size
        if total + size <= limit * video_share:
            shutil.copyfile(p, out / f"video_{p.name}")
            total, packed_clips = total + size, packed_clips + [p.name]
    kept = 0
    for p in files:
        img = cv2.imread(str(p), cv2.IMREAD_COLOR)
        if img is None or min(img.shape[:2]) < crop:
            continue
        y, x = (img.shape[0] - crop) // 2, (img.shape[1] - crop) // 2
        ok, data = cv2.imencode(".png", img[y:y + crop, x:x + crop], [cv2.IMWRITE_PNG_COMPRESSION, 9])
        if not ok or total + len(data) > limit:
            continue
        name = "_".join(p.relative_to(src).with_suffix(".png").parts)
        (out / name).write_bytes(data.tobytes())
        total, kept = total + len(data), kept + 1
    record = {"images": kept, "of": len(files), "videos": packed_clips, "of_videos": len(clips),
              "mib": round(total / 2**20, 2), "limit_mib": round(limit_mib, 2), "crop": crop}
    (out / PACK_RECORD).write_text(json.dumps(record, indent=1) + "\n")
    return record


def _has_videos(data: Path) -> bool:
    from vsr.train.data import VIDEO_SUFFIXES

    return data.is_dir() and any(p.suffix.lower() in VIDEO_SUFFIXES for p in data.iterdir())


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
    records = log_records(log) if log.is_file() else []
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


def _no_pyav_here() -> bool:
    return importlib.util.find_spec("av") is None or bool(os.environ.get("VSR_TRAIN_NO_PYAV"))


# Here, and in the fork server of vsr.train.stream's batch workers, which imports this script as __mp_main__.
if __name__ in ("__main__", "__mp_main__") and _no_pyav_here():
    without_pyav()


def _options(args, run: Path, *, iters: int, batch: int, patch: int, init: str | None, seed: int,
             compiled: bool | None = None):
    from vsr.train import TrainOptions

    compiled = args.compile if compiled is None else compiled
    videos = VIDEO_FRACTION if _has_videos(Path(args.data)) else 0.0
    return TrainOptions(config=None if init else args.config, data=(args.data,), out=str(run), iters=iters,
                        init=init, batch_size=batch, lr_patch=patch, lr=args.lr, warmup=args.warmup, seed=seed,
                        video_fraction=videos, val=(), val_every=0, log_every=args.log_every, ckpt_every=max(iters, 1),
                        threads=args.threads, workers=args.workers, amp=args.amp, device=args.device,
                        compile=compiled)


def log_records(log: Path) -> list[dict]:
    """A run's ``log.jsonl`` records; a line a kill left half-written (a slice killed at its limit, not resumed
    since) is skipped as vsr.train.ship skips it, not a traceback that loses the window's returns."""
    records = []
    for line in log.read_text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            records.append(rec)
    return records


def steady_rate(log: Path) -> dict:
    """it/s and the share of that time the steps waited for their batches, over the logged stretches of a run's
    ``log.jsonl`` but the first after each start or resume (which holds the batch workers' start)."""
    last, first, steps, secs, waited = 0, True, 0, 0.0, 0.0
    for rec in log_records(log):
        if rec.get("event") in ("start", "resume"):
            last, first = rec.get("iteration", 0), True
        elif rec.get("event") == "train":
            if not first:
                steps += rec["iteration"] - last
                secs += (rec["iteration"] - last) / rec["it_per_s"]
                waited += rec["data_wait_s"]
            last, first = rec["iteration"], False
    if not secs:
        return {"it_per_s": None, "data_wait_share": None}
    return {"it_per_s": round(steps / secs, 2), "data_wait_share": round(waited / secs, 3)}


def probe(args, seconds: float, compiled: bool = False) -> dict:
    """The speed figure: EDVR config ``args.config`` at batch 16, LR patch 32 for ``seconds`` (a throwaway run;
    ``compiled``: the forward through torch.compile, ``seconds`` counted from the first step's end, which
    compiles); its result (``probe.json``, ``probe-compile.json``) and log (``probe[-compile]-log.jsonl``)
    written into ``args.out`` at once."""
    from vsr.train import Trainer

    name = "probe-compile" if compiled else "probe"
    run, out = Path(f"{args.work}-{name}"), Path(args.out)
    shutil.rmtree(run, ignore_errors=True)
    trainer = Trainer(_options(args, run, iters=10**6, batch=PROBE_BATCH, patch=PROBE_PATCH, init=None,
                               seed=args.seed, compiled=compiled))
    t0 = time.time()
    if compiled:
        trainer.run(progress=False, stop_after=1)
    first_s = time.time() - t0
    trainer.run(progress=False, deadline=time.time() + seconds)
    result = {"batch": PROBE_BATCH, "patch": PROBE_PATCH, "config": args.config, "compiled": compiled,
              "first_step_s": round(first_s, 1) if compiled else None, "iterations": trainer.state.iteration,
              "device": _device_name(trainer.device), **steady_rate(run / "log.jsonl")}
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(run / "log.jsonl", out / f"{name}-log.jsonl")
    (out / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


def _window_start(args) -> tuple[str | None, int]:
    """``(init, seed)`` of a window's first slice: the weights the repository carries (``--continue``) and one
    seed per window (each window sees new batches), else ``--init`` and ``--seed``."""
    carry = Path(args.continue_from) if args.continue_from else None
    if carry is None or not carry.is_file():
        return args.init, args.seed
    record = json.loads(carry.with_suffix(".json").read_text())
    return str(carry), args.seed + len(record.get("windows", []))


def _fitted_iters(args, run: Path, init: str | None, seed: int) -> tuple[int, float]:
    """``--iters auto``: train the warm-up (its learning rates do not depend on the schedule's length), then size
    the cosine decay to end with the slice at the speed the warm-up ran; returns it and the slice's deadline."""
    from vsr.train import Trainer

    trainer = Trainer(_options(args, run, iters=args.warmup, batch=args.batch_size, patch=args.patch, init=init,
                               seed=seed))
    deadline = time.time() + args.slice_s
    trainer.run(progress=False, deadline=deadline)
    rate = steady_rate(run / "log.jsonl")["it_per_s"] or 0.0
    return args.warmup + int(rate * max(deadline - time.time(), 0.0) * 0.95), deadline


def _device_name(device) -> str:
    import torch

    return torch.cuda.get_device_name(device) if device.type == "cuda" else str(device)


def train_slice(args) -> dict:
    import torch

    from vsr.train import Trainer

    run = Path(args.work)
    if run.exists():
        shutil.rmtree(run)
    probed = probe(args, args.probe_s) if args.probe_s > 0 else None
    if args.probe_s > 0 and args.probe_compile:  # an experiment: its failure is recorded, the slice goes on
        try:
            probed = {**probed, "compiled": probe(args, args.probe_s, compiled=True)}
        except Exception as e:  # noqa: BLE001 - torch.compile's failures are of every type
            probed = {**probed, "compiled": {"error": f"{type(e).__name__}: {str(e)[:500]}"}}
            (Path(args.out) / "probe-compile.json").write_text(json.dumps(probed["compiled"], indent=1) + "\n")
    began, deadline = time.time(), None
    resumed = join_checkpoint(Path(args.carried), run)
    if resumed:  # a later slice of a window: its schedule, weights and seed as its first slice set them
        saved = torch.load(run / "latest.pth", weights_only=True)
        start = saved["train"]["iteration"]
        iters, init, seed = (saved["vsr"]["options"][k] for k in ("iters", "init", "seed"))
    else:
        start, (init, seed) = 0, _window_start(args)
        iters, deadline = _fitted_iters(args, run, init, seed) if args.iters == "auto" else (args.iters, None)
    trainer = Trainer(_options(args, run, iters=iters, batch=args.batch_size, patch=args.patch, init=init,
                               seed=seed))
    deadline = deadline or time.time() + args.slice_s  # the slice's training time, from its first step
    state = trainer.run(stop_after=args.stop_after, progress=False, deadline=deadline)
    files = split_checkpoint(run, Path(args.out)) + ["slice.json"]
    files += ["probe.json", "probe-log.jsonl"] if probed else []
    files += [f for f in ("probe-compile.json", "probe-compile-log.jsonl") if (Path(args.out) / f).is_file()]
    result = {"resumed": resumed, "from": start, "to": state.iteration, "of": iters, "init": init, "seed": seed,
              "batch": args.batch_size, "patch": args.patch, "workers": trainer.workers,
              "device": _device_name(trainer.device), "seconds": round(time.time() - began, 1),
              **steady_rate(run / "log.jsonl"), "files": files, **({"probe": probed} if probed else {})}
    (Path(args.out) / "slice.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


def keep(returned: Path, carry: Path) -> dict:
    """After a window, here: the checkpoint it returned -> the weights the repository carries to the next window
    (``carry``: the EMA weights in fp16, in ``vsr.train.ship``'s format, so that ``gate`` and ``--weights`` read
    it; 2.9 MB for EDVR-S-wide) and beside it, ``carry.json``: every window so far (its seed, iterations,
    batch, device, speed and loss curve) and their total."""
    import tempfile

    from vsr.train.ship import ship

    record_path = carry.with_suffix(".json")
    windows = json.loads(record_path.read_text())["windows"] if record_path.is_file() else []
    done = json.loads((returned / "slice.json").read_text())
    curve = json.loads((returned / "curve.json").read_text())
    windows.append({**{k: done[k] for k in ("seed", "init", "to", "of", "batch", "patch", "device", "workers",
                                            "it_per_s", "data_wait_share")},
                    "probe": done.get("probe"), "curve": [[c["iteration"], round(c["loss"], 5)] for c in curve]})
    with tempfile.TemporaryDirectory() as work:
        if not join_checkpoint(returned, Path(work)):
            raise SystemExit(f"gpu_train: error: no checkpoint parts in {returned}")
        info = ship(Path(work) / "latest.pth", carry, which="ema", overwrite=True,  # (the last window's carry)
                    record={"windows": windows, "total_iterations": sum(w["to"] for w in windows)})
    return {"carry": str(carry), "windows": len(windows), "total_iterations": info["total_iterations"]}


# The gate's sets: none is ever trained on (Vid4 is refused by pack, REDS is not in the training sets, the cockatoo
# clip is excluded from every training run here).  Vid4 alone (calendar and city: slow, mostly global motion) said
# `ship` for weights that lose 0.14 dB on REDS and 1.6 dB on the cockatoo clip (docs/weights.md): real motion and
# real camera footage are part of the gate since.
GATE_CLIP = "videos/h264yuv444_mp3_1280x720_20fps_14s_cockatoo.mp4"
GATE_CLIP_FRAMES = 12
GATE_WORST_DB = -0.05  # the most any one set may lose


def gate_sets(root: Path, work: Path) -> dict[str, tuple[Path, Path | None]]:
    """``{name: (gt_dir, lr_dir or None: LR made from the GT by vsr eval's bicubic)}``: Vid4 calendar (official LR)
    and city, REDS 000 (its 320x180 frames as GT) and the first frames of the cockatoo clip (1280x720, decoded
    into ``work``)."""
    from scripts.eval_int8 import video_frames

    if not (root / GATE_CLIP).is_file():
        raise SystemExit(f"gpu_train: error: gate set cockatoo: no {root / GATE_CLIP} (set VSR_DATA)")
    vid4 = root / "sequences" / "vid4"
    sets = {"calendar": (vid4 / "calendar" / "gt", vid4 / "calendar" / "lr"), "city": (vid4 / "city" / "gt", None),
            "reds000": (root / "sequences" / "reds_demo_000" / "lr", None),
            "cockatoo": (video_frames(root / GATE_CLIP, work / "cockatoo", GATE_CLIP_FRAMES), None)}
    for name, (gt, _lr) in sets.items():
        if not any(gt.glob("*.png")):
            raise SystemExit(f"gpu_train: error: gate set {name}: no PNG frames in {gt} (set VSR_DATA)")
    return sets


def verdict(scores: dict[str, dict[str, float]]) -> dict:
    """``ship`` only when the candidate's mean Y-PSNR gain over the sets is positive and no set loses more than
    :data:`GATE_WORST_DB`; else ``keep the reference``, naming the set that decided."""
    gains = {name: round(v["candidate"] - v["reference"], 3) for name, v in scores.items()}
    mean = round(sum(gains.values()) / len(gains), 3)
    worst = min(gains, key=gains.get)
    if mean <= 0:
        why = f"mean gain {mean:+.3f} dB"
    elif gains[worst] < GATE_WORST_DB:
        why = f"{worst} loses {-gains[worst]:.3f} dB (at most {-GATE_WORST_DB} allowed)"
    else:
        return {"gains_db": gains, "gain_db": mean, "verdict": "ship"}
    return {"gains_db": gains, "gain_db": mean, "verdict": "keep the reference", "why": why}


def gate(candidate: str, reference: str = "default", frames: slice | None = None) -> dict:
    """``vsr eval``'s Y-PSNR of ``candidate`` and ``reference`` weights on every set of :func:`gate_sets` (never
    trained on), fp32 on the torch backend; the verdict of :func:`verdict`."""
    import tempfile

    from vsr.quality.evaluate import evaluate
    from vsr.train.validate import data_root

    scores = {}
    with tempfile.TemporaryDirectory(prefix="vsr-gate-") as work:
        for name, (gt, lr) in gate_sets(data_root(), Path(work)).items():
            row = scores[name] = {}
            for who, weights in (("candidate", candidate), ("reference", reference)):
                r = evaluate(gt, lr, weights=weights, backend="torch", frames=frames)
                row[who], row["bicubic"] = round(r.mean("model").psnr_y, 3), round(r.mean("bicubic").psnr_y, 3)
    return {**scores, "candidate": candidate, "reference": reference, **verdict(scores)}


def _iters(text: str):
    if text == "auto":
        return text
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a number of iterations, or auto")
    return int(text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    pk = sub.add_parser("pack", help="pack training images (see the module docstring)")
    pk.add_argument("--src", required=True)
    pk.add_argument("--out", required=True)
    pk.add_argument("--limit-mib", type=float, default=24.0)
    pk.add_argument("--crop", type=int, default=CROP, help=f"side of the centre crops (default {CROP})")
    pk.add_argument("--videos", default=None, help="a folder of training videos, packed whole first")
    pk.add_argument("--video-share", type=float, default=VIDEO_SHARE,
                    help=f"at most this share of the limit for videos (default {VIDEO_SHARE})")
    sl = sub.add_parser("slice", help="train one time slice (see the module docstring)")
    sl.add_argument("--data", required=True, help="packed training images")
    sl.add_argument("--carried", required=True, help="what the previous slice returned (may be empty)")
    sl.add_argument("--out", required=True, help="where this slice's checkpoint parts, log and curve go")
    sl.add_argument("--work", default="/tmp/vsr-gpu-train", help="the run folder while training (replaced)")
    sl.add_argument("--slice-s", type=float, default=420.0, help="training time of this slice (default 420)")
    sl.add_argument("--probe-s", type=float, default=0.0,
                    help=f"first, this long at batch {PROBE_BATCH}, LR patch {PROBE_PATCH} in a throwaway run (the "
                         "speed figure; probe.json and probe-log.jsonl into --out)")
    sl.add_argument("--probe-compile", action="store_true",
                    help="a second probe with the forward through torch.compile (probe-compile.json)")
    sl.add_argument("--compile", action="store_true", help="train with the forward through torch.compile")
    sl.add_argument("--stop-after", type=int, default=None, help="iterations instead (rehearsals)")
    sl.add_argument("--config", default="edvr-s-wide")
    sl.add_argument("--iters", default="auto", type=_iters,
                    help="the schedule's length, all slices of a window; auto: sized to end with this slice")
    sl.add_argument("--init", default=None, help="weights to start from (a window without --continue's file)")
    sl.add_argument("--continue", dest="continue_from", default=None, metavar="PATH",
                    help="a window's first slice starts from these weights (kept by 'keep'), when the file exists")
    sl.add_argument("--batch-size", type=int, default=32)
    sl.add_argument("--patch", type=int, default=48,
                    help="LR patch side (the packed images' side must be at least 5.8x it + 23 for their motion)")
    sl.add_argument("--lr", type=float, default=4e-4)
    sl.add_argument("--warmup", type=int, default=200)
    sl.add_argument("--seed", type=int, default=0)
    sl.add_argument("--log-every", type=int, default=50)
    sl.add_argument("--threads", type=int, default=0)
    sl.add_argument("--workers", type=int, default=None, help="batch-making processes (default: all cores but one)")
    sl.add_argument("--amp", default="auto", help="auto (bf16 where the GPU has it), bf16, fp16, off")
    sl.add_argument("--device", default="auto")
    kp = sub.add_parser("keep", help="after a window: its weights and record into the repository (see keep())")
    kp.add_argument("--returned", required=True, help="the files the window's last slice returned")
    kp.add_argument("--carry", default=CARRY, help=f"the weights the repository carries (default {CARRY})")
    gt = sub.add_parser("gate", help="candidate vs reference weights on Vid4, REDS and a real clip (see gate())")
    gt.add_argument("--candidate", default=CARRY)
    gt.add_argument("--reference", default="default")
    gt.add_argument("--frames", default=None, metavar="A:B", help="score frames A..B-1 only (a quick look)")
    args = p.parse_args(argv)
    if args.cmd == "pack":
        result = pack(Path(args.src), Path(args.out), args.limit_mib, args.crop,
                      Path(args.videos) if args.videos else None, args.video_share)
    elif args.cmd == "keep":
        result = keep(Path(args.returned), Path(args.carry))
    elif args.cmd == "gate":
        from vsr.cli.eval import parse_frames

        result = gate(args.candidate, args.reference, parse_frames(args.frames))
    else:
        result = train_slice(args)
    print(json.dumps(result))
    return 1 if args.cmd == "gate" and result["verdict"] != "ship" else 0


if __name__ == "__main__":
    sys.exit(main())
