"""Fake quantization for quantization-aware training, in the arithmetic of the deployed int8 segments.

:func:`prepare_qat` turns every ``nn.Conv2d`` of a model (not the DCNs: they stay fp32 here) into a
:class:`QATConv2d`, same parameters and state-dict keys, whose forward pass is
the int8 conv of the plans :class:`~vsr.quant.config.QuantConfig` makes (:mod:`vsr.quant.rewrite`) simulated
in fp32:

* weights: symmetric per output channel, ``[-qmax, qmax]`` with the plan's ``qmax`` (127 where the CPU has VNNI
  or AMX, 63 without: :mod:`vsr.quant.isa`, ``VSR_INT8_ISA`` to train for another), round half to even;
* input and output activations: u8, asymmetric, one scale per tensor from the run-time rule of
  :mod:`vsr.quant.scales` (the observed range widened by its ``margin``,
  ``configs/quant/scales.toml``), codes clamped to [0, 255] (saturation);
* bias, as the default plan (``fixed_zero``) adds it: the conv's sum without it rounded to u8 codes of its own
  range, the bias as one u8 constant per tensor (256 codes over its channels' range), their sum rounded again to
  the output's codes -- two roundings; with ``fixed_zero=False``, the bias rounded to the int32 grid
  ``x_scale * w_scale`` and added to the exact integer sum (int32 accumulation cannot overflow for these layer
  sizes, so the fp32 sum of integer-valued products is the same number), one rounding;
* gradients: straight-through (the rounding passes gradients unchanged; the ranges are not learned).

What it does not simulate: the DCN bridge's product in int8, which plans on VNNI or AMX run where offset groups
have 8 channels or more (EDVR-M; EDVR-S's 4 stay fp32: :func:`vsr.kernels.builtin.int8_pays`); the plan's zero
points are constants from its calibration (the scale alone follows the frames), QAT's follow each batch's range;
ops between convs that the plan runs on u8 codes (a Concat's joint scale, a residual ``QLinearAdd``) are fp32
here.
"""

from __future__ import annotations

from functools import lru_cache

import torch
import torch.nn.functional as F
from torch import nn

from vsr.quant.config import QuantConfig
from vsr.quant.scales import ScaleRule
from vsr.quant.segment_graph import WEIGHT_QMAX


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


def fake_bias(b: torch.Tensor) -> torch.Tensor:
    """The bias as the default plan holds it: one u8 constant per tensor over its channels' range (and 0)."""
    return fake_u8(b, margin=1.0)  # u8_params' rule, on the bias's own range: no margin, nothing follows frames


class QATConv2d(nn.Conv2d):
    """``nn.Conv2d`` whose forward pass is the deployed int8 conv's (see the module docstring); ``qmax`` and
    ``bias_after`` (the plan's ``fixed_zero``) are set by :func:`prepare_qat`."""

    qmax: int = WEIGHT_QMAX
    bias_after: bool = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # in fp32 whatever the training's autocast: bf16 holds integers only to 256 and codes to 8 bits of
        # precision, so a code computed there is off by one where the plan's is not
        with torch.autocast(x.device.type, enabled=False):
            return self._int8(x.float())

    def _int8(self, x: torch.Tensor) -> torch.Tensor:
        xq = fake_u8(x)
        w, ws = fake_weight(self.weight, self.qmax)
        b = self.bias
        if b is not None and self.bias_after:
            # (a bias of zeros, which the plan leaves out, is rounded twice here too: deciding it would read the
            # bias back from the device every step, and training makes it non-zero)
            y0 = F.conv2d(xq, w, None, self.stride, self.padding, self.dilation, self.groups)
            return fake_u8(fake_u8(y0) + fake_bias(b).view(1, -1, *([1] * (y0.dim() - 2))))
        if b is not None:
            with torch.no_grad():
                lo = torch.clamp(x.min(), max=0.0) * run_time_margin()
                hi = torch.clamp(x.max(), min=0.0) * run_time_margin()
                bs = torch.clamp(hi - lo, min=1e-8) / 255.0 * ws
            b = _ste(b, torch.round(b / bs) * bs)
        return fake_u8(F.conv2d(xq, w, b, self.stride, self.padding, self.dilation, self.groups))


def prepare_qat(model: nn.Module, config: QuantConfig | None = None) -> list[str]:
    """Switch every plain ``nn.Conv2d`` of ``model`` to :class:`QATConv2d` in place, in the arithmetic of the
    int8 plans ``config`` makes (default: this CPU's, :class:`QuantConfig`); returns their names."""
    config = config or QuantConfig()
    names = []
    for name, m in model.named_modules():
        if type(m) is nn.Conv2d:
            m.__class__ = QATConv2d
            m.qmax, m.bias_after = config.weight_qmax, config.fixed_zero
            names.append(name)
    return names


def qat_parameters(model: nn.Module) -> dict:
    """The quantization parameters to store beside a QAT checkpoint: the arithmetic and each conv's weight
    scales (activation scales are computed at run time, so none are frozen here)."""
    layers, arith = {}, {"qmax": WEIGHT_QMAX, "bias": "none"}
    for name, m in model.named_modules():
        if isinstance(m, QATConv2d):
            _, s = fake_weight(m.weight.detach(), m.qmax)
            layers[name] = [float(v) for v in s]
            arith = {"qmax": m.qmax, "bias": "u8 after the conv" if m.bias_after else "int32 in the conv"}
    return {"format": "vsr-qat/1", "weights": f"int8 symmetric per output channel, |q| <= {arith['qmax']}",
            "activations": f"u8 asymmetric per tensor, run-time range x {run_time_margin()}",
            "bias": arith["bias"], "weight_scales": layers}
