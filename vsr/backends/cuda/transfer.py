"""Host <-> device transfers of the CUDA runtime: pinned host buffers, copies on a side stream, small outputs.

* Uploads and downloads run on a copy stream of their own, ordered against the compute stream by events, from
  and into pinned (page-locked) host buffers that are allocated once per shape: a copy is a DMA that overlaps
  the compute stream's work (the next chunk's upload with this chunk's compute, this chunk's download with the
  next chunk's compute), and the host waits only for the download it needs.
* Two slots alternate, so a slot's buffers are never refilled while a copy from them is in flight.
* The output is downloaded as the sink's planes where the runner asks for them (:class:`OutputConversion`,
  :func:`device_planes`: matrix, range, bit depth, chroma subsampling at the output's siting, made on the device
  by the arithmetic of ``vsr.video.planes``; a 4K 8-bit 4:2:0 frame is 12.4 MB), else as RGB of the ``output``
  dtype (:data:`OUTPUTS`): ``uint8`` (quantised as the post stage would: round half up, clipped; 24.9 MB instead
  of 99.5 MB as float32), ``float16`` (enough for 10-bit output) or ``float32``.  The post stage takes any of
  them (``vsr.pipeline.runner``).

On the CPU (the emulation) the same calls copy synchronously from ordinary memory.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from vsr.video.planes import PlaneBatch, PlaneFormat

OUTPUTS = ("uint8", "float16", "float32")


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
    (:func:`device_planes`), which the runner asks for (``output_planes``) before it prepares the backend."""

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


class Transfers:
    """Pinned buffers and the copy stream of one backend on ``device`` (see the module's docstring).

    Per chunk ``k`` in slot ``s = k % 2``: ``input_buffer(s)`` (pinned, free once its last upload left) is filled
    by the host; ``upload(s, buf)`` queues its copy and makes the compute stream wait for it; the caller queues
    the compute on the compute stream and calls ``consumed(s)``; ``start_download(s, y)`` queues ``y``'s copy
    into pinned memory; ``finish(s, out)`` waits for that copy alone and returns a host array."""

    def __init__(self, device: torch.device):
        self.device = device
        self.gpu = device.type == "cuda"
        self.copy_stream = torch.cuda.Stream(device) if self.gpu else None
        self._buffers: dict[tuple, torch.Tensor] = {}
        self._events: dict[tuple, object] = {}  # (what, slot) -> event on the stream that did it

    def _buffer(self, slot: int, role: str, shape: tuple, dtype: torch.dtype, host: bool) -> torch.Tensor:
        key = (slot, role, host, tuple(shape), dtype)
        buf = self._buffers.get(key)
        if buf is None:
            buf = self._buffers[key] = (torch.empty(shape, dtype=dtype, pin_memory=self.gpu) if host
                                        else torch.empty(shape, dtype=dtype, device=self.device))
        return buf

    def _record(self, what: str, slot: int, stream) -> None:
        if self.gpu:
            event = torch.cuda.Event()
            event.record(stream)
            self._events[(what, slot)] = event

    def _host_wait(self, what: str, slot: int) -> None:
        event = self._events.pop((what, slot), None)
        if event is not None:
            event.synchronize()

    def _stream_wait(self, stream, what: str, slot: int) -> None:
        event = self._events.get((what, slot))
        if event is not None:
            stream.wait_event(event)

    def input_buffer(self, slot: int, shape: tuple) -> torch.Tensor:
        """``slot``'s pinned float32 input of ``shape``, once its previous upload has left it."""
        self._host_wait("upload", slot)
        return self._buffer(slot, "in", shape, torch.float32, host=True)

    def upload(self, slot: int, host: torch.Tensor) -> torch.Tensor:
        """``host`` onto the device (on the copy stream); the compute stream waits for this copy only."""
        dst = self._buffer(slot, "in", tuple(host.shape), host.dtype, host=False)
        if not self.gpu:
            return dst.copy_(host)
        self._stream_wait(self.copy_stream, "consumed", slot)  # the compute that read this slot's last input
        with torch.cuda.stream(self.copy_stream):
            dst.copy_(host, non_blocking=True)
        self._record("upload", slot, self.copy_stream)
        self._stream_wait(torch.cuda.current_stream(self.device), "upload", slot)
        return dst

    def consumed(self, slot: int) -> None:
        """The compute stream's work on ``slot``'s input is queued: its next upload may follow that."""
        if self.gpu:
            self._record("consumed", slot, torch.cuda.current_stream(self.device))

    def start_download(self, slot: int, src: torch.Tensor) -> torch.Tensor:
        """Queue ``src`` (written on the compute stream) for download into ``slot``'s pinned output."""
        out = self._buffer(slot, "out", tuple(src.shape), src.dtype, host=True)
        if not self.gpu:
            return out.copy_(src)
        compute = torch.cuda.current_stream(self.device)
        keep = self._buffer(slot, "out", tuple(src.shape), src.dtype, host=False)
        self._stream_wait(compute, "download", slot)  # this slot's previous download has read ``keep``
        keep.copy_(src)  # on the compute stream: the next replay may overwrite ``src`` while the download runs
        self.copy_stream.wait_stream(compute)
        with torch.cuda.stream(self.copy_stream):
            out.copy_(keep, non_blocking=True)
        self._record("download", slot, self.copy_stream)
        return out

    def finish(self, slot: int, out: torch.Tensor) -> np.ndarray:
        """Wait for ``slot``'s download alone and return the pinned buffer as an array: valid until ``slot``'s
        next download, so the caller copies what it keeps (the runtime copies it into the batch's output at
        once: one host copy of a download, not two)."""
        self._host_wait("download", slot)
        return out.numpy()

    def pinned_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for (_, _, host, _, _), t in self._buffers.items() if host)
