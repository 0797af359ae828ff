"""TensorRT segment backend: a plan whose segments run as TensorRT engines equals the whole graph on ORT.

Skipped where ``tensorrt``/``pycuda`` are not installed (the development machine has neither).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

pytest.importorskip("tensorrt")
pytest.importorskip("pycuda")

from tests.plan.toy_graphs import edvr_like  # noqa: E402
from vsr.plan.executor import PlanExecutor  # noqa: E402
from vsr.plan.plan import PlanCache  # noqa: E402
from vsr.plan.tensorrt import TensorRTSegmentBackend  # noqa: E402

pytestmark = pytest.mark.tensorrt


def test_tensorrt_segments_equal_whole_graph(tmp_path):
    src = tmp_path / "m.onnx"
    model = edvr_like()
    onnx.save(model, str(src))
    be = TensorRTSegmentBackend(precision="fp32", max_batch=2)
    plan = PlanCache(tmp_path / "plans").get(src, backend=be.name, backend_version=be.version)
    x = np.random.default_rng(0).random((2, 3, 8, 6), dtype=np.float32)
    got = PlanExecutor(plan, be).run({"x": x})[plan.outputs[0]]
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.abs(got - want).max() <= 1e-3  # TF32 may be used by TensorRT's fp32 convolutions
