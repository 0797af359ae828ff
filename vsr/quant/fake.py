"""Fake quantization for quantization-aware training, in the arithmetic of the deployed int8 segments.

:func:`prepare_qat` turns every ``nn.Conv2d`` of a model (the DCN's own weights stay fp32, as deployed: the
bridge kernel is fp32) into a :class:`QATConv2d`, same parameters and state-dict keys, whose forward pass is
the int8 segment's arithmetic (:mod:`vsr.quant.rewrite`) simulated in fp32:

* weights: symmetric per output channel, ``[-WEIGHT_QMAX, WEIGHT_QMAX]``, round half to even;
* input and output activations: u8, asymmetric, one scale per tensor from the run-time rule of
  :mod:`vsr.quant.scales` (the observed range widened by its ``margin``,
  ``configs/quant/scales.toml``), codes clamped to [0, 255] (saturation);
* bias: rounded to the int32 grid ``x_scale * w_scale`` and added to the exact integer sum (int32 accumulation
  cannot overflow for these layer sizes, so the fp32 sum of integer-valued products is the same number);
* gradients: straight-through (the rounding passes gradients unchanged; the ranges are not learned).
"""

from __future__ import annotations

from functools import lru_cache

import torch
import torch.nn.functional as F
from torch import nn

from vsr.quant.segment_graph import WEIGHT_QMAX
from vsr.quant.scales import ScaleRule


@lru_cache(maxsize=1)
def run_time_margin() -> float:
    """The margin the run-time scales put on a measured range (the deployed rule's)."""
    return ScaleRule.load().margin


def _ste(x: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    return x + (q - x).detach()


def fake_u8(x: torch.Tensor, margin: float | None = None) -> torch.Tensor:
    """Per-tensor asymmetric u8 fake quantization with the run-time range rule."""
    margin = run_time_margin() if margin is None else margin
    with torch.no_grad():
        lo = torch.clamp(x.min(), max=0.0) * margin
        hi = torch.clamp(x.max(), min=0.0) * margin
        scale = torch.clamp(hi - lo, min=1e-8) / 255.0
        zero = torch.clamp(torch.round(-lo / scale), 0, 255)
    q = (torch.clamp(torch.round(x / scale) + zero, 0, 255) - zero) * scale
    return _ste(x, q)


def fake_weight(w: torch.Tensor, qmax: int = WEIGHT_QMAX) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-output-channel symmetric fake quantization: ``(w_fq, scales (C_out,))``."""
    with torch.no_grad():
        s = torch.clamp(w.detach().abs().flatten(1).amax(dim=1), min=1e-12) / qmax
    q = torch.clamp(torch.round(w / s.view(-1, 1, 1, 1)), -qmax, qmax) * s.view(-1, 1, 1, 1)
    return _ste(w, q), s


class QATConv2d(nn.Conv2d):
    """``nn.Conv2d`` whose forward pass is the deployed int8 conv's (see the module docstring)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xq = fake_u8(x)
        w, ws = fake_weight(self.weight)
        b = self.bias
        if b is not None:
            with torch.no_grad():
                lo = torch.clamp(x.min(), max=0.0) * run_time_margin()
                hi = torch.clamp(x.max(), min=0.0) * run_time_margin()
                bs = torch.clamp(hi - lo, min=1e-8) / 255.0 * ws
            b = _ste(b, torch.round(b / bs) * bs)
        y = F.conv2d(xq, w, b, self.stride, self.padding, self.dilation, self.groups)
        return fake_u8(y)


def prepare_qat(model: nn.Module) -> list[str]:
    """Switch every plain ``nn.Conv2d`` of ``model`` to :class:`QATConv2d` in place; returns their names."""
    names = []
    for name, m in model.named_modules():
        if type(m) is nn.Conv2d:
            m.__class__ = QATConv2d
            names.append(name)
    return names


def qat_parameters(model: nn.Module) -> dict:
    """The quantization parameters to store beside a QAT checkpoint: the arithmetic and each conv's weight
    scales (activation scales are computed at run time, so none are frozen here)."""
    layers = {}
    for name, m in model.named_modules():
        if isinstance(m, QATConv2d):
            _, s = fake_weight(m.weight.detach())
            layers[name] = [float(v) for v in s]
    return {"format": "vsr-qat/1", "weights": f"int8 symmetric per output channel, |q| <= {WEIGHT_QMAX}",
            "activations": f"u8 asymmetric per tensor, run-time range x {run_time_margin()}", "weight_scales": layers}
