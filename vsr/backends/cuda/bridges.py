"""The segments of the CUDA runtime: the PyTorch EDVR itself, with the plan's bridge ops on vsr's CUDA kernels.

The split plan cuts the exported graph at its ``DeformConv`` and ``DepthToSpace`` (+ LeakyReLU) nodes
(:mod:`vsr.plan.partition`).  Each of those nodes comes from one module of the model: ``DCNv2Pack``'s
deformable convolution and ``PixelShuffleLReLU``.  So the torch segments are the model's own code between
those modules, and :func:`bridge_model` swaps the modules for bridges that run vsr's kernels on the same
tensors, in place, on torch's stream.  No ONNX -> torch conversion is needed, the segments run exactly the
operations of the reference, and the cut points are the plan's by construction.  The bridges read and write the
tensors in the runtime's :class:`~vsr.backends.cuda.layout.Layout` (channels-last: vsr's NHWC kernels on the
``(N, H, W, C)`` views).

:class:`Timeline` marks each bridge's start and end (CUDA events on a GPU, the clock on the CPU): seconds per
segment (the time between two bridges) and per bridge kernel, for runs that are not captured in a graph.  A
run that keeps each frame's features has a ``features`` step (the per-frame front, no bridge in it) and the
windows' ``segment_<i>``; then ``segment_0`` holds no features.
"""

from __future__ import annotations

import copy
import logging
import time
from contextlib import contextmanager
from dataclasses import replace

import torch
from torch import nn

from vsr.backends.cuda.dcn import deform_conv_nhwc_torch, deform_conv_torch
from vsr.backends.cuda.layout import Layout
from vsr.kernels.cuda.fused_dcn import available as fused_available
from vsr.kernels.cuda.fused_dcn import cuda_ms, deform_conv_fused, fused_weight
from vsr.kernels.cuda.ops import pixel_shuffle_lrelu, pixel_shuffle_lrelu_nhwc, subpixel_major_order
from vsr.kernels.deform_conv import DeformConvGeometry
from vsr.model.dcn import DCNv2Pack
from vsr.model.edvr import EDVR, PixelShuffleLReLU, TSAFusion

SLOPE = 0.1  # EDVR's LeakyReLU
log = logging.getLogger(__name__)


class Timeline:
    """Marks of one run: ``reset()``; per program ``begin()`` (or ``begin(name)``: its one segment's name), then
    ``step(name)`` around each bridge, then ``end()``; ``durations()`` gives seconds per ``segment_<i>`` (or the
    named segment) and per bridge name (in order), the gaps between programs left out."""

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

    def reset(self) -> None:
        self._marks = []

    def begin(self, name: str | None = None) -> None:
        if self.enabled:
            self._mark(("begin", name))

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
        segment, named = 0, None
        for (first, a), (label, b) in zip(self._marks, self._marks[1:]):
            if isinstance(first, tuple):  # a program begins: its segments count from 0, or have its name
                segment, named = 0, first[1]
            if isinstance(label, tuple):  # the gap between two programs
                continue
            seconds = a.elapsed_time(b) / 1e3 if self.device.type == "cuda" else b - a
            if label in ("enter", "end"):
                label, segment = named or f"segment_{segment}", segment + 1
            out[label] = out.get(label, 0.0) + seconds
        return out


class DCNBridge(nn.Module):
    """``DCNv2Pack`` whose deformable convolution runs on vsr's kernel: forward(x ``(N, C, H, W)``, feat
    ``(N, C, H, W)``) -> ``(N, Co, H, W)``, in ``layout``.  The offsets and mask stay torch (they end the segment
    before); channels-last, the kernel reads the offsets straight out of ``conv_offset``'s output (they are its
    first ``2*G*kh*kw`` channels) and the mask's logits after them, the sigmoid applied by the sampling kernel."""

    def __init__(self, pack: DCNv2Pack, launcher, timeline: Timeline, name: str, gemm: str = "torch",
                 layout: Layout = Layout()):
        super().__init__()
        self.pack = pack
        self.launcher = launcher
        self.timeline = timeline
        self.step_name = name
        self.gemm = gemm
        self.layout = layout
        co, ci, kh, kw = pack.weight.shape
        # (Co, kh, kw, C) flat: the channels-last kernels' weight (a 2-D buffer, so no layout change restrides it)
        self.register_buffer("weight_rows", pack.weight.detach().permute(0, 2, 3, 1).reshape(co, kh * kw * ci),
                             persistent=False)
        # "auto": per input shape the faster of "torch" and "fused", timed on the GPU at the shape's first call
        # (a run's warm-up, before any capture); "torch" where it cannot be timed (the CPU, a capture, no Triton)
        self.forms: dict[tuple, str] = {}
        if gemm == "fused" and not layout.channels_last:
            raise ValueError("the fused DCN runs channels-last only")
        if gemm == "fused" or (gemm == "auto" and layout.channels_last and fused_available() is None):
            # the one-kernel DCN's own layout of the weights (3-D: no layout change restrides it)
            geom = DeformConvGeometry.from_attrs((1, ci, kh, kw), tuple(pack.weight.shape),
                                                 pads=[pack.padding] * 4, offset_group=pack.deformable_groups)
            self.register_buffer("weight_fused", fused_weight(pack.weight, geom), persistent=False)

    def forward(self, x: torch.Tensor, feat: torch.Tensor) -> torch.Tensor:
        pack, p = self.pack, self.pack.padding
        geom = DeformConvGeometry.from_attrs(x.shape, pack.weight.shape, pads=[p] * 4,
                                             offset_group=pack.deformable_groups)
        if not self.layout.channels_last:
            offset, mask = pack.offset_mask(feat)
            with self.timeline.step(self.step_name):
                return deform_conv_torch(self.launcher, geom, x.contiguous(), pack.weight, offset.contiguous(),
                                         mask.contiguous(), pack.bias,
                                         gemm="torch" if self.gemm == "auto" else self.gemm)  # NCHW: no fused form
        record = Layout.nhwc(pack.conv_offset(feat))  # (N, H, W, 3*G*kh*kw): offsets, then the mask's logits
        xn = Layout.nhwc(x)
        form = self.form(geom, xn, record)
        with self.timeline.step(self.step_name):  # the kernel reads the logits in the record, sigmoid and all
            out = self._run(form, geom, xn, record)
        return Layout.from_nhwc(out)

    def _run(self, form: str, geom: DeformConvGeometry, xn: torch.Tensor, record: torch.Tensor) -> torch.Tensor:
        if form == "fused":
            return deform_conv_fused(geom, xn, self.weight_fused, record, None, self.pack.bias, mask_logits=True)
        weight = self.weight_rows.view(geom.co, geom.kh, geom.kw, geom.c // geom.group)
        return deform_conv_nhwc_torch(self.launcher, geom, xn, weight, record, None, self.pack.bias, gemm=form,
                                      mask_logits=True)

    def form(self, geom: DeformConvGeometry, xn: torch.Tensor, record: torch.Tensor) -> str:
        """The DCN form of this call: ``gemm``, or for "auto" the one chosen for this input's shape (chosen now
        where it is the shape's first call and it can be timed)."""
        if self.gemm != "auto":
            return self.gemm
        key = (tuple(xn.shape), xn.dtype)
        form = self.forms.get(key)
        if form is not None:
            return form
        if (xn.device.type != "cuda" or not hasattr(self, "weight_fused")
                or torch.cuda.is_current_stream_capturing()):
            return "torch"
        form = self.forms[key] = faster_form(lambda f: self._run(f, geom, xn, record), ("torch", "fused"),
                                            self.step_name)
        return form


def faster_form(run, forms: tuple[str, ...], name: str, timer=cuda_ms) -> str:
    """The form ``f`` of ``forms`` whose ``run(f)`` ``timer`` finds fastest; a form that fails is logged and left
    out -- the first form is the fallback."""
    times = {}
    for form in forms:
        try:
            times[form] = timer(lambda: run(form))
        except Exception as e:  # noqa: BLE001 - a form that cannot run here is not chosen
            log.warning("%s: DCN form %r failed (%s: %s); not used", name, form, type(e).__name__, str(e)[:200])
    best = min(times, key=times.get) if times else forms[0]
    log.info("%s: DCN form %s (ms per call: %s)", name, best,
             ", ".join(f"{f} {t:.3f}" for f, t in times.items()) or "none timed")
    return best


class ShuffleBridge(nn.Module):
    """``PixelShuffleLReLU`` as vsr's one fused kernel: ``(N, C*r*r, H, W) -> (N, C, r*H, r*W)`` in ``layout``.
    ``subpixel_major`` (channels-last): the convolutions before it give their channels sub-pixel-major
    (:func:`order_subpixel_major`), so the kernel copies contiguous runs."""

    def __init__(self, upscale: int, launcher, timeline: Timeline, name: str, layout: Layout = Layout()):
        super().__init__()
        self.upscale = upscale
        self.launcher = launcher
        self.timeline = timeline
        self.step_name = name
        self.layout = layout
        self.subpixel_major = False
        self._calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # EDVR calls the one module twice: number the calls within a forward for the timeline
        name = f"{self.step_name}#{self._calls}"
        self._calls += 1
        with self.timeline.step(name):
            if not self.layout.channels_last:
                return pixel_shuffle_lrelu(self.launcher, x.contiguous(), self.upscale, negative_slope=SLOPE)
            out = pixel_shuffle_lrelu_nhwc(self.launcher, Layout.nhwc(x), self.upscale, negative_slope=SLOPE,
                                           subpixel_major=self.subpixel_major)
            return Layout.from_nhwc(out)


class BridgedModel(nn.Module):
    """The bridged EDVR, marking the timeline: forward(x ``(N, T, 3, H, W)``) -> ``(N, 3, 4H, 4W)``; or in two
    programs, :meth:`features` per frame and :meth:`from_features` per window (:class:`~vsr.model.edvr.EDVR`'s)."""

    def __init__(self, model: nn.Module, timeline: Timeline, shuffles: list[ShuffleBridge]):
        super().__init__()
        self.model = model
        self.timeline = timeline
        self._shuffles = shuffles

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._marked(None, self.model, x)

    def features(self, frames: torch.Tensor) -> list[torch.Tensor]:
        """``(M, 3, H, W)`` -> the pyramids ``[L1 (M, C, H, W), L2, L3]``."""
        return self._marked("features", self.model.features, frames)

    def from_features(self, nbr: list[torch.Tensor], x_center: torch.Tensor) -> torch.Tensor:
        """The windows' pyramids ``[L1 (N*T, C, H, W), L2, L3]`` and centre frames ``(N, 3, H, W)`` ->
        ``(N, 3, 4H, 4W)``."""
        return self._marked(None, self.model.from_features, nbr, x_center)

    def _marked(self, name: str | None, fn, *args):
        for s in self._shuffles:
            s._calls = 0
        self.timeline.begin(name)
        out = fn(*args)
        self.timeline.end()
        return out


def bridge_model(model: nn.Module, launcher, timeline: Timeline, gemm: str = "torch",
                 layout: Layout = Layout()) -> tuple[BridgedModel, list[str]]:
    """A copy of ``model`` with every ``DCNv2Pack`` and ``PixelShuffleLReLU`` on vsr's kernels, and the names of
    the bridged modules (in module order); its weights and activations in ``layout``.  The weights are shared
    with nothing: the copy owns its own.  ``gemm``: the DCN's matrix product
    (:func:`vsr.backends.cuda.dcn.deform_conv_torch`)."""
    bridged = copy.deepcopy(model)
    names, shuffles = [], []
    for name, module in list(bridged.named_modules()):
        if isinstance(module, DCNv2Pack):
            new = DCNBridge(module, launcher, timeline, f"dcn:{name}", gemm, layout)
        elif isinstance(module, PixelShuffleLReLU):
            new = ShuffleBridge(module.upscale, launcher, timeline, f"shuffle:{name}", layout)
            shuffles.append(new)
        else:
            continue
        parent_name, _, attr = name.rpartition(".")
        parent = bridged.get_submodule(parent_name) if parent_name else bridged
        parent.add_module(attr, new)
        names.append(name)
    if layout.channels_last:
        order_subpixel_major(bridged)
    return BridgedModel(layout.model(bridged), timeline, shuffles), names


def order_subpixel_major(model: nn.Module) -> None:
    """In every EDVR of ``model`` whose ``pixel_shuffle`` is a :class:`ShuffleBridge`: the output channels of the
    convolutions it follows (``upconv1``, ``upconv2``: its only inputs) permuted sub-pixel-major, once, in place,
    and the bridge told so -- the NHWC shuffle then copies runs of ``r*C`` contiguous values, the same result."""
    for module in model.modules():
        if not (isinstance(module, EDVR) and isinstance(module.pixel_shuffle, ShuffleBridge)):
            continue
        shuffle = module.pixel_shuffle
        with torch.no_grad():
            for conv in (module.upconv1, module.upconv2):
                order = torch.as_tensor(subpixel_major_order(conv.out_channels, shuffle.upscale))
                conv.weight.copy_(conv.weight[order])
                conv.bias.copy_(conv.bias[order])
        shuffle.subpixel_major = True


def keep_attention_fp32(model: nn.Module) -> list[str]:
    """Keep the sum of TSA's temporal attention fp32 in a ``model`` otherwise in half precision; returns the names
    of the fusion modules so kept.  Its correlation is a sum of ``num_feat`` products of unbounded features, which
    overflows fp16's 65504 before the sigmoid after it saturates (``vsr.export.fp16`` keeps the same nodes fp32
    in the ONNX form).  Only the products and their sum need the range: the two embedding convolutions run in the
    model's dtype (tensor cores, no fp32 copy of the aligned frames); EDVR's :class:`~vsr.model.edvr.Assembly`
    widens each frame's embedding to fp32 in turn and sums there."""
    kept = []
    for name, module in model.named_modules():
        if isinstance(module, EDVR) and isinstance(module.fusion, TSAFusion):
            module.set_assembly(replace(module.assembly, attention_sum_fp32=True))
            kept.append(f"{name}.fusion" if name else "fusion")
    return kept
