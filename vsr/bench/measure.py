"""Timing the cases: warm-up outside the clock, then the cases interleaved frame by frame.

Frame ``i`` of every case runs on the same window, one case after the other (the starting case rotates each
round), so a change in the machine's load during the run reaches every case alike and the per-frame ratios
between two cases are paired.  Warm-up (export, plan, sessions: ``backend.prepare``, then one untimed run on
window 0) is timed separately as the case's build time; the timed frames are windows 1, 2, ...  A backend that
keeps each frame's features gets the windows as a run's stream (``infer_stream``): after the warm-up window each
timed window brings one new frame, as in the middle of a video.  ``upscale`` cases run after the others
(:mod:`vsr.bench.upscale`).
"""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path
from typing import Callable

import numpy as np

from vsr.backends import Backend, FrameKeys, open_backend
from vsr.bench.cases import DEFAULT_BASELINE, bench_cases, select_cases
from vsr.bench.inputs import BenchInput, bench_input
from vsr.bench.results import BenchResult, BenchSettings, CaseResult, round_order
from vsr.bench.upscale import run_upscale_cases
from vsr.errors import InputError
from vsr.machine import usable_cores
from vsr.report.sample import StepStats, step_kind


def run_bench(settings: BenchSettings, progress: Callable[[str], None] | None = None) -> BenchResult:
    """Opens and warms every case, then times ``settings.frames`` frames of each, interleaved; then the
    ``upscale`` cases."""
    say = progress or (lambda message: None)
    check_settings(settings)
    cases = select_cases(bench_cases(settings.threads), settings.cases)
    names = [c.name for c in cases]
    baseline = settings.baseline or (DEFAULT_BASELINE if DEFAULT_BASELINE in names else names[0])
    if baseline not in names:
        raise InputError(f"baseline {baseline!r} is not among the cases run ({', '.join(names)})")
    from vsr.model.weights import resolve_config

    config, _ = resolve_config(settings.model_weights, settings.config)
    # the warm-up window and one timed window per frame
    data = bench_input(settings.input, settings.size, settings.frames + 1, config.num_frame, settings.seed)
    backends: list[Backend] = []
    results: list[CaseResult] = []
    for case in (c for c in cases if c.kind == "frames"):
        say(f"warming up {case.name}")
        t0 = time.perf_counter()
        backend = open_backend(settings.model_weights, settings.config, case.options)
        backend.prepare(*settings.size, 1)
        first = _infer(backend, data, 0)
        results.append(CaseResult(case, backend.name, _device(backend), time.perf_counter() - t0,
                                  first_output=first))
        backends.append(backend)
    before = [(b.timings(), b.step_stats()) for b in backends]
    started = time.perf_counter()
    for i in range(settings.frames if backends else 0):
        say(f"frame {i + 1}/{settings.frames}")
        for k in round_order(len(backends), i):
            t0 = time.perf_counter()
            _infer(backends[k], data, i + 1)
            t1 = time.perf_counter()
            results[k].times.append(t1 - t0)
            results[k].spans.append((t0, t1))
    wall = time.perf_counter() - started
    for r, b, (totals, stats) in zip(results, backends, before):
        r.steps, r.step_stats = _timed_steps(b, totals, stats, started)
    upscales = [c for c in cases if c.kind == "upscale"]
    if upscales:
        results += run_upscale_cases(settings, data, upscales, say)
    return BenchResult(settings, data, config.name, machine(), results, baseline, started, wall)


def _infer(backend: Backend, data: BenchInput, i: int) -> np.ndarray:
    """Window ``i``: through ``infer_stream`` (frames ``i..i+T-1`` of one stream) where the backend streams."""
    t = backend.num_frame
    x = data.window(i, t)
    if not getattr(backend, "keeps_features", False):
        return backend.infer(x)
    return backend.infer_stream(x, FrameKeys(1, (tuple(range(i, i + t)),), (0,), keep_from=i + 1))


def check_settings(settings: BenchSettings) -> None:
    """An InputError for settings no case could run: before minutes of model loading, not after."""
    h, w = settings.size
    if h < 1 or w < 1:
        raise InputError(f"bench frame size must be at least 1x1, not {h}x{w}")
    if settings.frames < 1:
        raise InputError(f"bench needs at least 1 timed frame, not {settings.frames}")
    if settings.input not in (None, "random") and not Path(settings.input).exists():
        raise InputError(f"bench input {settings.input} does not exist")


def _timed_steps(backend: Backend, before: dict[str, float], before_stats: dict[str, StepStats],
                 started: float) -> tuple[dict[str, float], dict[str, StepStats]]:
    """The backend's step times since ``before`` (one-off builds: their whole time), and per-call records of
    the calls that began at or after ``started``."""
    steps = {name: v if step_kind(name) == "build" else v - before.get(name, 0.0)
             for name, v in backend.timings().items()}
    stats = {}
    for name, st in backend.step_stats().items():
        b = before_stats.get(name)
        calls = st.calls - (b.calls if b else 0)
        spans = tuple(s for s in st.intervals if s[0] >= started)
        stats[name] = StepStats(name, calls, st.total_s - (b.total_s if b else 0.0),
                                tuple(e - a for a, e in spans), spans, calls)
    return steps, stats


def _device(backend: Backend) -> str | None:
    """Where a backend that says so runs (PyTorch: ``cpu``, ``cuda``)."""
    device = getattr(backend, "device", None)
    return None if device is None else str(device)


def machine() -> dict:
    """The facts a reader needs to compare two machines' benchmarks."""
    import onnxruntime
    import torch

    return {"cpu": _cpu_name(), "cores": os.cpu_count(), "usable_cores": usable_cores(),
            "system": platform.platform(terse=True), "python": platform.python_version(),
            "onnxruntime": onnxruntime.__version__, "ort_providers": onnxruntime.get_available_providers(),
            "torch": torch.__version__, "numba_threading_layer": _numba_layer(),
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _numba_layer() -> str | None:
    """numba's threading layer if one was picked (a parallel loop has run), else what is asked for."""
    import numba

    try:
        return numba.threading_layer()
    except ValueError:
        return os.environ.get("NUMBA_THREADING_LAYER")
