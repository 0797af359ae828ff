"""Peak memory of vsr's encoder stage alone at a x4 output size (e.g. 1080p -> 7680x4320), per option set.

Each configuration runs in a fresh process: it decodes one frame of IN, scales it x4 (nearest, then a
small shift per frame so that the encoder sees motion), and writes N frames through ``vsr.video.VideoSink``
(the sink ``vsr upscale`` uses, with its defaults for big outputs) to a temporary file.  Reported: the
process's peak RSS while encoding (sampled every 20 ms), its RSS just before (Python, PyAV, the open sink,
one 8K frame of planes), and the difference: what encoding adds.

    python scripts/bench_encoder_memory.py ../shared/data/videos/h264_aac51_1920x1080_60fps_2s.mp4 --frames 30 \
        --config "" --config "-x rc-lookahead=0" --config "-x x264-params=sliced-threads=1"
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import gc, json, os, sys, threading, time, tempfile
from pathlib import Path
import cv2, numpy as np

PAGE = os.sysconf("SC_PAGE_SIZE")
def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE / 2**20
peak = [0.0]
done = threading.Event()
def sample():
    while not done.is_set():
        peak[0] = max(peak[0], rss_mb())
        time.sleep(0.02)
from vsr.video import EncoderSettings, open_sink, open_source
from vsr.video.planes import encode_planes

src, n, codec, opts = sys.argv[1], int(sys.argv[2]), sys.argv[3] or None, json.loads(sys.argv[4])
source = open_source(Path(src))
first = next(iter(source.frames())).rgb
big = cv2.resize(first.transpose(1, 2, 0), None, fx=4, fy=4, interpolation=cv2.INTER_NEAREST).transpose(2, 0, 1)
info = source.info
out = Path(tempfile.mkdtemp()) / "enc.mp4"
sink = open_sink(out, info, EncoderSettings(codec=codec, options=tuple(opts.items())), scale=4)
pix_fmt, spec = sink.pix_fmt, sink.colour
planes = encode_planes(np.ascontiguousarray(big), pix_fmt, spec).astype(sink.plane_dtype())
del big, first
gc.collect()
before = rss_mb()
threading.Thread(target=sample, daemon=True).start()
t0 = time.perf_counter()
pts = 0
for i in range(n):
    shifted = np.roll(planes, (2 * i, 3 * i), axis=(1, 2))
    sink.write(shifted, info.start_pts + pts, 1)
    pts += 1
sink.commit()
wall = time.perf_counter() - t0
source.close()
done.set()
peak = max(peak[0], rss_mb())
print(json.dumps({"before_mb": round(before), "peak_mb": round(peak), "encoder_mb": round(peak - before),
                  "s_per_frame": round(wall / n, 3), "mb_out": round(out.stat().st_size / 2**20, 1),
                  "size": f"{sink.vs.width}x{sink.vs.height}"}))
out.unlink()
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input")
    ap.add_argument("--frames", type=int, default=30)
    ap.add_argument("--codec", default="")
    ap.add_argument("--config", action="append", default=None,
                    help="encoder options as '-x key=value ...' (repeatable; '' = vsr's defaults)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    rows = []
    for cfg in a.config or [""]:
        words = shlex.split(cfg)
        opts = {}
        for i, w in enumerate(words):
            if w == "-x":
                k, _, v = words[i + 1].partition("=")
                opts[k] = v
        r = subprocess.run([sys.executable, "-c", CHILD, a.input, str(a.frames), a.codec, json.dumps(opts)],
                           capture_output=True, text=True)
        if r.returncode:
            print(r.stderr, file=sys.stderr)
            continue
        row = json.loads(r.stdout.strip().splitlines()[-1])
        row["config"] = cfg or "(vsr defaults)"
        rows.append(row)
        print(f"{row['config']:<45} peak {row['peak_mb']:>6} MB  before {row['before_mb']:>5} MB  "
              f"encoder {row['encoder_mb']:>6} MB  {row['s_per_frame']:.2f} s/frame  {row['mb_out']} MB out  "
              f"{row['size']}", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
