"""Small ONNX graphs built by hand (onnx.helper) for partitioner/executor tests: no export needed."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class GraphBuilder:
    """Append nodes; tensors are named t0, t1, ...; every weight is a seeded random initializer."""

    def __init__(self, channels: int, height: int, width: int, seed: int = 0, batch="N"):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.shapes: dict[str, tuple[int, int, int]] = {"x": (channels, height, width)}
        self.batch = batch
        self._n = 0

    def _name(self, prefix="t") -> str:
        self._n += 1
        return f"{prefix}{self._n}"

    def _init(self, arr) -> str:
        name = self._name("w")
        self.inits.append(numpy_helper.from_array(np.asarray(arr, np.float32), name))
        return name

    def node(self, op, inputs, shape, **attrs) -> str:
        out = self._name()
        self.nodes.append(helper.make_node(op, inputs, [out], name=f"{op}_{out}", **attrs))
        self.shapes[out] = shape
        return out

    def conv(self, x, co, k=3) -> str:
        c, h, w = self.shapes[x]
        bound = 1.0 / np.sqrt(c * k * k)
        wt = self._init(self.rng.uniform(-bound, bound, (co, c, k, k)))
        b = self._init(self.rng.uniform(-0.1, 0.1, co))
        return self.node("Conv", [x, wt, b], (co, h, w), pads=[k // 2] * 4, kernel_shape=[k, k])

    def act(self, x, op="LeakyRelu") -> str:
        attrs = {"alpha": 0.1} if op == "LeakyRelu" else {}
        return self.node(op, [x], self.shapes[x], **attrs)

    def add(self, a, b) -> str:
        return self.node("Add", [a, b], self.shapes[a])

    def concat(self, a, b) -> str:
        (ca, h, w), (cb, _, _) = self.shapes[a], self.shapes[b]
        return self.node("Concat", [a, b], (ca + cb, h, w), axis=1)

    def depth_to_space(self, x, r=2) -> str:
        c, h, w = self.shapes[x]
        return self.node("DepthToSpace", [x], (c // (r * r), h * r, w * r), blocksize=r, mode="CRD")

    def dcn(self, x, feat, co, groups=1, offset_scale=2.0) -> str:
        """EDVR's DCNv2Pack: offsets and mask from ``feat`` by one conv, split into (o1, o2, m)."""
        c, h, w = self.shapes[x]
        om = self.conv(feat, 3 * groups * 9)
        scale = self._init(np.full((1, 1, 1, 1), offset_scale))
        om = self.node("Mul", [om, scale], self.shapes[om])
        off = self.node("Slice", [om, self._int([0]), self._int([2 * groups * 9]), self._int([1])],
                        (2 * groups * 9, h, w))
        m = self.node("Slice", [om, self._int([2 * groups * 9]), self._int([3 * groups * 9]), self._int([1])],
                      (groups * 9, h, w))
        m = self.node("Sigmoid", [m], (groups * 9, h, w))
        bound = 1.0 / np.sqrt(c * 9)
        wt = self._init(self.rng.uniform(-bound, bound, (co, c, 3, 3)))
        b = self._init(self.rng.uniform(-0.1, 0.1, co))
        return self.node("DeformConv", [x, wt, off, b, m], (co, h, w), kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                         offset_group=groups)

    def _int(self, values) -> str:
        name = self._name("i")
        self.inits.append(numpy_helper.from_array(np.asarray(values, np.int64), name))
        return name

    def model(self, outputs: list[str], with_shapes: bool = True) -> onnx.ModelProto:
        def vi(name):
            return helper.make_tensor_value_info(name, TensorProto.FLOAT, [self.batch, *self.shapes[name]])

        graph = helper.make_graph(self.nodes, "toy", [vi("x")], [vi(o) for o in outputs], self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=10)
        m = onnx.shape_inference.infer_shapes(m) if with_shapes else m
        onnx.checker.check_model(m)
        return m


def edvr_like(channels=8, height=8, width=6, seed=0) -> onnx.ModelProto:
    """A miniature of EDVR's step structure: features -> DCN (offsets from a conv) -> conv -> DCN ->
    conv -> PixelShuffle -> LeakyReLU -> conv, plus a skip from the input to the end."""
    g = GraphBuilder(3, height, width, seed)
    f = g.act(g.conv("x", channels))
    a = g.act(g.dcn(f, g.act(g.conv(f, channels)), channels, groups=2))  # DCN -> LeakyRelu: fused
    a = g.conv(g.concat(a, f), channels)
    a = g.dcn(a, a, channels, groups=1)
    up = g.act(g.depth_to_space(g.conv(a, 4 * channels)))
    out = g.conv(up, 3)
    skip = g.depth_to_space(g.conv("x", 12))
    return g.model([g.add(out, skip)])
