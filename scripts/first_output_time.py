"""Seconds from `vsr upscale` start to its first output on a terminal (a pty, 100x24), and to the progress bar.

    python scripts/first_output_time.py CHECKOUT OUT.mp4 [CLIP]

runs ``python -m vsr upscale CLIP OUT.mp4 --frames 0:2 --overwrite`` with CHECKOUT's vsr (issue 25, item 1).
"""
import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time

tree, out = sys.argv[1], sys.argv[2]
clip = sys.argv[3] if len(sys.argv) > 3 else "../shared/data/videos/h264_256x240_35fps_1s_noaudio.mp4"
clip = os.path.abspath(clip)
m, s = pty.openpty()
fcntl.ioctl(s, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
t0 = time.monotonic()
p = subprocess.Popen([sys.executable, "-m", "vsr", "upscale", clip, out, "--frames", "0:2", "--overwrite"],
                     cwd=tree, env={**os.environ, "PYTHONPATH": tree}, stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=s)
os.close(s)
first = bar = None
buf = b""
while True:
    r, _, _ = select.select([m], [], [], 0.2)
    if r:
        try:
            d = os.read(m, 65536)
        except OSError:
            break
        if not d:
            break
        now = time.monotonic() - t0
        first = first or (now, d[:30])
        buf += d
        if bar is None and b"upscale:" in buf:
            bar = now
    elif p.poll() is not None:
        break
p.wait()
print(f"{os.path.basename(tree)}: first output {first[0]:.2f} s {first[1]!r}; progress bar {bar:.2f} s; "
      f"rc {p.returncode}")
