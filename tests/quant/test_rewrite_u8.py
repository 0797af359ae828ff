"""The int8 rewrite keeps tensors u8 from conv to conv, and its convs take ONNX Runtime's fast int8 kernels.

What issue 39 found: vsr's int8 segments ran 1.4x fp32 where ONNX Runtime's own int8 ran the same convs 2.5x,
because (1) every op between two int8 convs (EDVR's Concats, Slices, Expands, Splits, residual Adds) ran in fp32
behind a Dequantize and before a Quantize, and (2) zero points and the bias fed at run time kept ONNX Runtime off
its symmetric-weight conv kernels (MLAS ``ConvSym``), which need a constant input zero point and fold a constant
bias.  The graphs here have EDVR's patterns in miniature (PCD's concat of a frame's features with the reference
frame's, a conv whose output is split into offsets and mask, a residual block); each test reads the rewritten
graph and runs it against fp32 (tolerance as in test_int8_segments.py: 4.5 % relative RMS, two roundings per conv).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort

from tests.plan.toy_graphs import GraphBuilder
from tests.quant.int8_graphs import inputs, rel_rms, run_int8, write_int8_segment

TOLERANCE = 0.045


def pcd_like(channels=8, height=12, width=10) -> tuple[onnx.ModelProto, dict[str, str]]:
    """As a PCD segment of the split plan: the frames' features come in (fp32, from the segment before);
    concat(features, the first frame's features expanded to the batch) -> conv -> LeakyReLU; a residual block;
    a conv split into (o1, o2, mask).  Outputs: concat(o1, o2), sigmoid(mask), and the expanded reference
    features (a view of the fp32 input: it must stay exact, not come back from codes)."""
    g = GraphBuilder(3, height, width)
    ref = g.node("Slice", ["x", g._int([0]), g._int([1]), g._int([0])], (3, height, width))
    ref = g.node("Expand", [ref, g._int([2, 1, 1, 1])], (3, height, width))
    cat = g.concat("x", ref)
    off = g.act(g.conv(cat, channels))
    r = g.conv(g.act(g.conv(off, channels), "Relu"), channels)
    off = g.add(off, r)
    om = g.conv(off, 3 * 4)
    parts = []
    for i in range(3):
        parts.append(g.node("Slice", [om, g._int([4 * i]), g._int([4 * i + 4]), g._int([1])], (4, height, width)))
    offsets = g.concat(parts[0], parts[1])
    mask = g.node("Sigmoid", [parts[2]], (4, height, width))
    return g.model([offsets, mask, ref]), {"offsets": offsets, "mask": mask, "ref": ref}


def _graph(path) -> onnx.GraphProto:
    return onnx.load(str(path)).graph


def _fp32(model, x) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(
        None, {"x": x})


def _run_all(path, x) -> list[np.ndarray]:
    from vsr.quant import Int8SegmentBackend

    runner = Int8SegmentBackend(threads=1).load(path)
    names = [o.name for o in runner.session.get_outputs() if not o.name.endswith(("__qmax", "__qmin"))]
    outs = {n: np.empty([x.shape[0], *runner.session.get_outputs()[i].shape[1:]], np.float32)
            for i, n in enumerate(names)}
    run = runner.bind({"x": np.ascontiguousarray(x)}, outs)
    run()
    run()
    return [outs[n] for n in names]


def test_no_fp32_round_trip_between_int8_ops(tmp_path):
    model, _ = pcd_like()
    g = _graph(write_int8_segment(model, inputs(n=2), tmp_path))
    types = {i.name: i.type.tensor_type.elem_type for i in g.input}
    producer = {o: n for n in g.node for o in n.output}
    # every Quantize reads a graph input or an fp32 op's output, never a Dequantize (no fp32 round trip)
    for n in g.node:
        if n.op_type == "QuantizeLinear":
            src = producer.get(n.input[0])
            assert src is None or src.op_type != "DequantizeLinear", n.name
    ops = [n.op_type for n in g.node]
    # the residual add and the concats in u8; the ops between convs on codes
    assert "QLinearAdd" in ops and "Add" not in ops
    u8_inputs = {n.op_type for n in g.node if n.input and n.input[0].endswith("__u8")}
    assert {"Slice", "Expand", "Concat"} <= u8_inputs
    assert ops.count("QuantizeLinear") == 1  # the segment input, once
    assert types["x"] == onnx.TensorProto.FLOAT


def test_convs_take_onnx_runtime_s_fast_kernels(tmp_path):
    """MLAS ConvSym needs the input zero point constant and folds a constant bias at load time; a bias fed as a
    tensor computed per run would be dropped there, so the conv has none and a QLinearAdd adds it."""
    model, _ = pcd_like()
    g = _graph(write_int8_segment(model, inputs(n=2), tmp_path))
    inits = {t.name for t in g.initializer}
    convs = [n for n in g.node if n.op_type == "QLinearConv"]
    assert len(convs) == 4
    for n in convs:
        assert n.input[2] in inits and n.input[5] in inits, n.name  # x and w zero points constant
        assert len(n.input) == 8, n.name  # no bias input
    bias_adds = [n for n in g.node if n.op_type == "QLinearAdd" and n.name.endswith("/bias")]
    assert len(bias_adds) == 4 and all(n.input[3] in inits for n in bias_adds)
    fed = {i.name for i in g.input}
    assert not any(name.endswith("__qz") for name in fed)  # zero points are constants; scales are fed
    assert sum(name.endswith("__qs") for name in fed) >= 4


def test_u8_rewrite_matches_fp32_and_keeps_an_fp32_view_exact(tmp_path):
    model, outs = pcd_like()
    path = write_int8_segment(model, inputs(n=2, seed=1), tmp_path)
    x = inputs(n=2, seed=2)
    got, ref = _run_all(path, x), _fp32(model, x)
    for name, a, b in zip(("offsets", "mask", "ref"), got, ref):
        assert rel_rms(a, b) < TOLERANCE, name
    # the expanded reference features: the same fp32 ops on the fp32 input, bit for bit (no Dequantize)
    assert np.array_equal(got[2], ref[2])
    assert not any(n.op_type == "DequantizeLinear" and n.output[0] == outs["ref"] for n in _graph(path).node)


def test_a_narrow_tensor_read_elsewhere_keeps_its_scale_in_a_concat(tmp_path):
    """A conv output that is also a graph output, concatenated with a tensor ~20x wider: joining the concat's
    scale would give it a 20x coarser step where it is read; a QLinearConcat re-quantizes it instead."""
    g = GraphBuilder(3, 12, 10)
    narrow = g.conv("x", 8)
    wide = g.node("Mul", [g.conv("x", 8), g._init(np.full((1, 1, 1, 1), 20.0))], (8, 12, 10))
    out = g.conv(g.concat(narrow, wide), 4)
    model = g.model([out, narrow])
    path = write_int8_segment(model, inputs(n=2, seed=1), tmp_path)
    graph = _graph(path)
    assert "QLinearConcat" in [n.op_type for n in graph.node]
    dq = next(n for n in graph.node if n.op_type == "DequantizeLinear" and n.output[0] == narrow)
    assert dq.input[1] == narrow + "__qs"  # its own scale
    x = inputs(n=2, seed=2)
    got, ref = _run_all(path, x), _fp32(model, x)
    assert rel_rms(got[1], ref[1]) < TOLERANCE and rel_rms(got[0], ref[0]) < TOLERANCE


def test_saturation_still_runs_again_with_fixed_zero_points(tmp_path):
    model, _ = pcd_like()
    path = write_int8_segment(model, inputs(n=2, seed=1), tmp_path)
    x = inputs(n=2, seed=2) * np.float32(4.0)  # twice beyond where run-time scales start (2x calibration)
    y, backend = run_int8(path, x, "runtime", windows=1)
    assert backend.table.reruns >= 1
    assert rel_rms(y, _fp32(model, x)[0]) < TOLERANCE
