#!/usr/bin/env python3
"""Y-PSNR of the int8 split plan (run-time and static scales) against fp32, on content unlike the calibration.

    python scripts/eval_int8.py [--weights default] [--frames 0:31] [--video CLIP --video-frames 12] [--out DIR]

Conditions: Vid4 calendar with its official LR; the same at brightness x0.4 and at contrast x1.8 (about mid
grey), applied to the official LR and GT PNGs alike; REDS clip 000's 21 frames (the 320x180 frames as GT, LR made
from them, BI x1/4); the first frames of a real clip, LR made from its frames (BI x1/4).  Every int8 plan is calibrated on the unmodified calendar LR, so the static scales meet ranges they
were not calibrated for, as video outside a calibration set does.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import cv2
import numpy as np

from vsr.quality.evaluate import evaluate
from vsr.train.validate import data_root

DATA = data_root()  # $VSR_DATA, else ../shared/data beside the checkout
CALENDAR = DATA / "sequences/vid4/calendar"
REDS = DATA / "sequences/reds_demo_000/lr"
MODES = (("fp32", {"precision": "fp32"}), ("int8 runtime", {"precision": "int8", "int8_scales": "runtime"}),
         ("int8 static", {"precision": "int8", "int8_scales": "static"}))


def _transform_folder(src: Path, dst: Path, fn) -> Path:
    dst.mkdir(parents=True, exist_ok=True)
    for f in sorted(src.glob("*.png")):
        img = cv2.imread(str(f), cv2.IMREAD_COLOR).astype(np.float32) / 255.0
        cv2.imwrite(str(dst / f.name), np.round(np.clip(fn(img), 0, 1) * 255).astype(np.uint8))
    return dst


def video_frames(clip: Path, dst: Path, n: int) -> Path:
    """The first ``n`` frames of ``clip`` as PNG files ``00000000.png``, ... in ``dst`` (the GT of a real clip)."""
    import av

    dst.mkdir(parents=True, exist_ok=True)
    with av.open(str(clip)) as c:
        for i, frame in enumerate(c.decode(video=0)):
            if i >= n:
                break
            cv2.imwrite(str(dst / f"{i:08d}.png"), frame.to_ndarray(format="bgr24"))
    return dst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--weights", default="default")
    ap.add_argument("--frames", default=None, help="A:B of calendar frames (default all)")
    ap.add_argument("--video", default=str(DATA / "videos/h264yuv444_mp3_1280x720_20fps_14s_cockatoo.mp4"))
    ap.add_argument("--video-frames", type=int, default=12)
    ap.add_argument("--modes", default="fp32,int8 runtime,int8 static")
    args = ap.parse_args()
    frames = slice(*[int(v) for v in args.frames.split(":")]) if args.frames else None
    tmp = Path(tempfile.mkdtemp(prefix="vsr-eval-int8-"))
    bright = lambda x: x * 0.4  # noqa: E731
    contrast = lambda x: (x - 0.5) * 1.8 + 0.5  # noqa: E731
    conditions = {
        "calendar": (CALENDAR / "gt", CALENDAR / "lr"),
        "calendar brightness x0.4": (_transform_folder(CALENDAR / "gt", tmp / "b/gt", bright),
                                     _transform_folder(CALENDAR / "lr", tmp / "b/lr", bright)),
        "calendar contrast x1.8": (_transform_folder(CALENDAR / "gt", tmp / "c/gt", contrast),
                                   _transform_folder(CALENDAR / "lr", tmp / "c/lr", contrast)),
        "REDS 000 (LR from its frames)": (REDS, None),
        f"{Path(args.video).stem} (LR from frames)": (video_frames(Path(args.video), tmp / "v", args.video_frames),
                                                      None),
    }
    wanted = args.modes.split(",")
    rows = {}
    for cond, (gt, lr) in conditions.items():
        rows[cond] = {}
        for mode, opts in MODES:
            if mode not in wanted:
                continue
            opts = dict(opts, int8_calibration=str(CALENDAR / "lr")) if opts["precision"] == "int8" else opts
            r = evaluate(gt, lr, weights=args.weights, frames=frames if lr is not None else None,
                         backend_options=opts)
            rows[cond][mode] = round(r.mean("model").psnr_y, 3)
            print(f"{cond:40s} {mode:14s} Y-PSNR {rows[cond][mode]:.3f}", flush=True)
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
