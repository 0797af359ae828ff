"""Whole ``vsr upscale`` runs as bench cases (``upscale-...``): the per-run figures beside the per-frame ones.

Each run is a new process (``python -m vsr upscale``) on the bench's frames, written as a PNG folder, into a PNG
folder, with ``--report``.  Its wall time is the process's; the run after warm-up is the report's wall time (first
frame decoded to last frame written); the warm-up is the rest: interpreter start, imports, model load, export,
plan and sessions (from the caches the per-frame cases share: same engine folder), warm-up runs, and the end.
The cases' runs alternate, ``settings.runs`` rounds, so load changes reach every case alike.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np

from vsr.bench.cases import BenchCase
from vsr.bench.inputs import BenchInput
from vsr.bench.results import BenchSettings, CaseResult, round_order
from vsr.errors import BackendError


def run_upscale_cases(settings: BenchSettings, data: BenchInput, cases: list[BenchCase],
                      say: Callable[[str], None]) -> list[CaseResult]:
    """``settings.runs`` runs of each case, alternating; per case: ``times`` the seconds per frame of each run
    after warm-up, ``process_s`` each process's wall time, ``build_s`` the median warm-up."""
    results = [CaseResult(c, c.name, None, 0.0) for c in cases]
    warmups: list[list[float]] = [[] for _ in cases]
    with tempfile.TemporaryDirectory(prefix="vsr-bench-") as tmp:
        src = write_frames(data.frames, Path(tmp) / "in")
        for r in range(settings.runs):
            for k in round_order(len(cases), r):
                say(f"upscale run {r + 1}/{settings.runs}: {cases[k].name}")
                t0 = time.perf_counter()
                report = upscale_once(settings, cases[k], src, Path(tmp) / f"out{k}", Path(tmp) / f"run{k}.json")
                t1 = time.perf_counter()
                res = results[k]
                res.process_s.append(t1 - t0)
                res.times.append(report["wall_s"] / max(report["frames"], 1))
                res.spans.append((t0, t1))
                res.report = report
                warmups[k].append((t1 - t0) - report["wall_s"])
    for res, w in zip(results, warmups):
        res.build_s = float(np.median(w))
        res.backend = res.report["settings"].get("backend", res.backend)
    return results


def write_frames(frames: np.ndarray, folder: Path) -> Path:
    """``frames (F, 3, H, W)`` in [0, 1] as ``%08d.png`` (8-bit RGB) in a new ``folder``."""
    import cv2

    folder.mkdir()
    for i, f in enumerate(frames):
        rgb = np.clip(np.rint(f.transpose(1, 2, 0) * 255.0), 0, 255).astype(np.uint8)
        cv2.imwrite(os.fsencode(folder / f"{i:08d}.png"), rgb[:, :, ::-1])
    return folder


def upscale_once(settings: BenchSettings, case: BenchCase, src: Path, out: Path, report: Path) -> dict:
    """One ``vsr upscale`` process of ``case`` on ``src``; its report (a BackendError with the process's last
    line when it fails)."""
    cmd = [sys.executable, "-m", "vsr", "upscale", str(src), str(out), "--weights", settings.model_weights,
           *(["--config", settings.config] if settings.config else []), *case.cli_args(), "--report", str(report),
           "--quiet", "--overwrite"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        lines = [x for x in done.stderr.strip().splitlines() if not x.startswith("vsr: warning:")]
        why = lines[-1] if lines else (f"killed by signal {-done.returncode}" if done.returncode < 0
                                       else f"exit status {done.returncode}")
        raise BackendError(f"bench case {case.name}: vsr upscale failed ({why})")
    return json.loads(report.read_text())
