"""Run a :class:`~vsr.plan.plan.SubgraphPlan`: segments on a segment backend, bridge ops on vsr's kernels.

Build once, run many times::

    ex = PlanExecutor(plan, OrtSegmentBackend(threads=2))
    bound = ex.bind({"lr": (N, T, 3, H, W)})     # arena + kernels + IO bindings for these shapes
    bound.inputs["lr"][...] = frames              # write the input into its planned buffer
    bound.run()
    hr = bound.outputs["hr"]                      # a view of the arena: copy it before the next run

Every intermediate tensor and kernel workspace lives in one arena sized by the static memory plan
(:mod:`vsr.plan.arena`).  The arena is host memory (:class:`HostMemory`) unless the executor is given another
:class:`ArenaMemory` (the CUDA runtime's device arena, ``vsr.backends.cuda.engines``).  Each step is timed;
:meth:`PlanExecutor.timings` gives seconds per step name.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Callable, Protocol

import numpy as np

from vsr.kernels.registry import KERNELS, BridgeNode, KernelRegistry
from vsr.plan.arena import ArenaPlan
from vsr.plan.plan import SubgraphPlan
from vsr.plan.segments import SegmentBackend, SegmentRunner
from vsr.report.sample import StepStats, StepTimes

log = logging.getLogger(__name__)


class ArenaMemory(Protocol):
    """Where a bound plan's arena lives: ``allocate(nbytes)`` a flat byte buffer; ``views`` typed tensors of it
    (as :meth:`ArenaPlan.views`); ``window(arena, offset, nbytes)`` a byte range (a kernel's workspace)."""

    def allocate(self, nbytes: int): ...

    def views(self, plan: ArenaPlan, arena, shapes: dict[str, tuple], dtypes: dict[str, str]) -> dict: ...

    def window(self, arena, offset: int, nbytes: int): ...


class HostMemory:
    """The arena as one numpy array in host memory (the default)."""

    def allocate(self, nbytes: int) -> np.ndarray:
        return np.empty(nbytes, np.uint8)

    def views(self, plan: ArenaPlan, arena, shapes, dtypes) -> dict[str, np.ndarray]:
        return plan.views(arena, shapes, dtypes)

    def window(self, arena, offset: int, nbytes: int) -> np.ndarray:
        return arena[offset:offset + nbytes]


@dataclass
class BoundPlan:
    """A plan bound to concrete shapes: its arena, typed views, and one run callable per step."""

    env: dict[str, int]
    memory: ArenaPlan
    arena: np.ndarray
    inputs: dict[str, np.ndarray]
    outputs: dict[str, np.ndarray]
    tensors: dict[str, np.ndarray]
    calls: list[tuple[str, Callable[[], None]]] = field(default_factory=list)
    times: StepTimes | None = None

    def run(self, record: bool = True) -> None:
        """Run every step once; ``record=False`` (a warm-up run) leaves the step times as they are.

        A call may return the seconds it spent at its end running again (an int8 segment whose run-time scales
        saturated, :mod:`vsr.quant.int8_segments`): those are recorded as the step ``<name>:rerun``."""
        times = self.times if record else None
        for name, call in self.calls:
            t0 = time.perf_counter()
            again = call()
            if times is not None:
                t1 = time.perf_counter()
                if again:
                    times.add(name, t0, t1 - again)
                    times.add(f"{name}:rerun", t1 - again, t1)
                else:
                    times.add(name, t0, t1)


class PlanExecutor:
    """Executes ``plan``; segment runners are loaded once, bindings are made once per input shape.

    Bridge steps take their kernels from ``kernels`` (by op type and the segment backend's device); None: the
    segment backend's own ``kernels`` where it has them (int8 segments: the DCN's product in int8), else
    :data:`~vsr.kernels.registry.KERNELS`.
    """

    def __init__(self, plan: SubgraphPlan, segment_backend: SegmentBackend, kernels: KernelRegistry | None = None,
                 memory: ArenaMemory | None = None):
        self.plan = plan
        self.backend = segment_backend
        self.kernels = kernels or getattr(segment_backend, "kernels", None) or KERNELS
        self.memory = memory or HostMemory()
        self._runners: dict[str, SegmentRunner] = {}
        self._bound: dict[tuple, BoundPlan] = {}
        self._times = StepTimes(s.name for s in plan.steps)
        for s in plan.steps:
            if s.kind == "segment":
                self._runners[s.name] = segment_backend.load(plan.directory / s.file)

    def timings(self) -> dict[str, float]:
        """Seconds spent in each step since creation, by step name (in plan order)."""
        return self._times.totals()

    def step_stats(self) -> dict[str, StepStats]:
        """Per-call statistics of each step (calls, total, p50/p95, a bounded sample of intervals)."""
        return self._times.stats()

    def bind(self, input_shapes: dict[str, tuple[int, ...]]) -> BoundPlan:
        key = tuple(sorted((k, tuple(v)) for k, v in input_shapes.items()))
        bound = self._bound.get(key)
        if bound is None:
            bound = self._bound[key] = self._bind(input_shapes)
        return bound

    def _bind(self, input_shapes) -> BoundPlan:
        plan = self.plan
        env = plan.symbols(input_shapes)
        shapes = {t: info.concrete_shape(env) for t, info in plan.tensors.items()}
        kernels = {}
        for i, s in enumerate(plan.steps):
            if s.kind == "bridge":
                factory = self.kernels.factory(s.op_type, self.backend.device)
                node = BridgeNode(s.op_type, s.attrs, s.epilogue)
                in_shapes = [shapes[t] if t else None for t in s.inputs]
                consts = {j: plan.constants[c] for j, c in s.constants.items()}
                kernels[i] = factory(node, in_shapes, consts)
        memory = plan.arena_plan(env, {i: k.workspace_nbytes() for i, k in kernels.items()})
        arena = self.memory.allocate(memory.arena_nbytes)
        names = [b for b in memory.buffers if not b.startswith("workspace:")]
        views = self.memory.views(memory, arena, {t: shapes[t] for t in names},
                                  {t: plan.tensors[t].dtype for t in names})
        bound = BoundPlan(env=env, memory=memory, arena=arena, inputs={t: views[t] for t in plan.inputs},
                          outputs={t: views[t] for t in plan.outputs}, tensors=views, times=self._times)
        for i, s in enumerate(plan.steps):
            if s.kind == "segment":
                call = self._runners[s.name].bind({t: views[t] for t in s.inputs},
                                                  {t: views[t] for t in s.outputs})
            else:
                ws_name = f"workspace:{s.name}"
                if ws_name in memory.buffers:
                    b = memory.buffers[ws_name]
                    ws = self.memory.window(arena, b.offset, b.nbytes)
                else:
                    ws = self.memory.window(arena, 0, 0)
                call = _bridge_call(kernels[i], [views[t] if t else None for t in s.inputs],
                                    [views[t] for t in s.outputs], ws)
            bound.calls.append((s.name, call))
        log.info("plan bound for %s: arena %.1f MiB (naive %.1f MiB)", env, memory.arena_nbytes / 2**20,
                 memory.naive_nbytes / 2**20)
        return bound

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Convenience: copy ``feeds`` in, run, return copies of the outputs."""
        bound = self.bind({k: v.shape for k, v in feeds.items()})
        for k, v in feeds.items():
            np.copyto(bound.inputs[k], v)
        bound.run()
        return {k: v.copy() for k, v in bound.outputs.items()}


def _bridge_call(kernel, inputs, outputs, workspace) -> Callable[[], None]:
    def call() -> None:
        kernel.run(inputs, outputs, workspace)
    return call


class FrontAndWindows:
    """A plan with a per-frame front (:meth:`SubgraphPlan.per_frame_plan`) as two executors: ``front``, on frames,
    and ``windows``, the rest (:meth:`SubgraphPlan.window_plan`; also ``plan``, ``bind``).

    :meth:`run` runs whole windows ``{input: (N, T, C, H, W)}``: the front on their ``N*T`` frames, then the rest
    on its outputs (each frame's features every time it comes, as a plan without a front computes them) --
    what calibration and tests need.  A runner that keeps each frame's features (``vsr.backends.split``) binds
    the two parts itself.
    """

    def __init__(self, plan: SubgraphPlan, segment_backend: SegmentBackend, kernels: KernelRegistry | None = None,
                 executor: Callable[[SubgraphPlan], PlanExecutor] | None = None):
        make = executor or (lambda p: PlanExecutor(p, segment_backend, kernels))
        self.whole = plan
        self.front = make(plan.per_frame_plan())
        self.windows = make(plan.window_plan())
        self.plan = self.windows.plan

    def bind(self, input_shapes: dict[str, tuple[int, ...]]) -> BoundPlan:
        return self.windows.bind(input_shapes)

    def timings(self) -> dict[str, float]:
        return self.front.timings() | self.windows.timings()

    def step_stats(self) -> dict[str, StepStats]:
        return self.front.step_stats() | self.windows.step_stats()

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Copies of the plan's outputs for ``feeds`` (the plan's own inputs)."""
        x = feeds[self.whole.inputs[0]]
        features = self.front.run({self.whole.frame_input: x.reshape((-1,) + x.shape[2:])})
        return self.windows.run({**feeds, **features})


def plan_executor(plan: SubgraphPlan, segment_backend: SegmentBackend, kernels: KernelRegistry | None = None):
    """The executor of ``plan``: a :class:`FrontAndWindows` where it has a per-frame front, else a
    :class:`PlanExecutor`; both ``run`` whole windows."""
    if plan.frame_input is None:
        return PlanExecutor(plan, segment_backend, kernels)
    return FrontAndWindows(plan, segment_backend, kernels)
