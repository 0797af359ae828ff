"""Host <-> device transfers of the CUDA runtime: pinned host buffers, copies on a side stream, small outputs.

* Uploads and downloads run on a copy stream of their own, ordered against the compute stream by events, from
  and into pinned (page-locked) host buffers that are allocated once per shape: a copy is a DMA that overlaps
  the compute stream's work (the next chunk's upload with this chunk's compute, this chunk's download with the
  next chunk's compute), and the host waits only for the download it needs.
* Two slots alternate, so a slot's buffers are never refilled while a copy from them is in flight.
* What is downloaded -- the sink's planes or RGB -- is made on the device by :mod:`vsr.backends.cuda.planes`.

On the CPU (the emulation) the same calls copy synchronously from ordinary memory.
"""

from __future__ import annotations

import numpy as np
import torch


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
