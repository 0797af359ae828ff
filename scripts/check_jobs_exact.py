#!/usr/bin/env python3
"""Issue 10's first check, through the real CLI: real clips queued with `vsr jobs` (the local SQLite queue, and
Celery + Redis with 2 workers when `--celery`) decode to exactly the frames and timestamps of `vsr upscale`.

    python scripts/check_jobs_exact.py [CLIP ...] [--chunk-frames 8] [--packets N] [--celery] [--work DIR]

Options of every run: --config edvr-tiny --weights random --codec ffv1 (lossless, so "equal" means bit-identical
planes); clips default to three real clips of ../shared/data/videos.  Prints one line per clip and run, and exits
1 if any output differs.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import av

from vsr.video.excerpt import excerpt

VIDEOS = Path(__file__).resolve().parents[2] / "shared" / "data" / "videos"
CLIPS = ["h264_256x240_35fps_1s_noaudio.mp4", "h264_aac_320x240_29.97fps_1.2s_realshort.mp4",
         "vp9_320x180_30fps_10s_bbb.webm"]
OPTS = ["--config", "edvr-tiny", "--weights", "random", "--codec", "ffv1"]


def vsr(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vsr", *args], capture_output=True, text=True, **kw)


def digest(path: Path) -> tuple:
    """(frames, pts list, sha256 of every decoded plane, other streams' packets digest)."""
    h, other, pts = hashlib.sha256(), hashlib.sha256(), []
    with av.open(str(path)) as c:
        for pkt in c.demux():
            if pkt.stream.type != "video":
                if pkt.size:
                    other.update(f"{pkt.stream.index}:{pkt.pts}:{pkt.duration}".encode() + bytes(pkt))
                continue
            for f in pkt.decode():
                pts.append((f.pts, f.duration))
                for p in f.planes:
                    h.update(bytes(p))
    return len(pts), tuple(pts), h.hexdigest(), other.hexdigest()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_local(clips: list[Path], work: Path, chunk_frames: int) -> dict[str, Path]:
    out = work / "local"
    store = work / "queue.db"
    r = vsr("jobs", "add", *map(str, clips), "--out-dir", str(out), "--ext", "mkv", "--chunk-frames",
            str(chunk_frames), "--store", str(store), *OPTS)
    assert r.returncode == 0, r.stderr
    t0 = time.perf_counter()
    r = vsr("jobs", "run", "--until-empty", "--store", str(store), "--quiet")
    assert r.returncode == 0, r.stderr
    print(f"local queue: {len(clips)} jobs in {time.perf_counter() - t0:.1f} s")
    return {c.name: out / f"{c.stem}.mkv" for c in clips}


def run_celery(clips: list[Path], work: Path, chunk_frames: int) -> dict[str, Path]:
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    redis = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                              "--appendonly", "no"], stdout=subprocess.DEVNULL)
    workers = []
    try:
        time.sleep(0.5)
        out = work / "celery"
        r = vsr("jobs", "add", *map(str, clips), "--out-dir", str(out), "--ext", "mkv", "--chunk-frames",
                str(chunk_frames), "--broker", url, *OPTS)
        assert r.returncode == 0, r.stderr
        t0 = time.perf_counter()
        workers = [subprocess.Popen([sys.executable, "-m", "vsr", "jobs", "run", "--broker", url],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
                   for _ in range(2)]
        want = {c.name: out / f"{c.stem}.mkv" for c in clips}
        while not all(p.exists() for p in want.values()):
            assert time.perf_counter() - t0 < 1800, "Celery jobs did not finish in 30 minutes"
            time.sleep(1)
        print(f"celery, 2 workers: {len(clips)} jobs in {time.perf_counter() - t0:.1f} s")
        r = vsr("jobs", "list", "--broker", url)
        print(r.stdout.strip())
        return want
    finally:
        for w in workers:
            os.killpg(w.pid, 15)
        redis.terminate()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("clips", nargs="*")
    ap.add_argument("--chunk-frames", type=int, default=8)
    ap.add_argument("--celery", action="store_true")
    ap.add_argument("--work", default=None)
    ap.add_argument("--packets", type=int, default=None, help="use only the first N video packets of each clip")
    a = ap.parse_args()
    clips = [Path(c) for c in a.clips] or [VIDEOS / c for c in CLIPS]
    work = Path(a.work or tempfile.mkdtemp(prefix="vsr-jobs-exact-"))
    if a.packets:
        (work / "in").mkdir(parents=True, exist_ok=True)
        clips = [excerpt(c, work / "in" / c.name, a.packets) for c in clips]
    single = {}
    t0 = time.perf_counter()
    for c in clips:
        single[c.name] = work / "single" / f"{c.stem}.mkv"
        single[c.name].parent.mkdir(parents=True, exist_ok=True)
        r = vsr("upscale", str(c), str(single[c.name]), *OPTS, "--quiet", "--overwrite")
        assert r.returncode == 0, r.stderr
    print(f"vsr upscale: {len(clips)} clips in {time.perf_counter() - t0:.1f} s")
    runs = {"local": run_local(clips, work, a.chunk_frames)}
    if a.celery:
        runs["celery"] = run_celery(clips, work, a.chunk_frames)
    bad = 0
    for name, outs in runs.items():
        for c in clips:
            got, want = digest(outs[c.name]), digest(single[c.name])
            same = got == want
            bad += not same
            print(f"{name:7s} {c.name}: {got[0]} frames, {'identical' if same else 'DIFFERENT'} "
                  f"(frames, pts, durations, planes, audio packets)")
    shutil.rmtree(work, ignore_errors=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
