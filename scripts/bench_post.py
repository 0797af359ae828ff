"""The post stage per 4K output frame, read from a run's own report (busy seconds / frames): issue 29's figure.

    PYTHONPATH=. python scripts/bench_post.py [IN] [--frames 12] [--codec rawvideo] [--output numpy|torch]
                                              [--json OUT.json]

Runs vsr's runner (decode, scenes, windows, batches, infer, post, encode: ``FrameQueueRunner``, the real source
and sink) on the 960x540 clip to 3840x2160 with a stand-in model: bicubic x4 of each window's centre frame, in
torch on one thread.  EDVR takes minutes per 4K frame on a 2-core CPU; the post stage's work depends only on
the shape and dtype of the model's output (float32 RGB ``(N, 3, 2160, 3840)``, what the CPU backends give), not
on the model, and on the memory it is in: ``--output numpy`` (default) returns it as the default backends (split,
ort) do, in an array they allocate with numpy and fill (huge pages where the kernel gives them: freeing it is
cheap); ``--output torch`` returns torch's own tensor, as the torch backend does (4 KB pages: ~10 ms of munmap
per frame wherever the last reference goes, the post stage).  ``--codec rawvideo`` (default): an encoder that
takes nothing from the post stage's cores.  Prints each stage's busy time, and its time on a core and runnable
but waiting for one (Linux schedstat), per frame; fps and the process's CPU per frame.  Only public runner
APIs, so the same script measures any checkout: ``PYTHONPATH=/path/to/checkout python scripts/bench_post.py``.

``--alone N``: the post stage's work by itself instead (``hr_frames`` on N float32 4K results, the real sink's
frames, nothing else running in the process): median wall and CPU milliseconds per frame, one numba thread
(``NUMBA_NUM_THREADS=1``) or all.  CPU time is what a loaded shared machine distorts least.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

CLIP = Path(__file__).resolve().parents[2] / "shared" / "data" / "train" / "videos" / "sam2_bedroom_960x540.mp4"


class BicubicStandIn:
    """EDVR's interface (5-frame windows, x4), bicubic x4 of the centre frame on one torch thread: float32 RGB."""

    name = "bicubic-x4 (benchmark stand-in)"
    options = SimpleNamespace(threads=1)  # as --threads 1 says it: the runner leaves the other core to the rest
    num_frame = 5
    scale = 4
    padding = "reflection_circle"

    def __init__(self, output: str = "numpy"):
        self.output = output

    def prepare(self, height, width, batch, phase=None, planes=None):
        pass

    def infer(self, x: np.ndarray) -> np.ndarray:
        centre = torch.from_numpy(np.ascontiguousarray(x[:, self.num_frame // 2]))
        y = torch.nn.functional.interpolate(centre, scale_factor=4, mode="bicubic")
        if self.output == "torch":
            return y.numpy()
        out = np.empty(tuple(y.shape), np.float32)
        torch.from_numpy(out).copy_(y)
        return out

    def timings(self):
        return {}

    def step_stats(self):
        return {}


class StageClocks:
    """Each stage thread's time on a core and time runnable but waiting for one (Linux ``/proc`` schedstat, ns),
    read every ``period`` s while the run lasts: what a stage's busy time is made of (the rest: waits for the GIL,
    locks, page faults' I/O)."""

    def __init__(self, period: float = 0.02):
        self.seen: dict[str, tuple[int, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, args=(period,), daemon=True)

    def __enter__(self) -> "StageClocks":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _poll(self, period: float) -> None:
        while not self._stop.wait(period):
            for t in threading.enumerate():
                if t.name.startswith("vsr-") and t.native_id is not None:
                    try:
                        run, wait = Path(f"/proc/self/task/{t.native_id}/schedstat").read_text().split()[:2]
                    except (OSError, ValueError):
                        continue
                    self.seen[t.name[4:]] = (int(run), int(wait))


def alone(source, sink, frames: int) -> dict:
    """Median wall and CPU (process) ms of the post stage's work per 4K frame, fed results directly."""
    from vsr.pipeline.batches import Result, Slot
    from vsr.pipeline.runner import hr_frames
    from vsr.pipeline.tiles import tile_grid

    h, w = source.info.height, source.info.width
    [tile] = tile_grid(h, w, None, 16)
    y = np.random.default_rng(0).random((1, 3, 4 * h, 4 * w), dtype=np.float32)
    walls, cpus = [], []
    for i in range(frames + 2):  # two warm-ups (numba's cache load, first allocations)
        t, c = time.perf_counter(), time.process_time()
        for _ in hr_frames(iter([Result((Slot(i, i, 1, tile),), y)]), sink, h, w, 4, 1):
            pass
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    return {"wall_ms": 1e3 * float(np.median(walls[2:])), "cpu_ms": 1e3 * float(np.median(cpus[2:]))}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("input", nargs="?", default=str(CLIP))
    p.add_argument("--frames", type=int, default=12)
    p.add_argument("--codec", default="rawvideo")
    p.add_argument("--json", default=None)
    p.add_argument("--output", choices=("numpy", "torch"), default="numpy",
                   help="the stand-in's output memory: numpy (as the split and ort backends give it) or torch's own")
    p.add_argument("--alone", type=int, default=0, metavar="N", help="the post stage's work alone, N frames")
    args = p.parse_args(argv)
    import vsr
    from vsr.pipeline import FrameQueueRunner, RunnerSettings
    from vsr.video import EncoderSettings, open_sink, open_source

    torch.set_num_threads(1)  # inference on one thread; the other core is the rest of the pipeline's
    source = open_source(Path(args.input))
    with tempfile.TemporaryDirectory() as tmp:
        sink = open_sink(Path(tmp) / "out.mkv", source.info, EncoderSettings(codec=args.codec), scale=4)
        if args.alone:
            out = alone(source, sink, args.alone)
            sink.abort()
            print(f"post alone: {out['wall_ms']:.1f} ms wall, {out['cpu_ms']:.1f} ms CPU per frame (vsr from "
                  f"{vsr.__file__})")
            return 0
        runner = FrameQueueRunner(BicubicStandIn(args.output), RunnerSettings(tile=0, frames=(0, args.frames),
                                                                   memory_budget_mb=16384))
        t0, c0 = time.perf_counter(), time.process_time()
        with StageClocks() as clocks:
            report = runner.run(source, sink).to_dict()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        sink.commit()
    source.close()
    frames = report["frames"]
    stages = {s["name"]: s for s in report["stages"]}
    per = 1e3 / frames
    out = {"vsr": vsr.__file__, "input": args.input, "codec": args.codec, "output": args.output, "frames": frames,
           "wall_s": wall, "process_cpu_ms_per_frame": cpu * per,
           "stages": {k: {"busy_s": s["busy_s"], "ms_per_frame": s["busy_s"] * per,
                          "on_cpu_ms_per_frame": clocks.seen.get(k, (0, 0))[0] * 1e-9 * per,
                          "runnable_ms_per_frame": clocks.seen.get(k, (0, 0))[1] * 1e-9 * per}
                      for k, s in stages.items()}}
    print("stage    busy s   busy ms/frame   on a core   waiting for one (ms/frame)")
    for name, s in out["stages"].items():
        print(f"{name:8s} {s['busy_s']:6.2f}  {s['ms_per_frame']:10.1f}  {s['on_cpu_ms_per_frame']:10.1f}  "
              f"{s['runnable_ms_per_frame']:10.1f}")
    print(f"post: {out['stages']['post']['ms_per_frame']:.1f} ms per {source.info.width * 4}x{source.info.height * 4} "
          f"frame ({frames} frames, {wall:.1f} s, {frames / wall:.2f} fps, process CPU {cpu * per:.0f} ms/frame, "
          f"vsr from {vsr.__file__})")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
