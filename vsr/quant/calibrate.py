"""Calibration: activation ranges and per-layer sensitivity of every ``Conv``, measured with ONNX Runtime.

A *probe* is the whole fp32 graph plus, per conv, ``ReduceMin``/``ReduceMax`` of its input and output and a
shadow conv in the deployed int8 arithmetic (input and output fake-quantized with the calibration scales fed as
inputs, weights per-channel int8) whose squared error against the fp32 output is summed: the layer's
signal-to-quantization-noise ratio, ``sqnr_db``.  Two runs per calibration window: ranges first, then errors.
Where no conv is to be chosen by its sensitivity (``sqnr=False``: an int8 plan that keeps no conv in fp32, the
default), the probe is the reductions alone and one run per window: the shadow convs doubled every run's convs,
and the second run doubled that (an int8 plan's first build at 480x448: 82 s of calibration, nearly all of it).

:func:`calibrate_plan` probes each segment of an fp32 subgraph plan (bridges on vsr's kernels), so that memory
stays that of the plan; :func:`calibrate` probes one whole ONNX model (small graphs, tests).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from vsr.quant.segment_graph import WEIGHT_QMAX, quantize_weights
from vsr.quant.scales import u8_params


@dataclass(frozen=True)
class ConvStats:
    """One conv: input/output tensor names and their ranges, and its int8 SQNR in dB (higher is safer)."""

    node: str
    weight: str
    x: str
    y: str
    x_range: tuple[float, float]
    y_range: tuple[float, float]
    sqnr_db: float  # NaN where not measured (``sqnr=False``)




def _convs(model: onnx.ModelProto) -> list:
    inits = {t.name for t in model.graph.initializer}
    return [n for n in model.graph.node if n.op_type == "Conv" and len(n.input) > 1 and n.input[1] in inits]


def _fake_quant(t: str, p: str, nodes: list) -> str:
    nodes += [helper.make_node("QuantizeLinear", [t, f"{p}/s", f"{p}/z"], [f"{p}/q"]),
              helper.make_node("DequantizeLinear", [f"{p}/q", f"{p}/s", f"{p}/z"], [f"{p}/fq"])]
    return f"{p}/fq"


def _shadow(n, w: np.ndarray, probe: "_Probe", nodes: list, new_inits: list) -> None:
    """Range reductions and the int8 shadow of conv ``n`` (tagged by its name), appended to ``nodes``."""
    x, y, p = n.input[0], n.output[0], n.name
    for t, tag in ((x, f"{p}/x"), (y, f"{p}/y")):
        for op in ("ReduceMin", "ReduceMax"):
            nodes.append(helper.make_node(op, [t], [f"{tag}/{op}"], keepdims=0))
            probe.output(f"{tag}/{op}")
        if probe.sqnr:
            probe.scale_input(tag)
    if not probe.sqnr:
        return
    wq, ws = quantize_weights(w, probe.qmax)
    new_inits.append(numpy_helper.from_array(wq.astype(np.float32) * ws.reshape(-1, 1, 1, 1), f"{p}/wfq"))
    xfq = _fake_quant(x, f"{p}/x", nodes)
    nodes.append(helper.make_node("Conv", [xfq, f"{p}/wfq"] + list(n.input[2:]), [f"{p}/ys"],
                                  **{a.name: helper.get_attribute_value(a) for a in n.attribute}))
    yfq = _fake_quant(f"{p}/ys", f"{p}/y", nodes)
    nodes += [helper.make_node("Sub", [yfq, y], [f"{p}/d"]),
              helper.make_node("ReduceSumSquare", [f"{p}/d"], [f"{p}/err"], keepdims=0),
              helper.make_node("ReduceSumSquare", [y], [f"{p}/sig"], keepdims=0)]
    probe.output(f"{p}/err")
    probe.output(f"{p}/sig")


class _Probe:
    """The scalars of all probes of one calibration: scale feeds (updated in place between the two passes)
    and results, bound by pointer to every probe session, and the statistics gathered from them."""

    def __init__(self, qmax: int = WEIGHT_QMAX, sqnr: bool = True):
        self.qmax = qmax  # the weights' codes, as the plan will have them
        self.sqnr = sqnr  # the shadow convs and the errors' pass (else the ranges alone)
        self.feeds: dict[str, np.ndarray] = {}
        self.results: dict[str, np.ndarray] = {}
        self.convs: list = []
        self.lo: dict[str, float] = {}
        self.hi: dict[str, float] = {}
        self.err: dict[str, float] = {}
        self.sig: dict[str, float] = {}

    def scale_input(self, tag: str) -> None:
        self.feeds[f"{tag}/s"] = np.ones((), np.float32)
        self.feeds[f"{tag}/z"] = np.zeros((), np.uint8)

    def output(self, name: str) -> None:
        self.results[name] = np.zeros((), np.float32)

    def model(self, model: onnx.ModelProto) -> onnx.ModelProto:
        """``model`` plus the probe of each of its convs, right after the conv (so that nothing lives longer)."""
        g = model.graph
        inits = {t.name: t for t in g.initializer}
        convs = _convs(model)
        self.convs += convs
        ids = {id(n) for n in convs}
        nodes, new_inits = [], []
        for n in g.node:
            nodes.append(n)
            if id(n) in ids:
                _shadow(n, numpy_helper.to_array(inits[n.input[1]]).astype(np.float32), self, nodes, new_inits)
        ins = [helper.make_tensor_value_info(k, TensorProto.FLOAT if v.dtype == np.float32 else TensorProto.UINT8,
                                             []) for k, v in self.feeds.items() if k.split("/")[0] in
               {n.name for n in convs}]
        outs = [helper.make_tensor_value_info(k, TensorProto.FLOAT, []) for k in self.results
                if k.split("/")[0] in {n.name for n in convs}]
        graph = helper.make_graph(nodes, "probe", list(g.input) + ins, list(g.output) + outs,
                                  list(g.initializer) + new_inits, value_info=list(g.value_info))
        m = helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=model.ir_version)
        m.functions.extend(model.functions)
        return m

    def gather(self, ranges: bool) -> None:
        """After one window: fold its results into the ranges (first pass) or the errors (second pass)."""
        for n in self.convs:
            p = n.name
            if ranges:
                for tag in (f"{p}/x", f"{p}/y"):
                    self.lo[tag] = min(self.lo.get(tag, math.inf), float(self.results[f"{tag}/ReduceMin"]))
                    self.hi[tag] = max(self.hi.get(tag, -math.inf), float(self.results[f"{tag}/ReduceMax"]))
            else:
                self.err[p] = self.err.get(p, 0.0) + float(self.results[f"{p}/err"])
                self.sig[p] = self.sig.get(p, 0.0) + float(self.results[f"{p}/sig"])

    def set_scales(self) -> None:
        if not self.sqnr:  # no shadow convs to feed
            return
        for tag in self.lo:
            s, z = u8_params(self.lo[tag], self.hi[tag])
            self.feeds[f"{tag}/s"][...] = s
            self.feeds[f"{tag}/z"][...] = z

    def stats(self) -> list[ConvStats]:
        return [ConvStats(node=n.name, weight=n.input[1], x=n.input[0], y=n.output[0],
                          x_range=(self.lo[f"{n.name}/x"], self.hi[f"{n.name}/x"]),
                          y_range=(self.lo[f"{n.name}/y"], self.hi[f"{n.name}/y"]),
                          sqnr_db=10.0 * math.log10(max(self.sig[n.name], 1e-30) / max(self.err[n.name], 1e-30))
                          if self.sqnr else math.nan)
                for n in self.convs]

    def bind(self, session, inputs: dict, outputs: dict):
        io = session.io_binding()
        names = {i.name for i in session.get_inputs()} | {o.name for o in session.get_outputs()}
        for name, arr in list(inputs.items()) + [(k, v) for k, v in self.feeds.items() if k in names]:
            io.bind_input(name, "cpu", 0, arr.dtype.type, list(arr.shape), arr.ctypes.data)
        for name, arr in list(outputs.items()) + [(k, v) for k, v in self.results.items() if k in names]:
            io.bind_output(name, "cpu", 0, arr.dtype.type, list(arr.shape), arr.ctypes.data)
        return lambda: session.run_with_iobinding(io)


def _session(model: onnx.ModelProto, threads: int | None):
    import onnxruntime as ort

    from vsr.plan.segments import _shared_cpu_arena, session_options

    # the shared arena: each probe session would otherwise keep its own peak (GBs for EDVR-M at 180x320)
    so = session_options(threads, mem_pattern=False, shared_arena=_shared_cpu_arena())
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _two_passes(probe: _Probe, run_window, windows: np.ndarray) -> list[ConvStats]:
    for ranges in (True, False) if probe.sqnr else (True,):
        for x in windows:
            run_window(x)
            probe.gather(ranges)
        if ranges:
            probe.set_scales()
    return probe.stats()


def calibrate(model: onnx.ModelProto, windows: np.ndarray, threads: int | None = None) -> list[ConvStats]:
    """Ranges and SQNR of every conv of ``model`` over ``windows`` ``(K, *input shape)`` float32."""
    probe = _Probe()
    sess = _session(probe.model(model), threads)
    x_buf = np.zeros(windows.shape[1:], np.float32)
    out = {o.name: np.zeros([d if isinstance(d, int) else x_buf.shape[0] for d in o.shape], np.float32)
           for o in sess.get_outputs() if o.name in {v.name for v in model.graph.output}}
    run = probe.bind(sess, {model.graph.input[0].name: x_buf}, out)
    return _two_passes(probe, lambda x: (np.copyto(x_buf, x), run()), windows)


@dataclass(frozen=True)
class _ProbeSegments:
    """A segment backend (``vsr.plan.segments``) whose segments carry the probe."""

    probe: _Probe
    threads: int | None = None
    name: str = "onnxruntime"
    precision: str = "fp32"
    device: str = "cpu"
    version: str = ""

    def load(self, path):
        return _ProbeRunner(_session(self.probe.model(onnx.load(str(path))), self.threads), self.probe)


class _ProbeRunner:
    def __init__(self, session, probe: _Probe):
        self.session, self.probe = session, probe

    def bind(self, inputs, outputs):
        return self.probe.bind(self.session, inputs, outputs)


def calibrate_plan(plan, windows: np.ndarray, threads: int | None = None,
                   qmax: int = WEIGHT_QMAX, sqnr: bool = True) -> list[ConvStats]:
    """:func:`calibrate` over the segments of the fp32 ``plan`` (a :class:`vsr.plan.plan.SubgraphPlan` whose
    segment files exist), run with vsr's bridge kernels (a per-frame front on the windows' frames first);
    ``sqnr=False``: the ranges alone (see the module docstring)."""
    from vsr.plan.executor import plan_executor

    probe = _Probe(qmax, sqnr)
    runner = plan_executor(plan, _ProbeSegments(probe, threads))
    return _two_passes(probe, lambda x: runner.run({plan.inputs[0]: x}), windows)
