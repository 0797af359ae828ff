"""The segments of the CUDA runtime: the PyTorch EDVR itself, with the plan's bridge ops on vsr's CUDA kernels.

The split plan cuts the exported graph at its ``DeformConv`` and ``DepthToSpace`` (+ LeakyReLU) nodes
(:mod:`vsr.plan.partition`).  Each of those nodes comes from one module of the model: ``DCNv2Pack``'s
deformable convolution and ``PixelShuffleLReLU``.  So the torch segments are the model's own code between
those modules, and :func:`bridge_model` swaps the modules for bridges that run vsr's kernels on the same
tensors, in place, on torch's stream.  No ONNX -> torch conversion is needed, the segments run exactly the
operations of the reference, and the cut points are the plan's by construction.

:class:`Timeline` marks each bridge's start and end (CUDA events on a GPU, the clock on the CPU): seconds per
segment (the time between two bridges) and per bridge kernel, for runs that are not captured in a graph.
"""

from __future__ import annotations

import copy
import functools
import time
from contextlib import contextmanager

import torch
from torch import nn

from vsr.backends.cuda.dcn import deform_conv_torch
from vsr.kernels.cuda.ops import pixel_shuffle_lrelu
from vsr.kernels.deform_conv import DeformConvGeometry
from vsr.model.dcn import DCNv2Pack
from vsr.model.edvr import PixelShuffleLReLU, TSAFusion

SLOPE = 0.1  # EDVR's LeakyReLU


class Timeline:
    """Marks of one forward: ``begin()``, then ``step(name)`` around each bridge, then ``end()``;
    ``durations()`` gives seconds per ``segment_<i>`` and per bridge name (in order)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.enabled = False
        self._marks: list[tuple[str, object]] = []

    def _mark(self, label: str) -> None:
        if self.device.type == "cuda":
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self._marks.append((label, event))
        else:
            self._marks.append((label, time.perf_counter()))

    def begin(self) -> None:
        self._marks = []
        if self.enabled:
            self._mark("begin")

    def end(self) -> None:
        if self.enabled:
            self._mark("end")

    @contextmanager
    def step(self, name: str):
        if not self.enabled:
            yield
            return
        self._mark("enter")
        yield
        self._mark(name)

    def durations(self) -> dict[str, float]:
        """Seconds per segment and bridge of the last forward (synchronises the device first)."""
        if len(self._marks) < 2:
            return {}
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        out: dict[str, float] = {}
        segment = 0
        for (_, a), (label, b) in zip(self._marks, self._marks[1:]):
            seconds = a.elapsed_time(b) / 1e3 if self.device.type == "cuda" else b - a
            if label in ("enter", "end"):
                label, segment = f"segment_{segment}", segment + 1
            out[label] = out.get(label, 0.0) + seconds
        return out


class DCNBridge(nn.Module):
    """``DCNv2Pack`` whose deformable convolution runs on vsr's kernel: forward(x ``(N, C, H, W)``, feat
    ``(N, C, H, W)``) -> ``(N, Co, H, W)``.  The offsets and mask stay torch (they end the segment before)."""

    def __init__(self, pack: DCNv2Pack, launcher, timeline: Timeline, name: str, gemm: str = "torch"):
        super().__init__()
        self.pack = pack
        self.launcher = launcher
        self.timeline = timeline
        self.step_name = name
        self.gemm = gemm

    def forward(self, x: torch.Tensor, feat: torch.Tensor) -> torch.Tensor:
        offset, mask = self.pack.offset_mask(feat)
        p = self.pack.padding
        geom = DeformConvGeometry.from_attrs(x.shape, self.pack.weight.shape, pads=[p] * 4,
                                             offset_group=self.pack.deformable_groups)
        with self.timeline.step(self.step_name):
            return deform_conv_torch(self.launcher, geom, x.contiguous(), self.pack.weight, offset.contiguous(),
                                     mask.contiguous(), self.pack.bias, gemm=self.gemm)


class ShuffleBridge(nn.Module):
    """``PixelShuffleLReLU`` as vsr's one fused kernel: ``(N, C*r*r, H, W) -> (N, C, r*H, r*W)``."""

    def __init__(self, upscale: int, launcher, timeline: Timeline, name: str):
        super().__init__()
        self.upscale = upscale
        self.launcher = launcher
        self.timeline = timeline
        self.step_name = name
        self._calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # EDVR calls the one module twice: number the calls within a forward for the timeline
        name = f"{self.step_name}#{self._calls}"
        self._calls += 1
        with self.timeline.step(name):
            return pixel_shuffle_lrelu(self.launcher, x.contiguous(), self.upscale, negative_slope=SLOPE)


class BridgedModel(nn.Module):
    """The bridged EDVR: forward(x ``(N, T, 3, H, W)``) -> ``(N, 3, 4H, 4W)``, marking the timeline."""

    def __init__(self, model: nn.Module, timeline: Timeline, shuffles: list[ShuffleBridge]):
        super().__init__()
        self.model = model
        self.timeline = timeline
        self._shuffles = shuffles

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for s in self._shuffles:
            s._calls = 0
        self.timeline.begin()
        out = self.model(x)
        self.timeline.end()
        return out


def bridge_model(model: nn.Module, launcher, timeline: Timeline,
                 gemm: str = "torch") -> tuple[BridgedModel, list[str]]:
    """A copy of ``model`` with every ``DCNv2Pack`` and ``PixelShuffleLReLU`` on vsr's kernels, and the names of
    the bridged modules (in module order).  The weights are shared with nothing: the copy owns its own.
    ``gemm``: the DCN's matrix product (:func:`vsr.backends.cuda.dcn.deform_conv_torch`)."""
    bridged = copy.deepcopy(model)
    names, shuffles = [], []
    for name, module in list(bridged.named_modules()):
        if isinstance(module, DCNv2Pack):
            new = DCNBridge(module, launcher, timeline, f"dcn:{name}", gemm)
        elif isinstance(module, PixelShuffleLReLU):
            new = ShuffleBridge(module.upscale, launcher, timeline, f"shuffle:{name}")
            shuffles.append(new)
        else:
            continue
        parent_name, _, attr = name.rpartition(".")
        parent = bridged.get_submodule(parent_name) if parent_name else bridged
        parent.add_module(attr, new)
        names.append(name)
    return BridgedModel(bridged, timeline, shuffles), names


def keep_attention_fp32(model: nn.Module) -> list[str]:
    """Keep TSA's temporal attention fp32 in a ``model`` otherwise in half precision; returns the names of the
    fusion modules so kept.  Its correlation is a sum of ``num_feat`` products of unbounded features, which
    overflows fp16's 65504 before the sigmoid after it saturates (``vsr.export.fp16`` keeps the same nodes fp32
    in the ONNX form).  The two embedding convolutions run fp32, the attention comes back in the model's dtype."""
    kept = []
    for name, module in model.named_modules():
        if isinstance(module, TSAFusion):
            module.temporal_attn1.float()
            module.temporal_attn2.float()
            module.temporal_attention = functools.partial(_attention_fp32, module)
            kept.append(name)
    return kept


def _attention_fp32(tsa: TSAFusion, aligned: torch.Tensor) -> torch.Tensor:
    return TSAFusion.temporal_attention(tsa, aligned.float()).to(aligned.dtype)
