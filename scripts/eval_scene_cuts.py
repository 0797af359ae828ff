#!/usr/bin/env python3
"""Hits, misses and false cuts of vsr's scene-cut detector on real clips joined at hard cuts, and on the clips
alone (which have no cut of their own, or the ones listed in KNOWN_CUTS).

    python scripts/eval_scene_cuts.py [--data /work/shared/data] [--threshold X] [--json out.json]

Every clip is decoded once, centre-cropped to 16:9 and resized to 256x144 (joined clips must share a size; the
detector shrinks frames to 128 wide anyway).  A joined clip is ``A[a0:a0+n] + B[b0:b0+n]`` for every ordered
pair of different clips, at two cut points each, plus "jump cuts": one clip joined to a later part of itself.
Each joined clip is run through :class:`vsr.pipeline.scenes.CutDetector` from its first frame, as the runner
does.  A hit is a cut found at exactly the join; any other cut is false.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path

import cv2
import numpy as np

from vsr.pipeline.scenes import CutRule, detect_cuts
from vsr.video import open_source
from vsr.video.source import SourceFrame

SIZE = (256, 144)
# cuts the real clips have of their own (frame indices), checked by looking at the frames around every cut
# the detector found: Big Buck Bunny's 1080p trailer cuts from the close-up to the meadow at frame 21
KNOWN_CUTS: dict[str, list[int]] = {"h264_aac51_1920x1080_60fps_2s.mp4": [21]}


def load(path: Path) -> np.ndarray:
    """A clip -> (N, 3, 144, 256) uint8 frames."""
    out = []
    src = open_source(path)
    try:
        for f in src.frames():
            rgb = f.rgb.transpose(1, 2, 0)
            h, w = rgb.shape[:2]
            ch, cw = (h, round(h * 16 / 9)) if w * 9 > h * 16 else (round(w * 9 / 16), w)
            y, x = (h - ch) // 2, (w - cw) // 2
            small = cv2.resize(np.ascontiguousarray(rgb[y:y + ch, x:x + cw]), SIZE, interpolation=cv2.INTER_AREA)
            out.append(np.clip(small * 255 + 0.5, 0, 255).astype(np.uint8).transpose(2, 0, 1))
    finally:
        src.close()
    return np.stack(out)


def frames(arr: np.ndarray):
    for i, a in enumerate(arr):
        yield SourceFrame(i, i, 1, a.astype(np.float32) / 255.0)


def clips(data: Path) -> dict[str, np.ndarray]:
    paths = sorted((data / "videos").iterdir()) + [data / "sequences/vid4/calendar/lr", data / "sequences/vid4/city/gt",
                                                    data / "sequences/reds_demo_000/lr"]
    names = [p.name for p in paths[:-3]] + ["vid4/calendar/lr", "vid4/city/gt", "reds_demo_000/lr"]
    return {name: load(p) for name, p in zip(names, paths)}


def joins(all_clips: dict[str, np.ndarray]):
    """(name, frames, join, other cuts) of every joined clip: 12 frames of A before the join, 12 of B after, at
    two points; the other cuts are the clips' own (KNOWN_CUTS) that fall inside the parts taken."""
    n = 12
    pairs = [(na, nb, fa, fb) for na, nb in itertools.permutations(all_clips, 2) for fa, fb in ((0.3, 0.6), (0.7, 0.1))]
    pairs += [(na, na, 0.0, 1.0) for na, a in all_clips.items() if len(a) >= 4 * n]  # jump cuts: same shot, later
    for na, nb, fa, fb in pairs:
        a, b = all_clips[na], all_clips[nb]
        a0 = min(int(len(a) * fa), max(len(a) - n, 0))
        b0 = min(int(len(b) * fb), max(len(b) - n, 0))
        join = len(a[a0:a0 + n])
        own = [c - a0 for c in KNOWN_CUTS.get(na, []) if a0 < c < a0 + n]
        own += [join + c - b0 for c in KNOWN_CUTS.get(nb, []) if b0 < c < b0 + n]
        label = f"{na} | {nb} " + ("(later)" if na == nb else f"({fa}, {fb})")
        yield label, np.concatenate([a[a0:a0 + n], b[b0:b0 + n]]), join, own


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="/work/shared/data")
    ap.add_argument("--threshold", type=float, default=None, help="override configs/pipeline/scenes.toml")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rule = CutRule.load(threshold=args.threshold)
    t0 = time.perf_counter()
    all_clips = clips(Path(args.data))
    result = {"rule": {"threshold": rule.threshold, "min_score": rule.min_score}, "uncut": [], "joined": []}
    false_uncut = 0
    for name, arr in all_clips.items():
        cuts = detect_cuts(frames(arr), rule)
        false = [c for c in cuts if c not in KNOWN_CUTS.get(name, [])]
        false_uncut += len(false)
        result["uncut"].append({"clip": name, "frames": len(arr), "cuts": cuts, "false": false})
        print(f"uncut  {name:55s} {len(arr):4d} frames  cuts {cuts}")
    hits = misses = false_joined = 0
    for name, arr, cut, own in joins(all_clips):
        cuts = detect_cuts(frames(arr), rule)
        hit = all(c in cuts for c in [cut] + own)
        hits += hit
        misses += not hit
        false = [c for c in cuts if c not in [cut] + own]
        false_joined += len(false)
        result["joined"].append({"clip": name, "cut": cut, "own_cuts": own, "found": cuts})
        if not hit or false:
            print(f"JOIN   {name:55s} cut {cut} {own}: found {cuts}")
    total = hits + misses
    result["summary"] = {"joined": total, "hits": hits, "misses": misses, "false_in_joined": false_joined,
                         "uncut_clips": len(all_clips), "false_in_uncut": false_uncut,
                         "seconds": round(time.perf_counter() - t0, 1)}
    print(json.dumps(result["summary"]))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
