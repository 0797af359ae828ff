"""The memory layout of the CUDA runtime's torch segments, decided here and nowhere else.

``channels_last`` (the default): every 4-D activation is stored ``(N, H, W, C)`` -- torch's ``channels_last``
memory format: tensors keep their logical ``(N, C, H, W)`` shape and their strides say NHWC, so cuDNN runs its
NHWC kernels (tensor cores with no transposes around them) and vsr's bridge kernels read and write the
``(N, H, W, C)`` views (:meth:`Layout.nhwc`) in place.  The model's weights are converted once, the frames on
entry, and EDVR writes what it assembles (the repeated centre features of PCD, the frames fusion sets side by
side, with TSA or without) channels-last (its :class:`~vsr.model.edvr.Assembly`); ``conv_last`` (64 -> 3)
runs padded to 8 outputs (:class:`PaddedOutputConv`), the 3 sliced after.  ``contiguous``:
``(N, C, H, W)``, the layout of before (comparisons; the split plan's arena and its TensorRT engines are NCHW,
their own layout).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import nn

from vsr.backends.cuda.options import CUDA_MEMORY_FORMATS as MEMORY_FORMATS
from vsr.model.edvr import EDVR


@dataclass(frozen=True)
class Layout:
    """How the segments' 4-D tensors are stored: ``memory_format`` one of :data:`MEMORY_FORMATS`."""

    memory_format: str = "channels_last"

    def __post_init__(self):
        if self.memory_format not in MEMORY_FORMATS:
            raise ValueError(f"memory format {self.memory_format!r}: choose from {', '.join(MEMORY_FORMATS)}")

    @property
    def channels_last(self) -> bool:
        return self.memory_format == "channels_last"

    @property
    def torch_format(self) -> torch.memory_format:
        return torch.channels_last if self.channels_last else torch.contiguous_format

    def model(self, model: nn.Module) -> nn.Module:
        """``model`` (an EDVR, or a module holding one) with its 4-D weights in this layout and EDVR's copies
        written in it; in place."""
        model.to(memory_format=self.torch_format)
        if self.channels_last:
            for module in model.modules():
                if isinstance(module, EDVR):
                    module.set_assembly(replace(module.assembly, channels_last=True))
                    if not isinstance(module.conv_last, PaddedOutputConv):
                        module.conv_last = PaddedOutputConv(module.conv_last).to(memory_format=self.torch_format)
        return model

    def frames(self, x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """Frames ``(..., 3, H, W)`` (4-D or 5-D) as ``dtype`` in this layout: channels-last stores each frame
        ``(H, W, 3)``, so that ``(N, T, 3, H, W)`` reshaped to ``(N*T, 3, H, W)`` is channels-last too."""
        if not self.channels_last:
            return x.to(dtype)
        shape = x.shape
        out = torch.empty((*shape[:-3], shape[-2], shape[-1], shape[-3]), dtype=dtype, device=x.device)
        out = out.movedim(-1, -3)
        out.copy_(x)
        return out

    def activation(self, t: torch.Tensor) -> torch.Tensor:
        """``t (N, C, H, W)`` stored in this layout (itself where it is)."""
        return t.contiguous(memory_format=self.torch_format)

    @staticmethod
    def nhwc(t: torch.Tensor) -> torch.Tensor:
        """The ``(N, H, W, C)`` view of a channels-last ``t (N, C, H, W)`` (no copy; copied where ``t`` is not)."""
        return t.contiguous(memory_format=torch.channels_last).permute(0, 2, 3, 1)

    @staticmethod
    def from_nhwc(t: torch.Tensor) -> torch.Tensor:
        """The ``(N, C, H, W)`` channels-last view of ``t (N, H, W, C)``."""
        return t.permute(0, 3, 1, 2)


class PaddedOutputConv(nn.Module):
    """A convolution of few outputs run with its weights zero-padded to a multiple of ``multiple`` outputs, the
    padding sliced off after: ``(N, Ci, H, W) -> (N, Co, H, W)`` (a view).  EDVR's ``conv_last`` (64 -> 3 at the
    output resolution): cuDNN's NHWC tensor-core kernels take channel counts in multiples of 8."""

    def __init__(self, conv: nn.Conv2d, multiple: int = 8):
        super().__init__()
        self.out_channels = conv.out_channels
        padded = -(-conv.out_channels // multiple) * multiple
        self.conv = nn.Conv2d(conv.in_channels, padded, conv.kernel_size, conv.stride, conv.padding, conv.dilation,
                              conv.groups, conv.bias is not None, conv.padding_mode, conv.weight.device,
                              conv.weight.dtype)
        with torch.no_grad():
            self.conv.weight.zero_()
            self.conv.weight[: conv.out_channels].copy_(conv.weight)
            if conv.bias is not None:
                self.conv.bias.zero_()
                self.conv.bias[: conv.out_channels].copy_(conv.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)[:, : self.out_channels]
