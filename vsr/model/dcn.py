"""Modulated deformable convolution (DCNv2) for EDVR.

Layout conventions are those of torchvision's ``deform_conv2d`` and of ONNX ``DeformConv``:

* ``offset``: ``(N, 2*G*kh*kw, Ho, Wo)``; for offset group ``g`` and kernel tap ``k`` (row-major over
  ``kh x kw``) channel ``2*(g*kh*kw + k)`` is the y (row) displacement and the next one the x displacement.
* ``mask``:   ``(N, G*kh*kw, Ho, Wo)``, already passed through a sigmoid by the caller.
* Bilinear sampling with zero padding: a corner outside the image contributes zero.

Three implementations meet here:

* :func:`deform_conv2d_reference` -- pure PyTorch (``grid_sample`` + matrix product), differentiable, used
  for training on CPU and as the eager path;
* ``torch.ops.vsr.deform_conv2d`` -- a ``torch.library`` custom op that the ONNX exporter maps to a real
  ``DeformConv`` node (see :mod:`vsr.export`);
* torchvision's CUDA kernel, used on GPU when torchvision is importable.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def deform_conv2d_reference(
    x: torch.Tensor,
    offset: torch.Tensor,
    mask: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    padding: int = 1,
    stride: int = 1,
    dilation: int = 1,
) -> torch.Tensor:
    """Modulated deformable convolution in plain PyTorch.

    x ``(N, C, H, W)``, weight ``(Co, C, kh, kw)`` -> ``(N, Co, Ho, Wo)``.
    """
    n, c, h, w = x.shape
    co, _, kh, kw = weight.shape
    kk = kh * kw
    g = offset.shape[1] // (2 * kk)
    ho, wo = offset.shape[2], offset.shape[3]
    dtype = x.dtype
    # Regular sampling grid of each output pixel and tap, in input pixel coordinates.
    ys = torch.arange(ho, device=x.device, dtype=dtype) * stride - padding
    xs = torch.arange(wo, device=x.device, dtype=dtype) * stride - padding
    ky = (torch.arange(kh, device=x.device, dtype=dtype) * dilation).repeat_interleave(kw)
    kx = (torch.arange(kw, device=x.device, dtype=dtype) * dilation).repeat(kh)
    base_y = ky.view(kk, 1, 1) + ys.view(1, ho, 1)  # (kk, ho, 1)
    base_x = kx.view(kk, 1, 1) + xs.view(1, 1, wo)  # (kk, 1, wo)
    off = offset.view(n, g, kk, 2, ho, wo)
    py = base_y + off[:, :, :, 0]  # (n, g, kk, ho, wo)
    px = base_x + off[:, :, :, 1]
    # grid_sample(align_corners=True) maps -1..1 onto pixel centres 0..size-1; zero padding outside.
    gy = py * (2.0 / max(h - 1, 1)) - 1.0
    gx = px * (2.0 / max(w - 1, 1)) - 1.0
    grid = torch.stack((gx, gy), dim=-1).view(n * g, kk * ho, wo, 2)
    xg = x.reshape(n * g, c // g, h, w)
    sampled = F.grid_sample(xg, grid, mode="bilinear", padding_mode="zeros", align_corners=True)
    sampled = sampled.view(n, g, c // g, kk, ho * wo) * mask.view(n, g, 1, kk, ho * wo)
    cols = sampled.reshape(n, c * kk, ho * wo)
    out = torch.matmul(weight.reshape(co, c * kk), cols)
    if bias is not None:
        out = out + bias.view(1, co, 1)
    return out.view(n, co, ho, wo)


@torch.library.custom_op("vsr::deform_conv2d", mutates_args=())
def deform_conv2d_op(
    x: torch.Tensor,
    offset: torch.Tensor,
    mask: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    padding: int,
    stride: int,
    dilation: int,
    offset_group: int,
) -> torch.Tensor:
    """Opaque DCN op: exported as one ONNX ``DeformConv`` node (see :mod:`vsr.export.onnx`)."""
    return deform_conv2d_reference(x, offset, mask, weight, bias, padding, stride, dilation)


@deform_conv2d_op.register_fake
def _deform_conv2d_fake(x, offset, mask, weight, bias, padding, stride, dilation, offset_group):
    return x.new_empty((x.shape[0], weight.shape[0], offset.shape[2], offset.shape[3]))


def _deform_conv2d_setup(ctx, inputs, output) -> None:
    ctx.save_for_backward(*inputs[:5])
    ctx.geometry = inputs[5:8]  # padding, stride, dilation


def _deform_conv2d_backward(ctx, grad):
    """The op's gradients: those of :func:`deform_conv2d_reference`, which it computes (so a
    model traced through it trains as the eager one does)."""
    leaves = [t.detach().requires_grad_(t.is_floating_point()) for t in ctx.saved_tensors]
    with torch.enable_grad():
        out = deform_conv2d_reference(*leaves, *ctx.geometry)
        wanted = [t for t in leaves if t.requires_grad]
        got = iter(torch.autograd.grad(out, wanted, grad, allow_unused=True))
    return (*(next(got) if t.requires_grad else None for t in leaves), None, None, None, None)


deform_conv2d_op.register_autograd(_deform_conv2d_backward, setup_context=_deform_conv2d_setup)


def _torchvision_deform_conv2d():
    try:
        from torchvision.ops import deform_conv2d  # type: ignore
    except Exception:  # torchvision is optional (no CPU wheel here)
        return None
    return deform_conv2d


def exporting() -> bool:
    """True under ``torch.export`` (what vsr's ONNX export runs), False under ``torch.compile``.  The flag export
    sets is read, not ``torch.compiler.is_exporting()``: TorchDynamo answered that one True under every
    ``torch.compile`` too before torch 2.13 (pytorch#176347), which sent a compiled training forward on the GPU
    machine's torch 2.11 through the export op (the reference, recomputed for its gradients) instead of
    torchvision's kernel."""
    return bool(getattr(torch.compiler, "_is_exporting_flag", False)) or (
        not hasattr(torch.compiler, "_is_exporting_flag") and torch.compiler.is_exporting())


def deform_conv2d(x, offset, mask, weight, bias, padding=1, stride=1, dilation=1):
    """Dispatch: the custom op while exporting, torchvision on CUDA when present, else the reference."""
    if exporting():
        kk = weight.shape[2] * weight.shape[3]
        return deform_conv2d_op(x, offset, mask, weight, bias, padding, stride, dilation, offset.shape[1] // (2 * kk))
    if x.is_cuda:
        tv = _torchvision_deform_conv2d()
        if tv is not None:
            return tv(x, offset, weight, bias, (stride, stride), (padding, padding), (dilation, dilation), mask)
    return deform_conv2d_reference(x, offset, mask, weight, bias, padding, stride, dilation)


class DCNv2Pack(nn.Module):
    """BasicSR's ``DCNv2Pack``: offsets and mask are predicted from a separate feature.

    forward(x ``(N, C, H, W)``, feat ``(N, C, H, W)``) -> ``(N, Co, H, W)``.
    State dict: ``weight``, ``bias``, ``conv_offset.weight``, ``conv_offset.bias``.
    ``conv_offset`` yields ``3*G*k*k`` channels split into three equal chunks ``o1, o2, m``;
    ``offset = cat(o1, o2)``, ``mask = sigmoid(m)`` (the convention of the official checkpoints).
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int = 3, padding: int = 1,
                 deformable_groups: int = 8):
        super().__init__()
        self.padding = padding
        self.deformable_groups = deformable_groups
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels, kernel_size, kernel_size))
        self.bias = nn.Parameter(torch.zeros(out_channels))
        self.conv_offset = nn.Conv2d(in_channels, deformable_groups * 3 * kernel_size * kernel_size,
                                     kernel_size, 1, padding, bias=True)
        n = in_channels * kernel_size * kernel_size
        stdv = 1.0 / n**0.5
        nn.init.uniform_(self.weight, -stdv, stdv)
        # BasicSR zero-initialises the offset conv (samples start on the regular grid).
        nn.init.zeros_(self.conv_offset.weight)
        nn.init.zeros_(self.conv_offset.bias)

    def offset_mask(self, feat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """feat ``(N, C, H, W)`` -> offset ``(N, 2*G*k*k, H, W)``, mask ``(N, G*k*k, H, W)`` (the DCN's operands)."""
        o1, o2, m = torch.chunk(self.conv_offset(feat), 3, dim=1)
        return torch.cat((o1, o2), dim=1), torch.sigmoid(m)

    def forward(self, x: torch.Tensor, feat: torch.Tensor) -> torch.Tensor:
        offset, mask = self.offset_mask(feat)
        return deform_conv2d(x, offset, mask, self.weight, self.bias, self.padding)
