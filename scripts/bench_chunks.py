"""Benchmark of batch jobs: a job cut into chunks (plan + every chunk + join) vs one `vsr upscale` pass over the
same clip with the same backend (opened once, shared by both), in paired runs.

    python scripts/bench_chunks.py IN.mp4 [--config edvr-tiny --weights random --codec ffv1 --pairs 3
                                           --chunk-frames 300 --packets N]

Each pair runs the single pass and the chunked job back to back (alternating which goes first), so both see
the same machine load; the result is the median of the per-pair ratios chunked / single (target <= 1.05 at
the default chunk size), with the median plan and join times.  ``--packets N``: the first N video packets of
IN, stream-copied (a shorter clip of the same encoded pictures).  Writes JSON with ``--json PATH``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vsr.backends import BackendRequest, backend_options  # noqa: E402
from vsr.jobs import DEFAULT_CHUNK_FRAMES, JobSpec, join_chunks, plan_chunks, run_chunk  # noqa: E402
from vsr.pipeline.runner import RunnerSettings  # noqa: E402
from vsr.pipeline.upscale import upscale  # noqa: E402
from vsr.video import EncoderSettings  # noqa: E402
from vsr.video.excerpt import excerpt  # noqa: E402


def chunked(spec: JobSpec, backend, chunk_frames: int) -> dict:
    t0 = time.perf_counter()
    chunks = plan_chunks(spec, chunk_frames)
    t1 = time.perf_counter()
    for c in chunks:
        run_chunk(spec, c, backend=backend)
    t2 = time.perf_counter()
    join_chunks(spec, chunks)
    t3 = time.perf_counter()
    return {"wall_s": t3 - t0, "plan_s": t1 - t0, "chunks_s": t2 - t1, "join_s": t3 - t2, "chunks": len(chunks),
            "entries": sorted({c.decode_from for c in chunks})}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("input", type=Path)
    ap.add_argument("--config", default="edvr-tiny")
    ap.add_argument("--weights", default="random")
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--plan", default="auto")
    ap.add_argument("--threads", type=int)
    ap.add_argument("--codec", default="ffv1")
    ap.add_argument("--suffix", default=".mkv")
    ap.add_argument("--chunk-frames", type=int, default=DEFAULT_CHUNK_FRAMES)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--packets", type=int)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    request = BackendRequest(args.weights, args.config, backend_options(args.backend, args.plan, args.threads))
    encoder = EncoderSettings(codec=args.codec)
    backend = request.open()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        src = excerpt(args.input, tmp / f"clip{args.input.suffix}", args.packets) if args.packets else args.input
        for i in range(args.pairs):
            out = tmp / f"pair{i}"
            out.mkdir()
            spec = JobSpec.from_settings(src, out / f"job{args.suffix}", request, encoder, RunnerSettings())
            row = {}
            for which in (("single", "chunked") if i % 2 == 0 else ("chunked", "single")):
                t0 = time.perf_counter()
                if which == "single":
                    upscale(src, out / f"single{args.suffix}", backend=backend, encoder=encoder)
                    row["single_s"] = time.perf_counter() - t0
                else:
                    row.update(chunked(spec, backend, args.chunk_frames))
            row["ratio"] = row["wall_s"] / row["single_s"]
            rows.append(row)
            print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
    summary = {"input": str(args.input), "packets": args.packets, "config": args.config, "codec": args.codec,
               "chunk_frames": args.chunk_frames, "pairs": rows,
               "median_ratio": statistics.median(r["ratio"] for r in rows),
               "median_single_s": statistics.median(r["single_s"] for r in rows),
               "median_plan_s": statistics.median(r["plan_s"] for r in rows),
               "median_join_s": statistics.median(r["join_s"] for r in rows)}
    print(f"chunked / single: median {summary['median_ratio']:.3f} over {len(rows)} pairs "
          f"(single {summary['median_single_s']:.1f} s; plan {summary['median_plan_s']:.2f} s, "
          f"join {summary['median_join_s']:.2f} s)")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
