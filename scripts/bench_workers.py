#!/usr/bin/env python3
"""Batch jobs through Celery: the same job set with 1 worker, then with 2 (wall time from submit to done).

    python scripts/bench_workers.py [CLIP ...] [--config edvr-tiny] [--weights random] [--codec ffv1]
        [--chunk-frames 8] [--workers 1,2] [--backend torch --threads 1] [--shrink 64x48:16] [--check]

Starts its own redis-server on 127.0.0.1 (a free port, no persistence) and ``N`` worker processes of one
process each (``vsr.jobs.distributed.run_worker``); the clock starts once every worker answers a ping (their
start-up, torch import included, is left out) and stops when every job is done.  Each worker opens its backend
at its first chunk, which is inside the clock.  ``--shrink WxH:N`` first re-encodes the first N frames of each
clip at WxH (real content, a size a shared machine can afford).  ``--check``: every output must decode to the
frames and timestamps of one ``vsr.pipeline.upscale`` pass with the same options.  Prints one Markdown row per
worker count and the ratio; CPU-s is the workers' user+system time (RUSAGE_CHILDREN).
"""

from __future__ import annotations

import argparse
import hashlib
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

VIDEOS = Path(__file__).resolve().parents[2] / "shared" / "data" / "videos"
CLIPS = ["h264_256x240_35fps_1s_noaudio.mp4", "h264_aac_320x240_29.97fps_1.2s_realshort.mp4",
         "vp9_320x180_30fps_10s_bbb.webm"]


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("clips", nargs="*", default=[str(VIDEOS / c) for c in CLIPS])
    p.add_argument("--config", default="edvr-tiny")
    p.add_argument("--weights", default="random")
    p.add_argument("--codec", default="ffv1")
    p.add_argument("--chunk-frames", type=int, default=8)
    p.add_argument("--workers", default="1,2", help="worker counts to time, in order")
    p.add_argument("--backend", default="torch")
    p.add_argument("--threads", type=int, default=1, help="inference threads per worker")
    p.add_argument("--shrink", default=None, metavar="WxH:N")
    p.add_argument("--check", action="store_true")
    return p.parse_args()


def shrink(clips: list[Path], spec: str, folder: Path) -> list[Path]:
    """The first N frames of each clip at WxH, x264 lossless (yuv420p), keeping the clip's frame rate."""
    size, n = spec.split(":")
    w, h = map(int, size.split("x"))
    out = []
    for clip in clips:
        dst = folder / f"{clip.stem}-{w}x{h}-{n}.mkv"
        with av.open(str(clip)) as src, av.open(str(dst), "w") as oc:
            vin = src.streams.video[0]
            rate = vin.average_rate or Fraction(25)
            vs = oc.add_stream("libx264", rate=rate)
            vs.width, vs.height, vs.pix_fmt, vs.options = w, h, "yuv420p", {"qp": "0"}
            for i, frame in enumerate(src.decode(vin)):
                if i == int(n):
                    break
                small = frame.reformat(width=w, height=h, format="yuv420p")
                small.pts, small.time_base = i, 1 / Fraction(rate)
                for pkt in vs.encode(small):
                    oc.mux(pkt)
            for pkt in vs.encode(None):
                oc.mux(pkt)
        out.append(dst)
    return out


def start_redis(folder: Path) -> tuple[subprocess.Popen, str]:
    import redis

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", str(folder)], stdout=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    for _ in range(400):
        try:
            redis.Redis.from_url(url).ping()
            return proc, url
        except redis.ConnectionError:
            time.sleep(0.05)
    proc.kill()
    sys.exit("redis-server did not start")


def timed_run(url: str, n: int, specs: list, chunk_frames: int, logs: Path) -> tuple[float, float]:
    """(wall s from submit to every job done, workers' CPU-s) with ``n`` one-process workers."""
    import redis

    from vsr.jobs.distributed import make_app, status, submit

    redis.Redis.from_url(url).flushall()
    code = "import sys; from vsr.jobs.distributed import run_worker; run_worker(sys.argv[1], 1)"
    procs = [subprocess.Popen([sys.executable, "-c", code, url], stdout=(logs / f"w{n}-{i}.log").open("w"),
                              stderr=subprocess.STDOUT) for i in range(n)]
    app = make_app(url)
    try:
        while len(app.control.ping(timeout=1.0)) < n:
            if any(p.poll() is not None for p in procs):
                sys.exit(f"a worker stopped; see {logs}")
        cpu0 = _children_cpu()
        t0 = time.perf_counter()
        ids = submit(specs, url, chunk_frames)
        while True:
            rows = [r for r in status(url) if r["id"] in ids]
            if all(r["state"] in ("done", "failed") for r in rows):
                break
            time.sleep(0.1)
        wall = time.perf_counter() - t0
        failed = [r["error"] for r in rows if r["state"] == "failed"]
        if failed:
            sys.exit(f"a job failed: {failed[0]}")
    finally:
        app.close()
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait()
    return wall, _children_cpu() - cpu0


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def decoded(path: Path) -> list:
    with av.open(str(path)) as c:
        return [(f.pts, f.duration, hashlib.sha256(np.ascontiguousarray(f.to_ndarray()).tobytes()).hexdigest())
                for f in c.decode(c.streams.video[0])]


def check(specs: list, request, encoder, folder: Path) -> None:
    """Each output against one ``vsr upscale`` pass (video frames: pts, duration, planes)."""
    from vsr.pipeline.upscale import upscale

    backend = None
    for spec in specs:
        ref = folder / f"ref-{Path(spec.output).name}"
        if not ref.exists():  # made once for every worker count
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                backend = backend or request.open()
                upscale(spec.input, ref, backend=backend, encoder=encoder)
        same = decoded(Path(spec.output)) == decoded(ref)
        print(f"check {Path(spec.input).name}: {'bit-identical' if same else 'DIFFERENT'} to a single pass")
        if not same:
            sys.exit(1)


def main() -> None:
    args = parse()
    from vsr.backends import BackendRequest, backend_options
    from vsr.jobs import JobSpec
    from vsr.pipeline.runner import RunnerSettings
    from vsr.video import EncoderSettings

    if shutil.which("redis-server") is None:
        sys.exit("redis-server is not installed")
    work = Path(tempfile.mkdtemp(prefix="vsr-bench-workers-"))
    clips = [Path(c) for c in args.clips]
    if args.shrink:
        clips = shrink(clips, args.shrink, work)
    request = BackendRequest(args.weights, args.config, backend_options(args.backend, "auto", args.threads))
    encoder = EncoderSettings(codec=args.codec)
    frames = sum(len(decoded(c)) for c in clips)
    redis_proc, url = start_redis(work)
    results = {}
    try:
        for n in (int(x) for x in args.workers.split(",")):
            out = work / f"out{n}"
            out.mkdir()
            specs = [JobSpec.from_settings(c, out / f"{c.stem}.mkv", request, encoder, RunnerSettings())
                     for c in clips]
            results[n] = timed_run(url, n, specs, args.chunk_frames, work)
            wall, cpu = results[n]
            print(f"| {n} | {len(clips)} | {frames} | {wall:.1f} | {frames / wall:.3f} | {cpu:.1f} |", flush=True)
            if args.check:
                check(specs, request, encoder, work)
    finally:
        redis_proc.kill()
        redis_proc.wait()
    counts = sorted(results)
    if len(counts) > 1:
        print(f"speed-up {counts[-1]} vs {counts[0]} workers: {results[counts[0]][0] / results[counts[-1]][0]:.2f}x")
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
