"""What a bench is asked to measure (:class:`BenchSettings`) and what it measured (:class:`CaseResult`,
:class:`BenchResult`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from vsr.bench.cases import BenchCase
from vsr.bench.inputs import BenchInput
from vsr.report.sample import StepStats


@dataclass(frozen=True)
class BenchSettings:
    """What to measure.  ``config``/``weights`` as for ``vsr upscale`` (weights None: the bundled default when no
    config is named, else seeded random ones: speed does not depend on the weights' values); ``size``: LR (H, W);
    ``frames``: timed frames per case; ``input``: clip, ``"random"`` or None (see :func:`bench_input`);
    ``cases``: case names to run (None: every per-frame case); ``baseline``: the case ratios are taken against
    (None: ``ort-whole-fp32`` where it runs, else the first case); ``runs``: runs of each ``upscale`` case."""

    config: str | None = None
    weights: str | None = None
    size: tuple[int, int] = (180, 320)
    frames: int = 3
    threads: int | None = None
    input: str | None = None
    cases: tuple[str, ...] | None = None
    baseline: str | None = None
    seed: int = 0
    runs: int = 1

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
    process_s: list[float] = field(default_factory=list)  # upscale cases: each run's process wall time
    report: dict | None = None  # upscale cases: the last run's own report


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


def round_order(n: int, i: int) -> list[int]:
    """Round ``i`` starts at case ``i mod n``: no case is always the first after a change of case."""
    return [(i + k) % n for k in range(n)]
