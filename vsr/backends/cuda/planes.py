"""What a CUDA backend downloads, made on the device: the sink's planes (:func:`device_planes`: matrix, range,
bit depth, chroma subsampling at the output's siting, by the arithmetic of ``vsr.video.planes``; a 4K 8-bit 4:2:0
frame is 12.4 MB), or RGB of the ``output`` dtype (``CudaOptions.output``): ``uint8`` (quantised as the post stage
would: round half up, clipped; 24.9 MB instead of 99.5 MB as float32), ``float16`` (enough for 10-bit output)
or ``float32``.  The post stage takes any of them (``vsr.pipeline.runner``).  :class:`OutputConversion` says
which a run downloads.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from vsr.video.planes import PlaneBatch, PlaneFormat


def quantise(y: torch.Tensor, output: str) -> torch.Tensor:
    """``y`` (float, RGB in [0, 1] give or take) as ``output``: uint8 is ``clip(y * 255 + 0.5, 0, 255)``
    truncated, as ``vsr.video.colour.quantise_rgb`` does on the host."""
    if output == "uint8":
        return torch.clamp(y.float() * 255.0 + 0.5, 0.0, 255.0).to(torch.uint8)
    return y.to(getattr(torch, output))


def device_planes(y: torch.Tensor, fmt: PlaneFormat) -> torch.Tensor:
    """RGB ``y (N, 3, H, W)`` (float in [0, 1] give or take, or uint8 0..255) -> ``(N, bytes)`` on its device:
    each item's three planes of ``fmt`` one after another (:class:`~vsr.video.planes.PlaneBatch`), uint8, or int16
    holding uint16's bits for deeper formats.  The operations of ``vsr.video.planes.convert_tile`` (the same
    float32 numbers from :meth:`~vsr.video.planes.PlaneFormat.arrays`, in the same order, no fused multiply-add),
    so both make the same codes; taps past the picture's edges read its edge pixels.  One item at a time: the
    float32 working copies (about 0.4 GB for a 4K frame) never hold a whole batch."""
    return torch.cat([_item_planes(y[n:n + 1], fmt) for n in range(y.shape[0])])


@functools.lru_cache(maxsize=16)
def _constants(fmt: PlaneFormat, codes: bool, h: int, w: int, device: torch.device) -> tuple:
    """:meth:`PlaneFormat.arrays` on ``device`` and the chroma taps' row and column indices for ``h x w``: made
    once per run's shape, not per frame (a copy of host memory to a GPU waits for the work queued before it)."""
    m, off, lo, hi, ox, wx, oy, wy = fmt.arrays(codes)
    m, off, wx, wy = (torch.as_tensor(a, device=device) for a in (m, off, wx, wy))
    rows = cols = None
    if fmt.sub_x or fmt.sub_y:
        hc, wc = fmt.plane_shapes(h, w)[1]
        down = torch.arange(hc, device=device) * (1 << fmt.sub_y)
        along = torch.arange(wc, device=device) * (1 << fmt.sub_x)
        rows = [(down + int(o)).clamp(0, h - 1) for o in oy]
        cols = [(along + int(o)).clamp(0, w - 1) for o in ox]
    return m, off, float(lo), float(hi), rows, wy, cols, wx


def _item_planes(y: torch.Tensor, fmt: PlaneFormat) -> torch.Tensor:
    _, _, h, w = y.shape
    m, off, lo, hi, rows, wy, cols, wx = _constants(fmt, y.dtype == torch.uint8, h, w, y.device)
    x = y.float().clamp(lo, hi)
    planes = [_matrix_row(m, off, 0, x, fmt.top)]
    if rows is not None:
        x = _taps(x, 2, rows, wy)  # down the rows, then along them, as the host kernel does
        x = _taps(x, 3, cols, wx)
    planes += [_matrix_row(m, off, i, x, fmt.top) for i in (1, 2)]
    dtype = torch.uint8 if fmt.bits <= 8 else torch.int16
    return torch.cat([_codes(p, dtype).flatten(1) for p in planes], dim=1)


def _taps(x: torch.Tensor, dim: int, index: list[torch.Tensor], weights: torch.Tensor) -> torch.Tensor:
    out = None
    for i, wt in zip(index, weights):
        v = wt * x.index_select(dim, i)
        out = v if out is None else out + v
    return out


def _matrix_row(m: torch.Tensor, off: torch.Tensor, i: int, x: torch.Tensor, top: float) -> torch.Tensor:
    return (m[i, 0] * x[:, 0] + m[i, 1] * x[:, 1] + m[i, 2] * x[:, 2] + off[i]).clamp(0.0, top)


def _codes(v: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Float codes in [0, top] -> integers, truncated (the 0.5 is in the offset: round half up)."""
    return v.to(dtype) if dtype == torch.uint8 else v.to(torch.int32).to(dtype)


class OutputConversion:
    """What a CUDA backend downloads: RGB as it comes (``fmt`` None), or the sink's planes of ``fmt``
    (:func:`device_planes`), which the runner asks for when it prepares the backend (``planes=``)."""

    def __init__(self):
        self.fmt: PlaneFormat | None = None

    def on_device(self, y: torch.Tensor, m: int, height: int, width: int) -> torch.Tensor:
        """The model's output ``y (step, 3, >= height, >= width)`` for a chunk of ``m`` items -> what to download."""
        return y if self.fmt is None else device_planes(y[:m, :, :height, :width], self.fmt)

    def collect(self, out: np.ndarray | None, n: int, i: int, m: int, y: np.ndarray, height: int,
                width: int) -> np.ndarray:
        """Items ``i:i+m`` of a batch of ``n`` from a download ``y`` into ``out`` (made on the first call)."""
        if self.fmt is None:
            y = y[:m, :, :height, :width]
        elif y.dtype == np.int16:
            y = y.view(np.uint16)
        if out is None:
            out = np.empty((n,) + y.shape[1:], y.dtype)
        out[i:i + m] = y[:m]
        return out

    def result(self, out: np.ndarray, height: int, width: int) -> np.ndarray | PlaneBatch:
        return out if self.fmt is None else PlaneBatch(out, height, width, self.fmt)
