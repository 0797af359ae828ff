"""int8 subgraph plans: calibrate the fp32 graph, choose the int8 convs, rewrite each segment of the plan.

:func:`int8_plan_transform` is the ``transform`` that :func:`vsr.plan.plan.write_plan` (and the plan cache)
applies; it writes ``quant.json`` beside the segments (every u8 activation's calibration range, the per-layer
sensitivity) and the manifest lists the convs kept in fp32 with their measured SQNR.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import onnx

from vsr.plan.partition import Partition
from vsr.plan.plan import SubgraphPlan
from vsr.quant.calibrate import ConvStats, calibrate_plan
from vsr.quant.config import QuantConfig, calibration_windows
from vsr.quant.rewrite import quantize_segment
from vsr.quant.int8_segments import QUANT_FILE

log = logging.getLogger(__name__)


def choose_fp32(stats: list[ConvStats], keep_fp32: float) -> set[str]:
    """The ``ceil(keep_fp32 * len(stats))`` convs of lowest SQNR (the most sensitive ones)."""
    k = math.ceil(keep_fp32 * len(stats)) if keep_fp32 > 0 else 0
    return {s.node for s in sorted(stats, key=lambda s: s.sqnr_db)[:k]}


def activation_ranges(model: onnx.ModelProto, stats: list[ConvStats]) -> dict[str, tuple[float, float]]:
    """Calibration range of every tensor an int8 segment may quantize: conv inputs and outputs, and the output
    of a Relu / LeakyRelu applied to a conv output (derived: both are monotonic)."""
    ranges: dict[str, tuple[float, float]] = {}
    for s in stats:
        ranges[s.x] = s.x_range
        ranges[s.y] = s.y_range
    for n in model.graph.node:
        if n.op_type in ("Relu", "LeakyRelu") and n.input[0] in ranges:
            lo, hi = ranges[n.input[0]]
            alpha = 0.0 if n.op_type == "Relu" else next(
                (a.f for a in n.attribute if a.name == "alpha"), 0.01)
            ranges[n.output[0]] = (alpha * min(lo, 0.0), max(hi, 0.0))
    return ranges


def input_hw(model: onnx.ModelProto) -> tuple[int | None, int, int]:
    """``(T, H, W)`` of the model input ``(N, T, 3, H, W)``; ``(None, H, W)`` for single frames ``(N, 3, H, W)``."""
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    return (dims[1], dims[3], dims[4]) if len(dims) == 5 else (None, dims[2], dims[3])


def _fp32_plan(part: Partition, out: Path) -> SubgraphPlan:
    """The fp32 plan of ``part`` with its segment files in ``out`` (replaced by the int8 ones afterwards)."""
    for name, seg in part.segments.items():
        onnx.save(seg, str(out / f"{name}.onnx"))
    return SubgraphPlan(directory=out, steps=part.steps, tensors=part.tensors, inputs=part.inputs,
                        outputs=part.outputs, constants=part.constants, frame_input=part.frame_input)


def int8_plan_transform(cfg: QuantConfig, threads: int | None = None):
    """The plan transform of ``cfg`` (see the module docstring)."""

    def transform(part: Partition, model: onnx.ModelProto, out: Path) -> dict:
        t, h, w = input_hw(model)
        # each conv's sensitivity only where it chooses the convs kept in fp32 (none by default)
        stats = calibrate_plan(_fp32_plan(part, out), calibration_windows(cfg, t, h, w), threads, cfg.weight_qmax,
                               sqnr=cfg.keep_fp32 > 0)
        fp32 = choose_fp32(stats, cfg.keep_fp32)
        int8 = {s.node for s in stats} - fp32
        ranges = activation_ranges(model, stats)
        tensors: dict[str, dict] = {}
        for name, seg in list(part.segments.items()):
            q = quantize_segment(seg, int8, cfg.weight_qmax, ranges, cfg.int8_adds, cfg.fixed_zero)
            part.segments[name] = q.model
            tensors |= q.ranges(ranges)
        sens = sorted(stats, key=lambda s: s.sqnr_db)
        measured = ({"sensitivity_sqnr_db": {s.node: round(s.sqnr_db, 2) for s in sens}}
                    if not any(math.isnan(s.sqnr_db) for s in sens) else {})
        (out / QUANT_FILE).write_text(json.dumps({
            "config": cfg.fields(), "tensors": tensors, **measured}, indent=1) + "\n")
        log.info("int8 plan for %s: %d convs int8 (weights |q| <= %d), %d fp32", cfg.isa, len(int8),
                 cfg.weight_qmax, len(fp32))
        return {"extra_files": [QUANT_FILE],
                "quant": {"isa": cfg.isa, "weight_qmax": cfg.weight_qmax, "int8_convs": len(int8),
                          "fp32_convs": [{"node": s.node, "weight": s.weight, "sqnr_db": round(s.sqnr_db, 2)}
                                         for s in sens if s.node in fp32]}}

    return transform
