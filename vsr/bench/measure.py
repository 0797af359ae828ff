"""Timing the cases: warm-up outside the clock, then the cases interleaved frame by frame.

Frame ``i`` of every case runs on the same window, one case after the other (the starting case rotates each
round), so a change in the machine's load during the run reaches every case alike and the per-frame ratios
between two cases are paired.  Warm-up (export, plan, sessions: ``backend.prepare``, then one untimed run) is
timed separately as the case's build time.
"""

from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from vsr.backends import Backend, open_backend
from vsr.bench.cases import DEFAULT_BASELINE, BenchCase, bench_cases, select_cases
from vsr.bench.inputs import BenchInput, bench_input
from vsr.errors import InputError
from vsr.report.sample import StepStats, step_kind


@dataclass(frozen=True)
class BenchSettings:
    """What to measure.  ``config``/``weights`` as for ``vsr upscale`` (weights None: the bundled default when no
    config is named, else seeded random ones: speed does not depend on the weights' values); ``size``: LR (H, W);
    ``frames``: timed frames per case; ``input``: clip, ``"random"`` or None (see :func:`bench_input`);
    ``cases``: case names to run (None: all); ``baseline``: the case ratios are taken against (None:
    ``ort-whole-fp32`` where it runs, else the first case)."""

    config: str | None = None
    weights: str | None = None
    size: tuple[int, int] = (180, 320)
    frames: int = 3
    threads: int | None = None
    input: str | None = None
    cases: tuple[str, ...] | None = None
    baseline: str | None = None
    seed: int = 0

    @property
    def model_weights(self) -> str:
        if self.weights is not None:
            return self.weights
        return "default" if self.config is None else "random"


@dataclass
class CaseResult:
    """One case's measurements (seconds).  ``times``/``spans``: per timed frame, in order (``time.perf_counter``
    spans); ``build_s``: open + prepare + the untimed run; ``steps``/``step_stats``: the backend's steps over the
    timed frames only (one-off build steps: their whole time); ``first_output``: the untimed run's output."""

    case: BenchCase
    backend: str
    device: str | None
    build_s: float
    times: list[float] = field(default_factory=list)
    spans: list[tuple[float, float]] = field(default_factory=list)
    steps: dict[str, float] = field(default_factory=dict)
    step_stats: dict[str, StepStats] = field(default_factory=dict)
    first_output: np.ndarray | None = None


@dataclass
class BenchResult:
    """A finished benchmark: the settings, the input, the model's config name, machine facts, every case (in
    run order), the baseline's name and the timed part's start (``time.perf_counter``) and wall time."""

    settings: BenchSettings
    input: BenchInput
    config: str
    machine: dict
    cases: list[CaseResult]
    baseline: str
    started: float
    wall_s: float


def run_bench(settings: BenchSettings, progress: Callable[[str], None] | None = None) -> BenchResult:
    """Opens and warms every case, then times ``settings.frames`` frames of each, interleaved."""
    say = progress or (lambda message: None)
    check_settings(settings)
    cases = select_cases(bench_cases(settings.threads), settings.cases)
    names = [c.name for c in cases]
    baseline = settings.baseline or (DEFAULT_BASELINE if DEFAULT_BASELINE in names else names[0])
    if baseline not in names:
        raise InputError(f"baseline {baseline!r} is not among the cases run ({', '.join(names)})")
    backends: list[Backend] = []
    results: list[CaseResult] = []
    data = None
    for case in cases:
        say(f"warming up {case.name}")
        t0 = time.perf_counter()
        backend = open_backend(settings.model_weights, settings.config, case.options)
        if data is None:
            data = bench_input(settings.input, settings.size, settings.frames, backend.num_frame, settings.seed)
        backend.prepare(*settings.size, 1)
        first = backend.infer(data.window(0, backend.num_frame))
        results.append(CaseResult(case, backend.name, _device(backend), time.perf_counter() - t0,
                                  first_output=first))
        backends.append(backend)
    before = [(b.timings(), b.step_stats()) for b in backends]
    started = time.perf_counter()
    for i in range(settings.frames):
        say(f"frame {i + 1}/{settings.frames}")
        for k in _round_order(len(cases), i):
            x = data.window(i, backends[k].num_frame)
            t0 = time.perf_counter()
            backends[k].infer(x)
            t1 = time.perf_counter()
            results[k].times.append(t1 - t0)
            results[k].spans.append((t0, t1))
    wall = time.perf_counter() - started
    for r, b, (totals, stats) in zip(results, backends, before):
        r.steps, r.step_stats = _timed_steps(b, totals, stats, started)
    return BenchResult(settings, data, getattr(getattr(backends[0], "config", None), "name", "?"), machine(),
                       results, baseline, started, wall)


def check_settings(settings: BenchSettings) -> None:
    """An InputError for settings no case could run: before minutes of model loading, not after."""
    h, w = settings.size
    if h < 1 or w < 1:
        raise InputError(f"bench frame size must be at least 1x1, not {h}x{w}")
    if settings.frames < 1:
        raise InputError(f"bench needs at least 1 timed frame, not {settings.frames}")
    if settings.input not in (None, "random") and not Path(settings.input).exists():
        raise InputError(f"bench input {settings.input} does not exist")


def _round_order(n: int, i: int) -> list[int]:
    """Round ``i`` starts at case ``i mod n``: no case is always the first after a change of case."""
    return [(i + k) % n for k in range(n)]


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

    return {"cpu": _cpu_name(), "cores": os.cpu_count(),
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
