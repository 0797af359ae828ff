"""Single-node ONNX models: independent references (ONNX Runtime's CPU kernels, ``onnx.reference``)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator


def single_node_model(op_type: str, inputs: list[str], **attrs) -> onnx.ModelProto:
    node = helper.make_node(op_type, inputs, ["Y"], **attrs)
    graph = helper.make_graph([node], op_type, [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
                                                for n in inputs if n],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=10)


def run_ort(model: onnx.ModelProto, feeds: dict) -> np.ndarray:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)[0]


def run_reference(model: onnx.ModelProto, feeds: dict) -> np.ndarray:
    return ReferenceEvaluator(model).run(None, feeds)[0]
