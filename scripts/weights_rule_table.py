#!/usr/bin/env python3
"""The weights ``--weights auto`` picks (:mod:`vsr.model.choice`) for every real clip of ``shared/data/videos``
and for Vid4 clean and x264-compressed, as a Markdown table: clip, codec, bits/pixel, blockiness, choice, the
expected choice, and the time the measure took.

    python scripts/weights_rule_table.py [--data ../shared/data] [--json out.json]

Clips are made with ``ffmpeg`` in a temporary folder: Vid4 frames as PNG folders (as they are), as lossless
FFV1 and as ProRes 422 HQ (lossy at a high rate: clean); the LR sequences (calendar's BI LR; city's GT through
FFmpeg's bicubic x1/4, close to the MATLAB kernel of ``configs/degrade/eval-x264-crf28.toml``) and the GT
through libx264 CRF 28 and 18, preset medium, 25 fps.  Each is measured through the same open source as ``vsr
upscale``.  The last rows (not part of the rule's claim) are the real clips decoded to Y4M and read as a pipe
(``ffmpeg -i IN -f yuv4mpegpipe - | vsr upscale - OUT``): raw frames whose codec says nothing, so only a
visible block grid marks them compressed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

from vsr.model.choice import WeightsRule, choose_for
from vsr.video import open_source
from vsr.video.pipe_source import StreamSource

REPO = Path(__file__).resolve().parents[1]


def ffmpeg(*args: str) -> None:
    subprocess.run(["ffmpeg", "-v", "error", "-y", *args], check=True)


def vid4_clips(data: Path, tmp: Path) -> list[tuple[str, Path, str]]:
    """(name, path, expected weights) of Vid4 clean and x264."""
    vid4 = data / "sequences" / "vid4"
    frames = {"calendar GT": vid4 / "calendar" / "gt", "calendar LR": vid4 / "calendar" / "lr",
              "city GT": vid4 / "city" / "gt"}
    out = [(f"{name} (PNG folder)", folder, "default") for name, folder in frames.items()]
    for name, folder in frames.items():
        stem = name.replace(" ", "_")
        ffv1 = tmp / f"{stem}_ffv1.mkv"
        ffmpeg("-framerate", "25", "-i", str(folder / "%08d.png"), "-c:v", "ffv1", str(ffv1))
        out.append((f"{name} FFV1", ffv1, "default"))
    prores = tmp / "calendar_GT_prores_hq.mov"
    ffmpeg("-framerate", "25", "-i", str(frames["calendar GT"] / "%08d.png"), "-c:v", "prores_ks", "-profile:v",
           "3", str(prores))
    out.append(("calendar GT ProRes 422 HQ", prores, "default"))
    x264 = {"calendar LR": (frames["calendar LR"], []),
            "city LR (bicubic x1/4)": (frames["city GT"], ["-vf", "scale=iw/4:ih/4:flags=bicubic"]),
            "calendar GT": (frames["calendar GT"], []), "city GT": (frames["city GT"], [])}
    for crf in (28, 18):
        for name, (folder, vf) in x264.items():
            if crf == 18 and "GT" in name and "LR" not in name:
                continue
            path = tmp / f"{name.split()[0]}_{name.split()[1]}_x264_crf{crf}.mp4"
            ffmpeg("-framerate", "25", "-i", str(folder / "%08d.png"), *vf, "-c:v", "libx264", "-crf", str(crf),
                   "-preset", "medium", "-pix_fmt", "yuv420p", str(path))
            out.append((f"{name} x264 CRF {crf}", path, "real"))
    return out


def measured(path: Path, pipe: bool) -> tuple[dict, float]:
    t0 = time.perf_counter()
    if pipe:
        with open(path, "rb") as f:
            source = StreamSource(f)
            try:
                choice = choose_for(source)
            finally:
                source.close()
    else:
        source = open_source(path)
        try:
            t0 = time.perf_counter()  # the measure alone: the source is open already in vsr upscale
            choice = choose_for(source)
        finally:
            source.close()
    return choice.to_dict(), time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(REPO.parent / "shared" / "data"))
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    data = Path(args.data)
    rule = WeightsRule.load()
    print(f"rule: blockiness >= {rule.blockiness} -> real; lossless codec or >= {rule.clean_bits_per_pixel} "
          "bits/pixel -> default; else real")
    rows = []
    with tempfile.TemporaryDirectory(prefix="vsr-weights-rule-") as tmp:
        tmp = Path(tmp)
        clips = [(p.name, p, "real", False) for p in sorted((data / "videos").iterdir())]
        clips += [(n, p, e, False) for n, p, e in vid4_clips(data, tmp)]
        for p in sorted((data / "videos").iterdir()):
            y4m = tmp / f"{p.stem}.y4m"
            ffmpeg("-i", str(p), "-frames:v", "5", "-f", "yuv4mpegpipe", str(y4m))
            clips.append((f"{p.name} decoded, Y4M on a pipe", y4m, "(real)", True))
        for name, path, expected, pipe in clips:
            got, seconds = measured(path, pipe)
            rows.append({"clip": name, "expected": expected, "seconds": round(seconds, 3), **got})
    print("| clip | codec | bits/pixel | blockiness | choice | expected | measure (s) |")
    print("|---|---|---:|---:|---|---|---:|")
    for r in rows:
        bpp = "-" if r["bits_per_pixel"] is None else f"{r['bits_per_pixel']:.3f}"
        blk = "-" if r["blockiness"] is None else f"{r['blockiness']:.2f}"
        mark = "" if r["weights"] == r["expected"].strip("()") else " **(differs)**"
        print(f"| {r['clip']} | {r['codec']} | {bpp} | {blk} | {r['weights']}{mark} | {r['expected']} | "
              f"{r['seconds']:.2f} |")
    claimed = [r for r in rows if not r["expected"].startswith("(")]
    wrong = [r["clip"] for r in claimed if r["weights"] != r["expected"]]
    print(f"\n{len(claimed) - len(wrong)} of {len(claimed)} clips as expected" + (f"; wrong: {wrong}" if wrong else ""))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
