"""The CUDA graphs of the CUDA runtime, and the GPU memory they hold, counted.

A backend captures one graph per program and input shape: the whole model per (bucket, planned batch), or --
keeping each frame's features -- a ``features`` graph and a ``windows`` graph per (bucket, planned batch).  All
of them draw on one memory pool, which holds the working memory of the largest plus every graph's static inputs
and outputs -- provided the largest is captured first: a capture reuses the pool's free blocks only where they
are large enough, so graphs captured smallest first each add their own working memory (an H100 ran out of its
80 GB that way: 60.7 GB of pools for 8 shapes).  Hence:

* :meth:`GraphSet.plan` captures a bucket's graphs largest first; a graph larger than every one kept releases
  them all, and all are captured again, largest first (``prepare`` only: a run never captures);
* a bucket's graphs are released when its plan changes (another batch), and the least recently planned bucket
  when more than ``keep`` are planned;
* each program runs once outside its capture (lazy initialisation: cuBLAS workspaces, cupy's modules), all of
  them before the first capture, and the blocks of each run go back to the device (``empty_cache``): no warm-up
  runs beside a pool already held (the features program's, warmed after the windows graph's capture, took
  0.35 GB at batch 1 and 1.3 GB at batch 4 beyond the plan, by reading);
* :class:`GraphMemory` keeps what was measured per graph -- its static bytes, how much the pool grew while it was
  captured -- and the bound the pool must stay within (the largest graph's working memory and every graph's
  statics).

``api`` is ``torch.cuda``; tests give a recording stand-in (there is no GPU in CI), which is how the order of
captures, releases and warm-ups is checked.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable

import torch

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GraphSpec:
    """A graph to capture: ``program(*inputs) -> output(s)``; ``inputs``: ``(shape, dtype, memory_format)`` of each
    static input; ``size``: what orders captures (the larger first; LR pixels x batch, x2 for the windows)."""

    key: tuple
    program: Callable
    inputs: tuple[tuple[tuple[int, ...], torch.dtype, torch.memory_format], ...]
    size: int


def static_inputs(spec: GraphSpec, device: torch.device) -> tuple[torch.Tensor, ...]:
    """Zeros of the shapes, dtypes and memory formats of ``spec``'s inputs."""
    return tuple(torch.empty(shape, dtype=dtype, device=device, memory_format=fmt).zero_()
                 for shape, dtype, fmt in spec.inputs)


def tensors_nbytes(tensors) -> int:
    """Bytes of a tensor or of a (nested) list / tuple of them."""
    if isinstance(tensors, torch.Tensor):
        return tensors.numel() * tensors.element_size()
    return sum(tensors_nbytes(t) for t in tensors)


class CapturedRun:
    """One CUDA graph: static ``inputs`` (allocated here, zeros), ``program`` captured on them into ``pool`` in
    ``thread_local`` mode (another thread's CUDA calls during the capture -- the decoder's, the encoder's --
    neither break it nor are recorded into it); ``output`` its static output."""

    def __init__(self, spec: GraphSpec, device: torch.device, pool, api):
        self.spec = spec
        self.inputs = static_inputs(spec, device)
        self.graph = api.CUDAGraph()
        with api.graph(self.graph, pool=pool, capture_error_mode="thread_local"):
            self.output = spec.program(*self.inputs)

    def __call__(self, *xs: torch.Tensor):
        """Copy ``xs`` into the static inputs (None: left as they are) and replay."""
        for dst, x in zip(self.inputs, xs):
            if x is not None:
                dst.copy_(x)
        self.graph.replay()
        return self.output

    @property
    def static_nbytes(self) -> int:
        return tensors_nbytes(self.inputs) + tensors_nbytes(self.output)


@dataclass
class GraphMemory:
    """What the graphs of one pool hold, in bytes, as measured: per graph key its static inputs and outputs and
    how much the pool (the device's reserved memory) grew while it was captured."""

    statics: dict[tuple, int] = field(default_factory=dict)
    grown: dict[tuple, int] = field(default_factory=dict)

    @property
    def pool_nbytes(self) -> int:
        """The pool's size: what its captures took from the device."""
        return sum(self.grown.values())

    @property
    def statics_nbytes(self) -> int:
        return sum(self.statics.values())

    def bound(self, working: dict[tuple, int]) -> int:
        """What the pool may hold: the largest of the graphs' own ``working`` memory (each graph measured alone,
        its statics included) plus the statics of all the others."""
        keys = set(self.statics) | set(working)
        if not keys:
            return 0
        return max(working.get(k, 0) - self.statics.get(k, 0) for k in keys) + self.statics_nbytes

    def to_dict(self) -> dict:
        return {"graphs": len(self.statics), "pool_mib": self.pool_nbytes / 2**20,
                "statics_mib": self.statics_nbytes / 2**20}


class GraphSet:
    """The CUDA graphs of one backend on ``device`` (see the module's docstring): :meth:`plan` is called by
    ``prepare`` only; during a run :meth:`get` looks graphs up and never captures."""

    def __init__(self, device: torch.device, api=None, keep: int = 4):
        self.device = device
        self.api = torch.cuda if api is None else api
        self.keep = keep
        self.pool = None
        self.runs: dict[tuple, CapturedRun] = {}
        self.buckets: OrderedDict[tuple, list[GraphSpec]] = OrderedDict()  # planned, least recent first
        self.memory = GraphMemory()

    def get(self, key: tuple) -> CapturedRun | None:
        return self.runs.get(key)

    def plan(self, bucket: tuple, specs: list[GraphSpec]) -> None:
        """Make ``specs`` the graphs of ``bucket`` (capturing those not kept), releasing what left the plan."""
        self.buckets.pop(bucket, None)  # planned again: the most recent
        self.buckets[bucket] = list(specs)
        while len(self.buckets) > self.keep:
            self.buckets.popitem(last=False)
        wanted = {s.key for specs_ in self.buckets.values() for s in specs_}
        for key in [k for k in self.runs if k not in wanted]:
            self._release(key)
        new = [s for s in specs if s.key not in self.runs]
        if not new:
            return
        largest = max((r.spec.size for r in self.runs.values()), default=0)
        if max(s.size for s in new) > largest and self.runs:  # the pool must grow from its largest graph
            log.info("CUDA graphs: %s is larger than the %d kept: capturing all again, largest first",
                     max(new, key=lambda s: s.size).key, len(self.runs))
            self.release()
            new = [s for specs_ in self.buckets.values() for s in specs_]
        order = sorted(new, key=lambda s: -s.size)
        for spec in order:  # every program's warm-up before any capture: none runs beside a pool already held
            self._warm_up(spec)
        for spec in order:
            self._capture(spec)

    def release(self) -> None:
        """Release every graph and the pool (its memory goes back to the device once nothing holds it)."""
        for key in list(self.runs):
            self._release(key)
        self.pool = None
        self.memory = GraphMemory()
        self.api.empty_cache()

    def _release(self, key: tuple) -> None:
        del self.runs[key]
        self.memory.statics.pop(key, None)

    def _capture(self, spec: GraphSpec) -> CapturedRun:
        api = self.api
        if self.pool is None:
            self.pool = api.graph_pool_handle()
        before = api.memory_reserved(self.device)
        run = self.runs[spec.key] = CapturedRun(spec, self.device, self.pool, api)
        self.memory.statics[spec.key] = run.static_nbytes
        self.memory.grown[spec.key] = api.memory_reserved(self.device) - before
        log.info("captured a CUDA graph for %s: the pool grew %.0f MiB (%d graphs in it)", spec.key,
                 self.memory.grown[spec.key] / 2**20, len(self.runs))
        return run

    def _warm_up(self, spec: GraphSpec) -> None:
        """Run ``spec`` once outside any capture, on a side stream, then give its blocks back to the device."""
        api = self.api
        inputs = static_inputs(spec, self.device)
        side = api.Stream(self.device)
        side.wait_stream(api.current_stream(self.device))
        with api.stream(side):
            spec.program(*inputs)
        api.current_stream(self.device).wait_stream(side)
        del inputs
        api.synchronize(self.device)
        api.empty_cache()
