#!/usr/bin/env python3
"""`vsr preview`'s estimate against the real run, on a real clip downscaled to 480p.

    python scripts/bench_preview.py [--src cockatoo.mp4] [--frames 10] [--out-dir /tmp/vsr-bench-preview]
                                    [--png docs/preview.png] [-- extra options for both commands]

Makes CLIP: the first ``--frames`` frames of ``--src`` scaled to 854x480 (libx264 CRF 16, yuv420p).  Then times
the real CLI twice, each as one process, as a user runs them: ``vsr preview CLIP --out PNG`` and
``vsr upscale CLIP out.mp4``.  Prints the preview's wall time, its estimate of the whole run (time and size), the
real run's wall time and file size, and the ratios.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import av


def make_clip(src: Path, dst: Path, frames: int, size=(854, 480)) -> Path:
    with av.open(str(src)) as ic, av.open(str(dst), "w") as oc:
        rate = Fraction(ic.streams.video[0].average_rate or 25).limit_denominator(1001)
        vs = oc.add_stream("libx264", rate=rate)
        vs.width, vs.height, vs.pix_fmt = size[0], size[1], "yuv420p"
        vs.time_base = vs.codec_context.time_base = 1 / rate
        vs.options = {"crf": "16"}
        for i, f in enumerate(ic.decode(video=0)):
            if i >= frames:
                break
            g = f.reformat(width=size[0], height=size[1], format="yuv420p")
            g.pts, g.time_base = i, 1 / rate
            oc.mux(vs.encode(g))
        oc.mux(vs.encode(None))
    return dst


def timed(args: list[str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "vsr", *args], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        sys.exit(f"vsr {' '.join(args)} failed:\n{res.stderr}")
    return wall, res.stdout


def seconds(text: str) -> float:
    m = re.search(r"about (?:(\d+)h)?(\d+)m(\d+)s", text)
    return 3600 * int(m[1] or 0) + 60 * int(m[2]) + int(m[3])


def size_bytes(text: str) -> float:
    m = re.search(r"output about ([\d.]+) (B|KB|MB|GB)", text)
    return float(m[1]) * {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9}[m[2]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", default="/work/shared/data/videos/h264yuv444_mp3_1280x720_20fps_14s_cockatoo.mp4")
    ap.add_argument("--frames", type=int, default=6)
    ap.add_argument("--out-dir", default="/tmp/vsr-bench-preview")
    ap.add_argument("--png", default="docs/preview.png")
    ap.add_argument("extra", nargs="*", help="options for both commands (after --)")
    args = ap.parse_args()
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    clip = make_clip(Path(args.src), out / "clip480.mp4", args.frames)
    p_wall, p_out = timed(["preview", str(clip), "--out", args.png, "--overwrite", *args.extra])
    print(p_out, file=sys.stderr)
    r_wall, _ = timed(["upscale", str(clip), str(out / "out.mp4"), "--overwrite", "--quiet", *args.extra])
    real_size = (out / "out.mp4").stat().st_size
    est_s, est_b = seconds(p_out), size_bytes(p_out)
    print(json.dumps({"clip": str(clip), "frames": args.frames, "preview_wall_s": round(p_wall, 1),
                      "estimate_s": est_s, "real_s": round(r_wall, 1), "time_ratio": round(est_s / r_wall, 3),
                      "estimate_bytes": est_b, "real_bytes": real_size, "size_ratio": round(est_b / real_size, 3)}))


if __name__ == "__main__":
    main()
