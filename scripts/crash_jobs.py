"""Crash safety of ``vsr jobs run``: ``kill -9`` the worker at random moments, restart it, then check everything.

    python scripts/crash_jobs.py [--kills 20] [--chunk-frames 8] [--workers 1] [--seed 0] [--shrink WxH]
                                 [--replace-after K] [CLIP ...]

Queues one job per clip (default: two short real clips of /work/shared/data/videos) with EDVR-tiny, random
weights and FFV1, then ``--kills`` times starts ``vsr jobs run --until-empty`` and kills it (SIGKILL) after a
random 0..``--max-wait`` seconds once it has claimed work; after each kill every output path must be absent
or a complete file.  A last run finishes the queue.  Then: every job done, every output decodes to exactly the
frames and timestamps of ``vsr upscale`` with the same options, no chunk computed twice (the store's
``computed`` column), nothing but the outputs left in the output folder, ``PRAGMA integrity_check`` ok.

``--replace-after K``: after the K-th kill (which comes as soon as a chunk is committed) the first clip is replaced
by another clip of the same length (its frames mirrored), as a user replacing a file under a running queue would.
Its job must then either have been done already, frame-exact to the original, or fail with one line naming the
file, with no output: never be done from chunks of two versions.  Prints the summary as JSON.
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


def mirrored(src: Path) -> bytes:
    """``src`` with every frame mirrored left to right (same length, same timestamps), H.264, as bytes."""
    with tempfile.TemporaryDirectory(prefix="vsr-mirror-") as tmp:
        dst = Path(tmp) / f"m{src.suffix}"
        with av.open(str(src)) as c, av.open(str(dst), "w") as out:
            vin = c.streams.video[0]
            vs = out.add_stream("libx264", rate=vin.average_rate)
            vs.width, vs.height, vs.pix_fmt = vin.codec_context.width, vin.codec_context.height, "yuv420p"
            vs.time_base = vin.time_base
            vs.options = {"preset": "ultrafast"}
            for f in c.decode(vin):
                g = av.VideoFrame.from_ndarray(np.ascontiguousarray(f.to_ndarray(format="rgb24")[:, ::-1]),
                                               format="rgb24").reformat(format="yuv420p")
                g.pts, g.time_base = f.pts, f.time_base
                for pkt in vs.encode(g):
                    out.mux(pkt)
            for pkt in vs.encode(None):
                out.mux(pkt)
        return dst.read_bytes()


def added_ids(stdout: str) -> list[str]:
    """The job ids ``vsr jobs add`` printed (``job N: IN -> OUT (...)``)."""
    return [line.split()[1].rstrip(":") for line in stdout.splitlines() if line.startswith("job ")]


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


def kill_cycle(store: Path, outputs: dict[Path, int], wait_s: float, workers: int, chunks: int = 0) -> dict:
    """Start a worker; once it has claimed something (so the kill lands in its work, not in its start-up), and
    committed ``chunks`` more chunks, SIGKILL it after ``wait_s`` more seconds.  Whether it was still working
    then, and whether every output path held either nothing or a complete file afterwards."""
    before = progress(store)
    p = subprocess.Popen([sys.executable, "-m", "vsr", "jobs", "run", "--until-empty", "--quiet", "--lease", "3",
                          "--workers", str(workers), "--store", str(store)], cwd=REPO,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    while p.poll() is None and (progress(store) == before or progress(store)[1] < before[1] + chunks):
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
              max_wait_s: float = 15.0, options: list[str] = OPTIONS, replace_after: int | None = None) -> dict:
    """The whole experiment in ``work``; the summary (see the module docstring)."""
    from vsr.jobs.store import JobStore

    rng = random.Random(seed)
    store, out, ref = work / "queue.db", work / "out", work / "ref"
    ref.mkdir(parents=True)
    ids = added_ids(vsr("jobs", "add", *clips, "--out-dir", out, "--ext", "mkv", "--chunk-frames", chunk_frames,
                        "--store", store, *options).stdout)
    expected = {}
    for clip in clips:
        vsr("upscale", clip, ref / f"{clip.stem}.mkv", *options, "--quiet")
        expected[out / f"{clip.stem}.mkv"] = ref / f"{clip.stem}.mkv"
    counts = {o: len(frames_of(r)) for o, r in expected.items()}
    replacement = mirrored(clips[0]) if replace_after is not None else None
    cycles = []
    for k in range(kills):
        replacing = replacement is not None and k + 1 == replace_after  # kill as a chunk is committed: mid-job
        wait = rng.uniform(0.0, max_wait_s)
        cycles.append(kill_cycle(store, counts, 0.0 if replacing else wait, workers, chunks=int(replacing)))
        print(f"kill {k + 1}/{kills}: {json.dumps(cycles[-1])}", file=sys.stderr, flush=True)
        if replacing:
            clips[0].write_bytes(replacement)  # the same clip's length, other pictures
    t0 = time.perf_counter()
    # a replaced input fails its job, and `jobs run` then exits 1 (it ran a job that failed); else 0
    final = vsr("jobs", "run", "--until-empty", "--quiet", "--store", store, "--workers", workers, check=False)
    if final.returncode != (0 if replacement is None else 1):
        raise RuntimeError(f"the last vsr jobs run exited {final.returncode}: {final.stderr[-2000:]}")
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
        "replaced": None if replacement is None else {"input": str(clips[0]), "after_kill": replace_after,
                                                      "state": jobs[0].state, "error": jobs[0].error,
                                                      "output_exists": (out / f"{clips[0].stem}.mkv").exists()},
        "kills": kills, "kills_while_working": sum(c["killed_while_working"] for c in cycles),
        "partial_outputs_seen": sum(len(c["partial_outputs"]) for c in cycles),
        "chunks": len(chunks), "max_computed": max(c["computed"] for c in chunks),
        "max_attempts": max(c["attempts"] for c in chunks), "frame_exact": exact,
        "left_in_out_dir": sorted(p.name for p in out.iterdir() if p not in expected),
        "integrity_check": integrity, "final_run_s": round(time.perf_counter() - t0, 1),
        "final_run_exit": final.returncode, "final_run_stderr": final.stderr[-500:], "cycles": cycles,
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
    p.add_argument("--replace-after", type=int, default=None, metavar="K",
                   help="replace the first clip by another of its length after the K-th kill")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="vsr-crash-") as tmp:
        clips = [c.resolve() for c in args.clips]
        (Path(tmp) / "clips").mkdir()
        if args.shrink:
            w, h = map(int, args.shrink.split("x"))
            clips = [shrink(c, Path(tmp) / "clips" / f"{c.stem}.mp4", w, h) for c in clips]
        elif args.replace_after is not None:  # never the caller's own file
            (Path(tmp) / "clips" / clips[0].name).write_bytes(clips[0].read_bytes())
            clips[0] = Path(tmp) / "clips" / clips[0].name
        (Path(tmp) / "work").mkdir()
        summary = crash_run(clips, Path(tmp) / "work", args.kills, args.chunk_frames, args.workers, args.seed,
                            args.max_wait, replace_after=args.replace_after)
    print(json.dumps(summary, indent=2, default=str))
    return 0 if passed(summary) else 1


def passed(summary: dict) -> bool:
    """Every job done and frame-exact; or, for a replaced input, its job done from the original before the
    replacement (frame-exact to it) or failed with one line naming the file and no output."""
    states, exact = list(summary["states"]), dict(summary["frame_exact"])
    replaced = summary.get("replaced")
    if replaced is not None and replaced["state"] == "failed":
        name = Path(replaced["input"]).stem + ".mkv"
        if replaced["output_exists"] or replaced["input"] not in (replaced["error"] or "") or \
                "\n" in replaced["error"] or exact.pop(name, None):
            return False
        states = states[1:]
    return (set(states) <= {"done"} and all(exact.values()) and summary["max_computed"] <= 1
            and not summary["partial_outputs_seen"] and not summary["left_in_out_dir"]
            and summary["integrity_check"] == "ok")


if __name__ == "__main__":
    sys.exit(main())
