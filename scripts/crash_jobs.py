"""Crash safety of ``vsr jobs run``: ``kill -9`` the worker at random moments, restart it, then check everything.

    python scripts/crash_jobs.py [--kills 20] [--chunk-frames 8] [--workers 1] [--seed 0] [--shrink WxH] [CLIP ...]

Queues one job per clip (default: two short real clips of /work/shared/data/videos) with EDVR-tiny, random
weights and FFV1, then ``--kills`` times starts ``vsr jobs run --until-empty`` and kills it (SIGKILL) after a
random 0..``--max-wait`` seconds once it has claimed work; after each kill every output path must be absent
or a complete file.  A last run finishes the queue.  Then: every job done, every output decodes to exactly the frames and timestamps of
``vsr upscale`` with the same options, no chunk computed twice (the store's ``computed`` column), nothing
but the outputs left in the output folder, ``PRAGMA integrity_check`` ok.  Prints the summary as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path

import av
import numpy as np

REPO = Path(__file__).resolve().parents[1]
VIDEOS = Path("/work/shared/data/videos")
DEFAULT_CLIPS = [VIDEOS / "h264_256x240_35fps_1s_noaudio.mp4", VIDEOS / "h264_aac_320x240_29.97fps_1.2s_realshort.mp4"]
OPTIONS = ["--config", "edvr-tiny", "--weights", "random", "--codec", "ffv1", "--threads", "1"]


def vsr(*args, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
    res = subprocess.run([sys.executable, "-m", "vsr", *map(str, args)], capture_output=True, text=True,
                         timeout=timeout, cwd=REPO)
    if check and res.returncode != 0:
        raise RuntimeError(f"vsr {' '.join(map(str, args))} exited {res.returncode}: {res.stderr[-2000:]}")
    return res


def shrink(src: Path, dst: Path, width: int, height: int) -> Path:
    """``src`` at ``width`` x ``height`` (every frame, same timestamps), H.264: real content, less compute."""
    with av.open(str(src)) as c, av.open(str(dst), "w") as out:
        vin = c.streams.video[0]
        vs = out.add_stream("libx264", rate=vin.average_rate)
        vs.width, vs.height, vs.pix_fmt = width, height, "yuv420p"
        vs.time_base = vin.time_base
        vs.options = {"preset": "ultrafast"}
        for f in c.decode(vin):
            g = f.reformat(width=width, height=height, format="yuv420p")
            g.pts, g.time_base = f.pts, f.time_base
            for pkt in vs.encode(g):
                out.mux(pkt)
        for pkt in vs.encode(None):
            out.mux(pkt)
    return dst


def frames_of(path: Path) -> list[tuple[object, np.ndarray]]:
    """(time in seconds as a Fraction, the decoded planes) per frame."""
    with av.open(str(path)) as c:
        return [(f.pts * f.time_base, f.to_ndarray()) for f in c.decode(c.streams.video[0])]


def complete(path: Path, expected: int) -> bool:
    try:
        return len(frames_of(path)) == expected
    except (av.FFmpegError, OSError):
        return False


def progress(store: Path) -> tuple:
    """What changes whenever a worker claims or finishes something: claims made, chunks and jobs done."""
    with closing(sqlite3.connect(store, timeout=30)) as db:
        return db.execute("SELECT (SELECT sum(attempts) FROM chunks), (SELECT count(*) FROM chunks WHERE state = "
                          "'done'), (SELECT count(*) FROM jobs WHERE state = 'done'), (SELECT count(join_owner) "
                          "FROM jobs)").fetchone()


def kill_cycle(store: Path, outputs: dict[Path, int], wait_s: float, workers: int) -> dict:
    """Start a worker; once it has claimed something (so the kill lands in its work, not in its start-up),
    SIGKILL it after ``wait_s`` more seconds.  Whether it was still working then, and whether every output path
    held either nothing or a complete file afterwards."""
    before = progress(store)
    p = subprocess.Popen([sys.executable, "-m", "vsr", "jobs", "run", "--until-empty", "--quiet", "--lease", "3",
                          "--workers", str(workers), "--store", str(store)], cwd=REPO,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    while p.poll() is None and progress(store) == before:
        time.sleep(0.05)
    try:
        p.wait(timeout=wait_s)
        landed = False
    except subprocess.TimeoutExpired:
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        landed = True
    at = progress(store)
    bad = [str(o) for o, n in outputs.items() if o.exists() and not complete(o, n)]
    return {"wait_s": round(wait_s, 2), "killed_while_working": landed, "partial_outputs": bad,
            "claims_so_far": at[0], "chunks_done": at[1], "jobs_done": at[2], "joins_held": at[3],
            "exit": p.returncode}


def crash_run(clips: list[Path], work: Path, kills: int, chunk_frames: int = 8, workers: int = 1, seed: int = 0,
              max_wait_s: float = 15.0, options: list[str] = OPTIONS) -> dict:
    """The whole experiment in ``work``; the summary (see the module docstring)."""
    from vsr.jobs.store import JobStore

    rng = random.Random(seed)
    store, out, ref = work / "queue.db", work / "out", work / "ref"
    ref.mkdir(parents=True)
    ids = vsr("jobs", "add", *clips, "--out-dir", out, "--ext", "mkv", "--chunk-frames", chunk_frames,
              "--store", store, *options).stdout.split()
    expected = {}
    for clip in clips:
        vsr("upscale", clip, ref / f"{clip.stem}.mkv", *options, "--quiet")
        expected[out / f"{clip.stem}.mkv"] = ref / f"{clip.stem}.mkv"
    counts = {o: len(frames_of(r)) for o, r in expected.items()}
    cycles = []
    for k in range(kills):
        cycles.append(kill_cycle(store, counts, rng.uniform(0.0, max_wait_s), workers))
        print(f"kill {k + 1}/{kills}: {json.dumps(cycles[-1])}", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    final = vsr("jobs", "run", "--until-empty", "--quiet", "--store", store, "--workers", workers)
    with JobStore(store) as s:
        jobs = s.jobs()
        chunks = [c for j in jobs for c in s.chunks(j.id)]
        integrity = s.integrity_check()
    exact = {}
    for o, r in expected.items():
        a, b = (frames_of(o) if o.exists() else []), frames_of(r)
        exact[o.name] = len(a) == len(b) and all(ta == tb and np.array_equal(x, y) for (ta, x), (tb, y) in zip(a, b))
    return {
        "jobs": ids, "states": [j.state for j in jobs], "errors": [j.error for j in jobs if j.error],
        "kills": kills, "kills_while_working": sum(c["killed_while_working"] for c in cycles),
        "partial_outputs_seen": sum(len(c["partial_outputs"]) for c in cycles),
        "chunks": len(chunks), "max_computed": max(c["computed"] for c in chunks),
        "max_attempts": max(c["attempts"] for c in chunks), "frame_exact": exact,
        "left_in_out_dir": sorted(p.name for p in out.iterdir() if p not in expected),
        "integrity_check": integrity, "final_run_s": round(time.perf_counter() - t0, 1),
        "final_run_stderr": final.stderr[-500:], "cycles": cycles,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("clips", nargs="*", type=Path, default=DEFAULT_CLIPS)
    p.add_argument("--kills", type=int, default=20)
    p.add_argument("--chunk-frames", type=int, default=8)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-wait", type=float, default=15.0, help="longest wait before a kill (seconds)")
    p.add_argument("--shrink", default=None, metavar="WxH", help="scale the clips down first (less compute)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="vsr-crash-") as tmp:
        clips = [c.resolve() for c in args.clips]
        if args.shrink:
            w, h = map(int, args.shrink.split("x"))
            (Path(tmp) / "clips").mkdir()
            clips = [shrink(c, Path(tmp) / "clips" / f"{c.stem}.mp4", w, h) for c in clips]
        (Path(tmp) / "work").mkdir()
        summary = crash_run(clips, Path(tmp) / "work", args.kills, args.chunk_frames, args.workers, args.seed,
                            args.max_wait)
    print(json.dumps(summary, indent=2, default=str))
    ok = (set(summary["states"]) == {"done"} and all(summary["frame_exact"].values())
          and summary["max_computed"] <= 1 and not summary["partial_outputs_seen"]
          and not summary["left_in_out_dir"] and summary["integrity_check"] == "ok")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
