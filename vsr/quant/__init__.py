"""int8 inference and quantization-aware training for EDVR.

* :mod:`~vsr.quant.rewrite` -- an fp32 ONNX segment -> QLinearConv int8 with activation scales as inputs;
* :mod:`~vsr.quant.calibrate` -- activation ranges and per-conv sensitivity (SQNR) measured with ONNX Runtime;
* :mod:`~vsr.quant.int8_plan` -- the int8 subgraph plan (:func:`int8_plan_transform` for the plan cache);
* :mod:`~vsr.quant.scales`, :mod:`~vsr.quant.int8_segments` -- scales fed at run time (``runtime``) or frozen
  (``static``), and the segment backend that feeds them;
* :mod:`~vsr.quant.config` -- :class:`QuantConfig` (in the plan cache key) and calibration frames.
"""

from vsr.quant.config import QuantConfig
from vsr.quant.int8_plan import int8_plan_transform
from vsr.quant.scales import ScaleTable
from vsr.quant.int8_segments import Int8SegmentBackend

__all__ = ["Int8SegmentBackend", "QuantConfig", "ScaleTable", "int8_plan_transform"]
