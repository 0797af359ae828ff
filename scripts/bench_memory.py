"""Peak RSS of `vsr upscale` against its --memory-budget and its memory plan (docs/benchmarks.md,
"Memory").

    python scripts/bench_memory.py IN.mp4 --frames 0:6 --budgets 3072 2048 [-- extra vsr upscale options]

Each budget runs `python -m vsr upscale IN OUT --frames A:B --memory-budget B --report run.json` in a child
process, one at a time (they are heavy), and reads the child's peak RSS from the kernel (``wait4``'s
``ru_maxrss``, the same figure as ``/usr/bin/time -v``'s "Maximum resident set size").  Prints a Markdown
table: budget, tile, planned total, peak RSS, budget - peak, plan - peak (all MiB: vsr's MB is 2**20 bytes).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path


def run_one(src: str, frames: str, budget: int, extra: list[str], tmp: Path) -> dict:
    out, report = tmp / f"out-{budget}.mp4", tmp / f"run-{budget}.json"
    cmd = [sys.executable, "-m", "vsr", "upscale", src, str(out), "--frames", frames, "--memory-budget",
           str(budget), "--report", str(report), "--quiet", "--overwrite", *extra]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    err = proc.stderr.read().strip()
    proc.returncode = os.waitstatus_to_exitcode(status)
    row = {"budget_mb": budget, "rc": proc.returncode, "peak_rss_mb": round(usage.ru_maxrss / 1024, 1)}
    if proc.returncode != 0:
        row["error"] = err.splitlines()[-1] if err else ""
        return row
    plan = json.loads(report.read_text())["settings"]["memory_plan"]
    row.update(tile=plan["tile"], planned_mb=plan["total_mb"], plan=plan,
               budget_minus_peak_mb=round(budget - row["peak_rss_mb"], 1),
               plan_minus_peak_mb=round(plan["total_mb"] - row["peak_rss_mb"], 1))
    return row


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input")
    ap.add_argument("--frames", default="0:6")
    ap.add_argument("--budgets", type=int, nargs="+", default=[3072, 2048])
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="vsr-bench-memory-") as tmp:
        for budget in args.budgets:
            rows.append(run_one(args.input, args.frames, budget, extra, Path(tmp)))
            print(json.dumps({k: v for k, v in rows[-1].items() if k != "plan"}), flush=True)
    print("\n| input | frames | budget (MB) | tile | planned (MB) | peak RSS (MB) | budget - peak | plan - peak |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["rc"] != 0:
            print(f"| {Path(args.input).name} | {args.frames} | {r['budget_mb']} | refused: {r['error']} |")
            continue
        print(f"| {Path(args.input).name} | {args.frames} | {r['budget_mb']} | {r['tile']} | {r['planned_mb']} | "
              f"{r['peak_rss_mb']} | {r['budget_minus_peak_mb']} | {r['plan_minus_peak_mb']} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
