"""The CUDA runtime with the split plan's segments as TensorRT engines, bridged by vsr's CUDA kernels.

The plan (:mod:`vsr.plan`) is the one the CPU split backend runs; here its arena is one device tensor
(:class:`TorchArena`, 256-byte aligned), its segments are TensorRT engines that read and write that arena in place
(``TensorRTSegmentBackend(device_io=True)``) and its bridge steps are vsr's CUDA kernels on views of it
(:func:`cuda_bridge_kernels`), all on the backend's own stream (engines get its handle, the kernels follow
torch's current stream, which it is).  Per call the input is uploaded into the arena and the output downloaded
from it, as ``CudaOptions.output`` -- or, in a run, as the sink's planes made on the device (``prepare(..., planes=)``,
the same conversion as the torch segments' runtime: ``vsr.backends.cuda.planes.device_planes``); nothing else
crosses to the host.

The segments' precision is their ONNX's (strongly typed engines): fp32 from the plain export, fp16 from vsr's
fp16 export, int8 from the Q/DQ export.  ``prepare(h, w, batch)`` plans ``batch`` items per run: the engines'
profiles are optimised there, and a partial batch is padded to it (one arena per bucket, not one per batch size).

Its layout is the plan's: NCHW tensors in the arena (TensorRT picks its own formats inside an engine), so its
bridges run vsr's NCHW kernels.

On a CPU the same runtime runs with any segment backend whose runners bind CPU tensors (the tests use ONNX
Runtime) and the kernels on the CPU harness: the wiring of the plan, the arena and the bridges is checked in CI.
"""

from __future__ import annotations

from contextlib import ExitStack, nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from vsr.backends.cuda.dcn import deform_conv_torch
from vsr.backends.cuda.keys import cache_folder, device_facts, runtime_key
from vsr.backends.cuda.tensors import TensorLauncher, kernel_cache_dir, open_tensor_launcher, torch_dtype
from vsr.backends.cuda.planes import OutputConversion, device_planes, quantise
from vsr.backends.cuda.options import CudaOptions
from vsr.backends.split import SplitOptions
from vsr.backends.split import SplitBackend
from vsr.errors import BackendError
from vsr.kernels.cuda.ops import pixel_shuffle_lrelu
from vsr.kernels.deform_conv import DeformConvGeometry
from vsr.kernels.node import BridgeNode
from vsr.kernels.registry import KernelRegistry
from vsr.plan.arena import ALIGN, ArenaPlan
from vsr.plan.executor import PlanExecutor
from vsr.plan.partition import DEFAULT_BRIDGE_OPS
from vsr.plan.plan import SubgraphPlan
from vsr.plan.tensorrt import TensorRTSegmentBackend
from vsr.video.planes import PlaneBatch, PlaneFormat


class TorchArena:
    """A bound plan's arena as one uint8 tensor on ``device``, its start 256-byte aligned (cudaMalloc's blocks
    are; a CPU tensor is cut to an aligned start); views are typed tensors of it."""

    def __init__(self, device: torch.device):
        self.device = device

    def allocate(self, nbytes: int) -> torch.Tensor:
        raw = torch.empty(max(int(nbytes), 1) + ALIGN, dtype=torch.uint8, device=self.device)
        start = -raw.data_ptr() % ALIGN
        return raw[start:start + max(int(nbytes), 1)]

    def views(self, plan: ArenaPlan, arena: torch.Tensor, shapes, dtypes) -> dict[str, torch.Tensor]:
        out = {}
        for name, shape in shapes.items():
            b = plan.buffers[name]
            out[name] = arena[b.offset:b.offset + b.nbytes].view(torch_dtype(dtypes[name])).view(tuple(shape))
        return out

    def window(self, arena: torch.Tensor, offset: int, nbytes: int) -> torch.Tensor:
        return arena[offset:offset + nbytes]


class _DeformConvBridge:
    """ONNX ``DeformConv(X, W, offset, B?, mask?)`` on vsr's CUDA kernel; W and B constants on the device."""

    def __init__(self, launcher: TensorLauncher, node: BridgeNode, shapes, constants, gemm: str = "torch"):
        if 1 not in constants:
            raise BackendError("DeformConv bridge: the weight must be a constant (initializer)")
        a = node.attrs
        self.geom = DeformConvGeometry.from_attrs(
            shapes[0], constants[1].shape, pads=a.get("pads"), strides=a.get("strides"),
            dilations=a.get("dilations"), group=int(a.get("group", 1)), offset_group=int(a.get("offset_group", 1)))
        self.launcher = launcher
        self.gemm = gemm
        self.slope = node.negative_slope
        dtype = constants[1].dtype  # the segments' own (fp16 from the fp16 export)
        self.weight = torch.from_numpy(np.ascontiguousarray(constants[1])).to(launcher.device)
        bias = constants.get(3)
        bias = np.zeros(self.geom.co, dtype) if bias is None else np.ascontiguousarray(bias, dtype)
        self.bias = torch.from_numpy(bias).to(launcher.device)
        self.has_mask = len(shapes) > 4 and shapes[4] is not None
        self.ones = None if self.has_mask else torch.ones(self.geom.mask_shape, dtype=self.weight.dtype,
                                                          device=launcher.device)

    def workspace_nbytes(self) -> int:
        return 0  # the column buffer comes from torch's allocator (a graph's pool while capturing)

    def run(self, inputs, outputs, workspace) -> None:
        mask = inputs[4] if self.has_mask else self.ones
        deform_conv_torch(self.launcher, self.geom, inputs[0], self.weight, inputs[2], mask, self.bias,
                          out=outputs[0], negative_slope=self.slope, gemm=self.gemm)


class _DepthToSpaceBridge:
    def __init__(self, launcher: TensorLauncher, node: BridgeNode, shapes, constants):
        mode = node.attrs.get("mode", "DCR")
        mode = mode.decode() if isinstance(mode, bytes) else mode
        if mode != "CRD":
            raise BackendError(f"DepthToSpace bridge: only mode CRD (PixelShuffle) is implemented, not {mode}")
        self.launcher = launcher
        self.blocksize = int(node.attrs["blocksize"])
        self.slope = node.negative_slope

    def workspace_nbytes(self) -> int:
        return 0

    def run(self, inputs, outputs, workspace) -> None:
        pixel_shuffle_lrelu(self.launcher, inputs[0], self.blocksize, out=outputs[0], negative_slope=self.slope)


def cuda_bridge_kernels(launcher: TensorLauncher, device: str, gemm: str = "torch") -> KernelRegistry:
    """A registry with vsr's CUDA kernels (through ``launcher``) as the bridges of ``device``."""
    registry = KernelRegistry()
    registry.register("DeformConv", device)(lambda n, s, c: _DeformConvBridge(launcher, n, s, c, gemm))
    registry.register("DepthToSpace", device)(lambda n, s, c: _DepthToSpaceBridge(launcher, n, s, c))
    return registry


class CudaTensorRTBackend(SplitBackend):
    """The split plan on a device arena: ``infer((N, T, 3, H, W)) -> (N, 3, 4H, 4W)`` as ``options.output``;
    timings per plan step (launch times on a GPU, where the steps run asynchronously; the CPU emulation's are
    real)."""

    name = "cuda-tensorrt"

    def __init__(self, onnx_source, config, options: CudaOptions, device: torch.device, segment_backend):
        split = SplitOptions(cache_dir=options.cache_dir and str(options.cache_dir) + "/plans",
                             buckets=options.buckets)
        super().__init__(onnx_source, config, split, segment_backend=segment_backend)
        self.device = device
        self.output = options.output
        self.device_planes = options.device_planes
        self.out = OutputConversion()  # fmt set: the sink's planes are made on the device and downloaded
        self.launcher = open_tensor_launcher(options.launcher, device,
                                             cache_dir=kernel_cache_dir(device, options.cache_dir))
        gemm = "torch" if options.dcn_gemm == "auto" else options.dcn_gemm  # NCHW bridges: no fused form
        self.kernels = cuda_bridge_kernels(self.launcher, segment_backend.device, gemm)
        self.memory = TorchArena(device)
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self.planned: dict[tuple[int, int], int] = {}
        self._staging: np.ndarray | None = None  # the padded input on the host, before its upload

    @classmethod
    def from_model(cls, model, config, options: CudaOptions, device: torch.device,
                   segment_backend=None) -> "CudaTensorRTBackend":
        """Export per bucket through the export cache in the segments' precision (fp16: vsr's fp16 form; int8:
        the Q/DQ form); segments as TensorRT engines unless given another ``segment_backend`` (whose runners
        bind tensors on ``device``)."""
        from vsr.export.onnx import state_checksum

        sha = state_checksum(model)
        backend = {}

        def stream() -> int:
            return backend["self"].stream_handle()

        if segment_backend is None:
            segment_backend = tensorrt_segments(options, device, stream)
        elif isinstance(segment_backend, TensorRTSegmentBackend) and segment_backend.stream is None:
            segment_backend = replace(segment_backend, stream=stream)
        source = _exporter(model, config, sha, getattr(segment_backend, "precision", "fp32"))
        backend["self"] = cls(source, config, options, device, segment_backend)
        return backend["self"]

    def stream_handle(self) -> int:
        """The ``cudaStream_t`` the engines run on: the backend's own stream (never the legacy default)."""
        return self.stream.cuda_stream if self.stream is not None else _HOST_STREAM

    def _on_stream(self):
        if self.stream is None:
            return nullcontext()
        stack = ExitStack()
        stack.enter_context(torch.cuda.device(self.device))
        stack.enter_context(torch.cuda.stream(self.stream))
        return stack

    def prepare(self, height: int, width: int, batch: int, phase=None, planes: PlaneFormat | None = None) -> None:
        """Plan ``batch`` items per run for this bucket: engines optimised for it, partial batches padded to it;
        ``planes``: from now on ``infer`` returns them, made on the device (unless ``device_planes`` is off)."""
        self.out.fmt = planes if self.device_planes else None
        hb, wb = self.bucket(height, width)
        self.planned[(hb, wb)] = max(int(batch), 1)
        if (hb, wb) not in self._executors and hasattr(self.segment_backend, "opt_batch"):
            sb = self.segment_backend
            self.segment_backend = replace(sb, opt_batch=self.planned[(hb, wb)],
                                           max_batch=max(sb.max_batch, self.planned[(hb, wb)]))
        with self._on_stream():
            super().prepare(height, width, batch, phase)

    def infer(self, x: np.ndarray) -> np.ndarray | PlaneBatch:
        """``(N, T, 3, H, W)`` -> RGB ``(N, 3, 4H, 4W)`` as ``options.output``, or in a run the sink's planes
        (a PlaneBatch, as :meth:`prepare` was told)."""
        with self._on_stream():
            y = super().infer(x)
        fmt = self.out.fmt
        if fmt is None:
            return y
        h, w = np.shape(x)[-2:]
        return PlaneBatch(y.view(np.uint16) if y.dtype == np.int16 else y, 4 * h, 4 * w, fmt)

    def facts(self) -> dict:
        """:meth:`SplitBackend.facts` and what is downloaded: the sink's planes (made on the device) or RGB."""
        what = f"planes {self.out.fmt.pix_fmt}" if self.out.fmt is not None else f"rgb {self.output}"
        return {**super().facts(), "download": what}

    def _bound(self, n: int, hb: int, wb: int, phase=None):
        """The planned batch's binding for any ``n`` (padded, or cut into planned batches)."""
        return super()._bound(self.planned.get((hb, wb), n), hb, wb, phase)

    def plan_for(self, onnx_path: Path, on_build: Callable[[], None] = lambda: None) -> SubgraphPlan:
        """The plan of the segments' own ONNX (fp32, fp16 or Q/DQ: the file's checksum keys it); no transform."""
        sb = self.segment_backend
        bridge_ops = DEFAULT_BRIDGE_OPS if self.options.bridge_ops is None else self.options.bridge_ops
        return self.cache.get(onnx_path, backend=sb.name, backend_version=sb.version, precision="fp32",
                              bridge_ops=bridge_ops, fuse_activations=self.options.fuse_activations,
                              kernel_device=sb.device, on_build=on_build)

    def new_executor(self, plan: SubgraphPlan) -> PlanExecutor:
        return PlanExecutor(plan, self.segment_backend, kernels=self.kernels, memory=self.memory)

    def load_input(self, chunk: np.ndarray, dst: torch.Tensor) -> None:
        """Pad on the host (a staging array kept per shape), then upload into the device arena's input."""
        if self._staging is None or self._staging.shape != tuple(dst.shape):
            self._staging = np.zeros(tuple(dst.shape), np.float32)
        super().load_input(chunk, self._staging)
        dst.copy_(torch.from_numpy(self._staging), non_blocking=False)

    def read_output(self, src: torch.Tensor, m: int, height: int, width: int) -> np.ndarray:
        """The chunk's ``m`` frames from the arena's output, cropped: RGB as ``options.output``, or each frame's
        planes of the run's format (uint8, or int16 holding uint16's bits), made on the device from the output as
        the engines left it (fp32, or fp16 from fp16 engines), before any rounding to ``options.output``."""
        y = src[:m, :, :height, :width]
        if self.out.fmt is not None:
            return device_planes(y, self.out.fmt).cpu().numpy()
        return quantise(y, self.output).cpu().numpy()


_HOST_STREAM = 1  # the CPU emulation's stand-in engines run synchronously: any non-zero handle names "ours"


def _exporter(model, config, sha: str, precision: str):
    from vsr.export.cache import cached_export

    def export(h: int, w: int) -> Path:
        if precision != "int8":
            return cached_export(model, config, h, w, sha, precision=precision)
        from vsr.quant.qdq import cached_qdq

        return cached_qdq(cached_export(model, config, h, w, sha), sha, config, h, w)

    return export


def tensorrt_segments(options: CudaOptions, device: torch.device, stream) -> TensorRTSegmentBackend:
    """TensorRT engines reading and writing the device arena on the backend's ``stream()``, cached by device and
    versions."""
    facts = device_facts(device)
    folder = cache_folder(facts, options.cache_dir, "tensorrt", options.precision)
    return TensorRTSegmentBackend(precision=options.precision, device="cuda", device_io=True, stream=stream,
                                  engine_dir=str(folder), cache_key=runtime_key(facts, options.precision))
