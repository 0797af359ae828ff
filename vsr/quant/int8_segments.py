"""The int8 segment backend: ONNX Runtime sessions of int8 segments, their scales fed from a shared table.

Same load -> bind -> run shape as :class:`vsr.plan.segments.OrtSegmentBackend`; ``bind`` also binds each u8
activation's scale / zero point (from :class:`~vsr.quant.scales.ScaleTable`) and its code statistics, and
``run`` runs the segment again while the table asks for it (saturation under run-time scales) and returns the
seconds those re-runs took (the plan executor records them as the step ``<segment>:rerun``).
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Hashable

import numpy as np

from vsr.kernels.builtin import int8_deform_conv
from vsr.kernels.registry import KERNELS, KernelRegistry
from vsr.plan.segments import OrtSegmentBackend
from vsr.quant.isa import int8_isa, weight_qmax
from vsr.quant.segment_graph import QMAX, QMIN, SCALE, ZERO
from vsr.quant.scales import ScaleTable

QUANT_FILE = "quant.json"


@dataclass(frozen=True)
class Int8SegmentBackend:
    """int8 segments on ONNX Runtime CPU; ``scales``: ``runtime`` | ``static`` | ``exact`` (see scales.py);
    ``dcn_int8``: the DCN bridges' product in int8 too, where it pays (:mod:`vsr.kernels.deform_conv_int8`,
    :func:`vsr.kernels.builtin.int8_pays`; None: where the CPU has VNNI or AMX, where it measured faster than
    fp32: docs/benchmarks.md, issue 33)."""

    threads: int | None = None
    scales: str = "runtime"
    name: str = "onnxruntime"
    precision: str = "int8"
    device: str = "cpu"
    dcn_int8: bool | None = None
    table: ScaleTable = field(default=None, compare=False)  # type: ignore[assignment]
    dcn_made: set = field(default_factory=set, compare=False)  # the DCN kernels bound: "int8", "fp32"

    def __post_init__(self):
        if self.table is None:
            object.__setattr__(self, "table", ScaleTable(self.scales))
        if self.dcn_int8 is None:
            object.__setattr__(self, "dcn_int8", int8_isa() != "avx2")

    @property
    def kernels(self) -> KernelRegistry:
        """The bridge kernels of the plans it runs (:class:`vsr.plan.executor.PlanExecutor` takes them)."""
        if not self.dcn_int8:
            return KERNELS
        int8 = int8_deform_conv(weight_qmax(int8_isa()))

        def deform_conv(node, shapes, constants):
            step = int8(node, shapes, constants)
            self.dcn_made.add("int8" if step.kernel.columns is np.uint8 else "fp32")
            return step

        return KERNELS.replaced("DeformConv", deform_conv, self.device)

    @property
    def version(self) -> str:
        return OrtSegmentBackend().version

    def load(self, path: Path) -> "Int8SegmentRunner":
        quant = json.loads((Path(path).parent / QUANT_FILE).read_text())
        for name, t in quant["tensors"].items():
            self.table.add(name, t["range"][0], t["range"][1], t["relu"], t.get("zero"))
        session = OrtSegmentBackend(threads=self.threads).load(Path(path)).session
        return Int8SegmentRunner(session, self.table)

    def reset(self) -> None:
        self.table.reset()

    @contextmanager
    def held(self):
        """Runs inside are warm-ups: each segment once, its scales untouched.  A warm-up's input is zeros, not a
        frame; re-running it to follow its ranges cost EDVR-M at 180x320 18 segment runs instead of 8 (the int8
        warm-up 31 s against fp32's 17 s, loaded machine)."""
        self.table.held = True
        try:
            yield
        finally:
            self.table.held = False

    def follow(self, context: Hashable, anew: bool = False) -> None:
        """The next runs are of ``context`` (a call's tiles); ``anew``: it starts a scene (see scales.py)."""
        self.table.select(context, anew)

    def facts(self, steps: dict[str, float] | None = None) -> dict:
        """For the run's report: the ISA this machine's int8 plans are for and their weights' largest code, the
        scales' policy, and segment runs so far, with how many of them were re-runs (saturated scales); with the
        plan's ``steps`` (seconds by step, re-runs as ``<segment>:rerun``), the re-runs' seconds and their share
        of the per-call steps (all but ``build:``)."""
        isa = int8_isa()
        out = {"isa": isa, "weight_qmax": weight_qmax(isa), "scales": self.scales,
               "segment_runs": self.table.passes, "reruns": self.table.reruns}
        if steps is not None:
            per_call = {k: v for k, v in steps.items() if not k.startswith("build:")}
            rerun = sum(v for k, v in per_call.items() if k.endswith(":rerun"))
            whole = sum(per_call.values())
            out |= {"rerun_s": round(float(rerun), 3), "rerun_share": round(rerun / whole, 4) if whole else 0.0}
        return {"int8": out | {"dcn": ", ".join(sorted(self.dcn_made)) or "fp32"}}


class Int8SegmentRunner:
    def __init__(self, session, table: ScaleTable):
        self.session = session
        self.table = table
        inputs = [i.name for i in session.get_inputs()]
        self.names = [n[:-len(SCALE)] for n in inputs if n.endswith(SCALE)]
        self.fed_zero = {n for n in self.names if n + ZERO in inputs}  # else the graph holds it (fixed)
        self.qmax = [np.zeros((), np.uint8) for _ in self.names]
        self.qmin = [np.zeros((), np.uint8) for _ in self.names]

    def scale_feeds(self) -> dict[str, np.ndarray]:
        """The table's arrays bound to the segment's scale inputs (and its zero-point inputs, where it has them):
        updated in place, so one binding follows every change."""
        feeds = {}
        for n in self.names:
            feeds[n + SCALE] = self.table.tensors[n].scale
            if n in self.fed_zero:
                feeds[n + ZERO] = self.table.tensors[n].zero
        return feeds

    def bind(self, inputs: dict[str, np.ndarray], outputs: dict[str, np.ndarray]) -> Callable[[], None]:
        io = self.session.io_binding()
        feeds = dict(inputs) | self.scale_feeds()
        results = dict(outputs)
        for n, hi, lo in zip(self.names, self.qmax, self.qmin):
            results[n + QMAX], results[n + QMIN] = hi, lo
        for name, arr in feeds.items():
            io.bind_input(name, "cpu", 0, arr.dtype.type, list(arr.shape), arr.ctypes.data)
        for name, arr in results.items():
            io.bind_output(name, "cpu", 0, arr.dtype.type, list(arr.shape), arr.ctypes.data)
        sess, table, names, qmax, qmin = self.session, self.table, self.names, self.qmax, self.qmin

        def run() -> float:
            """Run until no code saturates (the table raises after its rule's passes); the seconds spent in the
            runs after the first."""
            sess.run_with_iobinding(io)
            first = time.perf_counter()
            passes = 1
            while table.after_run(names, qmax, qmin, passes):
                table.reruns += 1
                sess.run_with_iobinding(io)
                passes += 1
            return time.perf_counter() - first if passes > 1 else 0.0

        return run
