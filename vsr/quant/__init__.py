"""int8 inference and quantization-aware training for EDVR.

* :mod:`~vsr.quant.rewrite` -- an fp32 ONNX segment -> QLinearConv int8 with activation scales as inputs;
* :mod:`~vsr.quant.calibrate` -- activation ranges and per-conv sensitivity (SQNR) measured with ONNX Runtime;
* :mod:`~vsr.quant.plan` -- the int8 subgraph plan (:func:`int8_plan_transform` for the plan cache);
* :mod:`~vsr.quant.scales`, :mod:`~vsr.quant.segments` -- scales fed at run time (``runtime``) or frozen
  (``static``), and the segment backend that feeds them;
* :mod:`~vsr.quant.config` -- :class:`QuantConfig` (in the plan cache key) and calibration frames.
"""

from vsr.quant.config import QuantConfig
from vsr.quant.plan import int8_plan_transform
from vsr.quant.scales import ScaleTable
from vsr.quant.segments import Int8SegmentBackend

__all__ = ["Int8SegmentBackend", "QuantConfig", "ScaleTable", "int8_plan_transform"]
