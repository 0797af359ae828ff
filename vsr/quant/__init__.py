"""int8 inference and quantization-aware training for EDVR.

* :mod:`~vsr.quant.rewrite`, :mod:`~vsr.quant.segment_graph` -- an fp32 ONNX segment -> int8 (QLinearConv, u8 from
  conv to conv) with activation scales as inputs;
* :mod:`~vsr.quant.calibrate` -- activation ranges and per-conv sensitivity (SQNR) measured with ONNX Runtime;
* :mod:`~vsr.quant.int8_plan` -- the int8 subgraph plan (:func:`int8_plan_transform` for the plan cache);
* :mod:`~vsr.quant.scales`, :mod:`~vsr.quant.int8_segments` -- scales fed at run time (``runtime``) or frozen
  (``static``), and the segment backend that feeds them;
* :mod:`~vsr.quant.config` -- :class:`QuantConfig` (in the plan cache key) and calibration frames;
* :mod:`~vsr.quant.isa` -- this CPU's int8 instructions.

The names below are imported when first used: reading the CPU's int8 ISA (``--precision auto``, before a run's
first line) must not wait a second for ONNX and numba.
"""

import importlib

_EXPORTS = {"QuantConfig": "config", "int8_plan_transform": "int8_plan", "ScaleTable": "scales",
            "Int8SegmentBackend": "int8_segments"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
