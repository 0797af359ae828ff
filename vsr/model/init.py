"""Weight initialisation schemes for training EDVR from scratch.  Entry point: :func:`init_weights`.

A deep plain network at PyTorch's default init shrinks the signal about 3x per layer; through EDVR's ~15
layers the residual output starts near zero, gradients carry almost nothing, and a short run sits at the
bilinear baseline for hundreds of iterations.  Both schemes here make the first iterations count.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from vsr.errors import InputError
from vsr.model.dcn import DCNv2Pack
from vsr.model.edvr import EDVR, ResidualBlockNoBN

LAST_SCALE = 0.1  # he_init: conv_last starts small, so the output starts near the bilinear upsampling


def offset_convs(model: nn.Module) -> list[nn.Conv2d]:
    """The convolutions that predict DCN offsets and masks, in module order."""
    return [m.conv_offset for m in model.modules() if isinstance(m, DCNv2Pack)]


def _he(w: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    return nn.init.kaiming_normal_(torch.empty_like(w), a=0.1, nonlinearity="leaky_relu") * scale


@torch.no_grad()
def he_init(model: EDVR) -> None:
    """He-normal (leaky ReLU 0.1) for every convolution, with the residual branches scaled by 0.1 (BasicSR's
    ``default_init_weights``), the DCN weights doubled (the sigmoid mask starts at 0.5), the offset
    convolutions zero (samples start on the regular grid) and ``conv_last`` scaled by :data:`LAST_SCALE`."""
    offsets = set(offset_convs(model))
    for mod in model.modules():
        if isinstance(mod, nn.Conv2d):
            if mod in offsets:
                nn.init.zeros_(mod.weight)
            else:
                nn.init.kaiming_normal_(mod.weight, a=0.1, mode="fan_in", nonlinearity="leaky_relu")
                if mod is model.conv_last:
                    mod.weight.mul_(LAST_SCALE)
            if mod.bias is not None:
                nn.init.zeros_(mod.bias)
        elif isinstance(mod, DCNv2Pack):
            nn.init.kaiming_normal_(mod.weight, a=0.1, mode="fan_in", nonlinearity="leaky_relu")
            mod.weight.mul_(2.0)
            nn.init.zeros_(mod.bias)
    for mod in model.modules():
        if isinstance(mod, ResidualBlockNoBN):
            mod.conv1.weight.mul_(0.1)
            mod.conv2.weight.mul_(0.1)


def _add_dirac(w: torch.Tensor, groups_in: int = 1, pick: int = 0, repeat: int = 1) -> None:
    """Add 1 at the kernel centre linking input channel ``c`` of input group ``pick`` to output channels
    ``c * repeat ... c * repeat + repeat - 1``; ``w`` is ``(C_out, C_in, kh, kw)``."""
    co, ci, kh, kw = w.shape
    for c in range(min(co // repeat, ci // groups_in)):
        for r in range(repeat):
            w[c * repeat + r, pick * (ci // groups_in) + c, kh // 2, kw // 2] += 1.0


@torch.no_grad()
def identity_init(model: EDVR, noise: float = 0.1) -> None:
    """Start EDVR as a pass-through of the centre frame, plus small random weights to break symmetry.

    Every convolution on the main path copies its input channels to the same output channels (Dirac
    kernels; the DCN doubled, its sigmoid mask starts at 0.5), the fusion picks the centre frame's
    channels, and the two PixelShuffle convolutions repeat each channel on all four sub-pixels (ICNR).
    So the input's colours reach ``conv_last`` (nearest-neighbour upsampled) through near-linear paths and
    gradients reach every layer from the first step.  ``noise`` scales a He-normal perturbation.
    Exact pass-through (``noise=0``) holds for configurations without TSA (its attention is not made
    neutral; its convolutions get the same Dirac kernels).
    """
    offsets = set(offset_convs(model))
    # Residual branches stay small random: each block is then ~identity.
    no_dirac = {m for blocks in (model.feature_extraction, model.reconstruction) for m in blocks.modules()}
    no_dirac.add(model.conv_last)
    dirac_args: dict[nn.Module, dict] = {model.upconv1: {"repeat": 4}, model.upconv2: {"repeat": 4}}
    if isinstance(model.fusion, nn.Conv2d):
        dirac_args[model.fusion] = {"groups_in": model.num_frame, "pick": model.center_frame_idx}
    for mod in model.modules():
        if isinstance(mod, DCNv2Pack):
            mod.weight.copy_(_he(mod.weight, noise))
            _add_dirac(mod.weight)
            mod.weight.mul_(2.0)
            mod.bias.zero_()
        elif isinstance(mod, nn.Conv2d):
            if mod.bias is not None:
                mod.bias.zero_()
            if mod in offsets:
                mod.weight.zero_()
                continue
            mod.weight.copy_(_he(mod.weight, noise))
            if mod not in no_dirac:
                _add_dirac(mod.weight, **dirac_args.get(mod, {}))


def torch_init(model: EDVR) -> None:
    """PyTorch's own per-layer initialisation, already applied when the model was built: nothing to do."""


INIT_SCHEMES: dict[str, Callable[[EDVR], None]] = {"identity": identity_init, "he": he_init, "torch": torch_init}


def init_weights(model: EDVR, scheme: str) -> None:
    """Initialise ``model`` in place with the scheme named in :data:`INIT_SCHEMES`."""
    if scheme not in INIT_SCHEMES:
        raise InputError(f"unknown weight init {scheme!r}: must be one of {', '.join(INIT_SCHEMES)}")
    INIT_SCHEMES[scheme](model)
