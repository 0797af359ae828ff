"""Benchmark of `vsr upscale`'s runner: end-to-end fps vs. each stage alone, and peak RSS over the run.

    python scripts/bench_pipeline.py IN.mp4 [--config edvr-tiny --weights random --frames 0:24 ...]

Steps:
1. each stage alone on the same frames: decode (+ colour conversion), infer (backend on the same batches
   the runner builds), post (tile crops -> output planes), encode (PyAV encoder + muxer);
2. the threaded runner end to end, sampling the process RSS every 0.1 s;
3. prints (and with --json writes) fps of each, the ratio end-to-end / slowest stage alone (target >= 0.9),
   peak RSS, and RSS at the first and last quarter of the run (flat = bounded memory).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

import numpy as np


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def peak_rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


class RssSampler:
    def __init__(self, every_s: float = 0.1):
        self.every_s, self.samples, self._stop = every_s, [], threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        t0 = time.perf_counter()
        while not self._stop.is_set():
            self.samples.append((time.perf_counter() - t0, rss_mb()))
            time.sleep(self.every_s)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()


class StandIn:
    """The opened backend's shapes with a bicubic x4 of the centre frame as its 'inference' (benchmark only)."""

    def __init__(self, real):
        self.num_frame, self.scale, self.config, self.name = real.num_frame, real.scale, real.config, "stand-in"

    def infer(self, x: np.ndarray) -> np.ndarray:
        import cv2

        c = x[:, self.num_frame // 2]
        return np.stack([cv2.resize(f.transpose(1, 2, 0), None, fx=self.scale, fy=self.scale,
                                    interpolation=cv2.INTER_CUBIC).transpose(2, 0, 1) for f in c])

    def timings(self) -> dict:
        return {}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input")
    ap.add_argument("--config", default="edvr-tiny")
    ap.add_argument("--weights", default="random")
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--plan", default="auto")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--tile", type=int, default=None, help="LR tile (default: automatic from the budget)")
    ap.add_argument("--memory-budget", type=int, default=3072)
    ap.add_argument("--stand-in", action="store_true",
                    help="replace the model by a bicubic x4 of the centre frame (same shapes, no model memory): "
                         "measures the pipeline and encoder alone over long runs")
    ap.add_argument("--frames", default="0:12")
    ap.add_argument("--codec", default=None)
    ap.add_argument("--skip-alone", action="store_true", help="only the end-to-end run (e.g. for RSS)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    from vsr.backends import backend_options, open_backend
    from vsr.cli.upscale import parse_frames
    from vsr.pipeline import FrameQueueRunner, RunnerSettings
    from vsr.pipeline.tiles import tile_grid
    from vsr.pipeline.windows import window_indices
    from vsr.video import EncoderSettings, open_sink, open_source
    from vsr.video.planes import convert_tile, plane_views, region

    warnings.simplefilter("ignore")
    frames = parse_frames(args.frames)
    start, stop = frames
    backend = open_backend(args.weights, args.config, backend_options(args.backend, args.plan, args.threads))
    if args.stand_in:
        backend = StandIn(backend)
    settings = RunnerSettings(batch=args.batch, tile=args.tile, memory_budget_mb=args.memory_budget, frames=frames)
    runner = FrameQueueRunner(backend, settings)
    enc = EncoderSettings(codec=args.codec)
    tmp = Path(tempfile.mkdtemp(prefix="vsr-bench-"))
    suffix = Path(args.input).suffix if Path(args.input).is_file() else ".mkv"
    result: dict = {"input": args.input, "config": args.config, "backend": backend.name, "batch": args.batch,
                    "frames": args.frames, "cpu_count": os.cpu_count()}
    rss_before = rss_mb()

    alone = {}
    if not args.skip_alone:
        # 1. decode alone (also keeps the frames for the other stages)
        src = open_source(args.input)
        info = src.info
        t0 = time.perf_counter()
        lr = []
        for f in src.frames():
            if stop is not None and f.index >= stop:
                break
            if f.index >= start:
                lr.append(f)
        alone["decode"] = len(lr) / (time.perf_counter() - t0)
        n = len(lr)
        sink = open_sink(tmp / f"alone{suffix}", info, enc)
        tile, _ = runner.plan_tile(info.height, info.width, sink)
        tiles = tile_grid(info.height, info.width, tile, settings.overlap)
        # 2. infer alone, on the same batches the runner builds (first call excluded: export / warm-up)
        items = [(i, t) for i in range(n) for t in tiles]
        batches = [items[k:k + args.batch] for k in range(0, len(items), args.batch)]

        def batch_array(b):
            t = b[0][1]
            x = np.empty((len(b), backend.num_frame, 3, t.y1 - t.y0, t.x1 - t.x0), np.float32)
            for j, (i, t) in enumerate(b):
                for k, idx in enumerate(window_indices(i, n, backend.num_frame, runner.padding)):
                    x[j, k] = lr[idx].rgb[:, t.y0:t.y1, t.x0:t.x1]
            return x

        backend.infer(batch_array(batches[0]))
        outs = []
        t0 = time.perf_counter()
        for b in batches:
            y = backend.infer(batch_array(b))
            outs.append(y)
        alone["infer"] = n / (time.perf_counter() - t0)
        # 3. post alone, 4. encode alone
        fmt = sink.planes
        sc = backend.scale
        t0 = time.perf_counter()
        planes = []
        flat = [(i, t, y[j]) for b, y in zip(batches, outs) for j, (i, t) in enumerate(b)]
        cur = None
        for i, t, y in flat:
            if cur is None or cur[0] != i:
                cur = (i, sink.new_planes(info.height * sc, info.width * sc))
                planes.append(cur)
            core = (sc * (t.cy0 - t.y0), sc * (t.cy1 - t.y0), sc * (t.cx0 - t.x0), sc * (t.cx1 - t.x0))
            convert_tile(y, fmt, region(plane_views(cur[1]), fmt, sc * t.cy0, sc * t.cy1, sc * t.cx0, sc * t.cx1),
                         core)
        planes = [(i, sink.finish(p)) for i, p in planes]
        alone["post"] = n / (time.perf_counter() - t0)
        del outs, flat
        t0 = time.perf_counter()
        for (i, p) in planes:
            sink.write(p, lr[i].pts, lr[i].duration)
        sink.commit()
        alone["encode"] = n / (time.perf_counter() - t0)
        del planes, lr
        result["alone_fps"] = {k: round(v, 4) for k, v in alone.items()}
        result["slowest_alone"] = min(alone, key=alone.get)

    # 5. end to end
    src = open_source(args.input)
    sink = open_sink(tmp / f"e2e{suffix}", src.info, enc, trim=start > 0 or stop is not None)
    with RssSampler() as rss:
        report = runner.run(src, sink)
    sink.commit()
    result["e2e_fps"] = round(report.fps, 4)
    result["stages"] = report.to_dict()["stages"]
    result["bottleneck"] = report.bottleneck.name
    if alone:
        result["e2e_over_slowest_alone"] = round(report.fps / min(alone.values()), 4)
    s = [m for _, m in rss.samples] or [rss_mb()]
    q = max(len(s) // 4, 1)
    result["rss_mb"] = {"before_run": round(rss_before, 1), "peak_process": round(peak_rss_mb(), 1),
                        "peak_during_run": round(max(s), 1), "mean_first_quarter": round(float(np.mean(s[:q])), 1),
                        "mean_last_quarter": round(float(np.mean(s[-q:])), 1),
                        "peak_per_tenth": [round(float(max(part)), 1) for part in np.array_split(np.array(s), 10)
                                           if len(part)]}
    result["memory_plan"] = report.settings.get("memory_plan")
    result["tile"] = report.settings["tile"]
    result["tiles_per_frame"] = report.settings["tiles_per_frame"]
    print(report.table())
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    for p in tmp.iterdir():
        p.unlink()
    tmp.rmdir()
    return 0


if __name__ == "__main__":
    sys.exit(main())
