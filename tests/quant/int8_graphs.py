"""A toy conv graph and an int8 segment of it, runnable with or without the plan around it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from tests.plan.toy_graphs import GraphBuilder
from vsr.quant.calibrate import calibrate
from vsr.quant.int8_plan import activation_ranges
from vsr.quant.rewrite import quantize_segment
from vsr.quant.int8_segments import QUANT_FILE, Int8SegmentBackend


def conv_chain(channels=8, height=12, width=10, seed=0) -> onnx.ModelProto:
    """EDVR's conv patterns: conv+LeakyReLU, a residual block (conv+ReLU, conv, add), conv to 3 channels."""
    g = GraphBuilder(3, height, width, seed)
    f = g.act(g.conv("x", channels))
    r = g.conv(g.act(g.conv(f, channels), "Relu"), channels)
    f = g.add(f, r)
    f = g.act(g.conv(f, channels))
    return g.model([g.conv(f, 3)])


def inputs(n=2, height=12, width=10, seed=1) -> np.ndarray:
    return np.random.default_rng(seed).random((n, 3, height, width), dtype=np.float32)


def write_int8_segment(model: onnx.ModelProto, calib: np.ndarray, folder: Path, **rewrite) -> Path:
    """Calibrate on ``calib`` (one window), rewrite every conv in int8 (``rewrite``: options of
    :func:`~vsr.quant.rewrite.quantize_segment`), write segment + quant.json."""
    stats = calibrate(model, calib[None], threads=1)
    ranges = activation_ranges(model, stats)
    q = quantize_segment(model, {s.node for s in stats}, ranges=ranges, **rewrite)
    path = folder / "segment00.onnx"
    onnx.save(q.model, str(path))
    tensors = q.ranges(ranges)
    (folder / QUANT_FILE).write_text(json.dumps({"tensors": tensors}))
    return path


def run_fp32(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]


def run_int8(path: Path, x: np.ndarray, scales: str, windows: int = 1) -> tuple[np.ndarray, Int8SegmentBackend]:
    """Run the int8 segment ``windows`` times on ``x`` (the last result); returns it and the backend."""
    backend = Int8SegmentBackend(threads=1, scales=scales)
    runner = backend.load(path)
    out_info = runner.session.get_outputs()[0]
    out = np.empty((x.shape[0], *out_info.shape[1:]), np.float32)
    run = runner.bind({"x": np.ascontiguousarray(x)}, {out_info.name: out})
    for _ in range(windows):
        run()
    return out.copy(), backend


def rel_rms(a: np.ndarray, ref: np.ndarray) -> float:
    return float(np.sqrt(np.mean((a - ref) ** 2)) / np.sqrt(np.mean(ref ** 2)))
