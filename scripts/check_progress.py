"""Does `vsr upscale`'s progress bar give a total and an honest ETA?  Runs the real CLI on each clip, reads the
bar from stderr, and compares the first ETA (shown after the first frame) with the time the rest really took.

    python scripts/check_progress.py [--frames N] [--weights W --config C] CLIP...

Prints one row per clip: frames, whether the bar had a total, the first ETA, the real remaining time and their
ratio (issue 15's target: within 50%).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

# tqdm's bar: "upscale:  25%|##5       | 1/4 [00:03<00:10,  3.39s/frame]" (or "2.10frame/s"); its prints lag
# behind the frames, so times are read from the bar's own numbers, not from when a line arrives
BAR = re.compile(r"(\d+)/(\d+|\?) \[(\d+):(\d+)<(\?|\d+:\d+),\s+([\d.]+)(s/frame|frame/s)")
SUMMARY = re.compile(r"(\d+) frames in ([\d.]+) s")


def run(clip: Path, frames: int, extra: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as d:
        cmd = [sys.executable, "-m", "vsr", "upscale", str(clip), str(Path(d) / "out.mkv"), "--codec", "ffv1",
               "--frames", f"0:{frames}", *extra]
        err = subprocess.run(cmd, stderr=subprocess.PIPE, text=True).stderr
    first = total = wall = None
    for line in re.split(r"[\r\n]", err):
        m = BAR.search(line)
        if m and m.group(1) == "1" and first is None:
            total = m.group(2)
            rate = float(m.group(6))
            first = rate if m.group(7) == "s/frame" else 1.0 / rate  # seconds the first frame took
        m = SUMMARY.search(line)
        if m:
            wall = float(m.group(2))
    if first is None or wall is None or total == "?":
        return {"clip": clip.name, "total": total, "first_eta_s": None, "real_rest_s": None, "ratio": None}
    eta = first * (int(total) - 1)  # what the bar shows after the first frame
    rest = wall - first
    return {"clip": clip.name, "total": total, "first_eta_s": round(eta, 1), "real_rest_s": round(rest, 1),
            "ratio": round(eta / rest, 2) if rest > 0 else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("clips", nargs="+", type=Path)
    ap.add_argument("--frames", type=int, default=4)
    args, extra = ap.parse_known_args()
    print("| clip | bar total | first ETA s | real rest s | ETA / real |")
    print("|---|---:|---:|---:|---:|")
    for clip in args.clips:
        r = run(clip, args.frames, extra)
        print(f"| {r['clip']} | {r['total']} | {r['first_eta_s']} | {r['real_rest_s']} | {r['ratio']} |",
              flush=True)


if __name__ == "__main__":
    main()
