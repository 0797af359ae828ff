"""The DCN bridge with its matrix product in int8, for int8 plans on CPUs with VNNI.

Same algorithm and workspace as :class:`~vsr.kernels.deform_conv.DeformConvKernel`, with two changes: the gather
writes the u8 codes of the columns instead of float32, and each tile's product is ONNX Runtime's
``MatMulInteger`` (u8 columns x s8 weights, int32 sums: one ``vpdpbusd`` per 4 products with VNNI), which the
transpose back to NCHW scales by ``column scale x weight scale[co]`` before the bias and activation.

The columns' codes never saturate: every column value is a bilinear blend of input values whose four weights are
non-negative and sum to at most the mask's value, so for a mask in ``[0, m]`` it lies in ``[m * min(x, 0),
m * max(x, 0)]`` (``+-max|mask| * max|x|`` for a mask of any sign): one scale per call covers every value the
gather can write.  Weights are symmetric per output channel with ``|q| <= qmax`` (:func:`vsr.quant.isa.weight_qmax`:
8 bits with VNNI).
"""

from __future__ import annotations

import numpy as np

from vsr.kernels.deform_conv import DeformConvGeometry, DeformConvKernel


def u8_range(x_lo: float, x_hi: float, m_lo: float, m_hi: float) -> tuple[float, float]:
    """The range of every column value the gather can write from inputs in ``[x_lo, x_hi]`` and masks in
    ``[m_lo, m_hi]`` (see the module docstring)."""
    if m_lo >= 0:
        return m_hi * min(x_lo, 0.0), m_hi * max(x_hi, 0.0)
    bound = max(abs(m_lo), abs(m_hi)) * max(abs(x_lo), abs(x_hi))
    return -bound, bound


class Int8DeformConvKernel(DeformConvKernel):
    """:class:`DeformConvKernel` with u8 columns and an int8 product (conv group 1; ``qmax``: the weights'
    largest code)."""

    columns, products = np.uint8, np.int32

    def __init__(self, geometry: DeformConvGeometry, weight: np.ndarray, bias: np.ndarray | None,
                 qmax: int = 127, **kw):
        super().__init__(geometry, weight, bias, **kw)
        if geometry.group != 1:
            raise ValueError("int8 DeformConv: conv groups are not supported")
        w = self.weight[0]  # (K, Co): the columns' order
        self.w_scale = (np.maximum(np.abs(w).max(axis=0), 1e-12) / np.float32(qmax)).astype(np.float32)
        self.w_q = np.clip(np.rint(w / self.w_scale), -qmax, qmax).astype(np.int8)
        self.session = _matmul_integer(self.w_q)
        self.zero = np.zeros((), np.uint8)
        self._bindings: dict[tuple[int, int], object] = {}

    def codes(self, xh: np.ndarray, mask: np.ndarray) -> tuple[np.float32, np.float32, np.ndarray]:
        lo, hi = u8_range(float(xh.min()), float(xh.max()), float(mask.min()), float(mask.max()))
        s = max(hi - lo, 1e-12) / 255.0
        self.zero[...] = z = int(np.clip(round(-lo / s), 0, 255))
        return np.float32(1.0 / s), np.float32(z), (self.w_scale * np.float32(s)).astype(np.float32)

    def product(self, worker: int, cols: np.ndarray, group: int, dst: np.ndarray) -> None:
        """``dst (t, Co) int32 = (cols - zero) @ w_q`` through a binding per worker and tile height, made once."""
        t = cols.shape[0]
        io = self._bindings.get((worker, t))
        if io is None or io.ptrs != (cols.ctypes.data, dst.ctypes.data):
            io = self._bindings[(worker, t)] = _bind(self.session, cols, self.zero, dst)
        self.session.run_with_iobinding(io.binding)


class _Binding:
    def __init__(self, binding, ptrs: tuple[int, int]):
        self.binding, self.ptrs = binding, ptrs


def _bind(session, cols: np.ndarray, zero: np.ndarray, dst: np.ndarray) -> _Binding:
    io = session.io_binding()
    io.bind_input("A", "cpu", 0, np.uint8, list(cols.shape), cols.ctypes.data)
    io.bind_input("A_zero", "cpu", 0, np.uint8, [], zero.ctypes.data)
    io.bind_output("Y", "cpu", 0, np.int32, list(dst.shape), dst.ctypes.data)
    return _Binding(io, (cols.ctypes.data, dst.ctypes.data))


def _matmul_integer(w_q: np.ndarray):
    """A one-node ONNX Runtime session: ``Y (P, Co) int32 = MatMulInteger(A (P, K) u8, w_q, A_zero)``, one
    thread (the kernel's workers share out the tiles)."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    k, co = w_q.shape
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["A", "B", "A_zero"], ["Y"])], "dcn_gemm_int8",
        [helper.make_tensor_value_info("A", TensorProto.UINT8, ["P", k]),
         helper.make_tensor_value_info("A_zero", TensorProto.UINT8, [])],
        [helper.make_tensor_value_info("Y", TensorProto.INT32, ["P", co])], [numpy_helper.from_array(w_q, "B")])
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
