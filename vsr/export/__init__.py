"""ONNX export of EDVR.  Entry point: :func:`export_onnx`."""

from vsr.export.onnx import INPUT_NAME, OUTPUT_NAME, export_onnx, state_checksum

__all__ = ["export_onnx", "state_checksum", "INPUT_NAME", "OUTPUT_NAME"]
