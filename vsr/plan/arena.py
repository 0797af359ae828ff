"""Static memory plan: one arena for every tensor exchanged between steps and every kernel workspace.

Each buffer lives from the step that writes it to the last step that reads it (graph inputs from before the
first step, graph outputs until after the last).  Buffers whose lifetimes do not overlap may share bytes; offsets
are assigned greedily, largest first, at the lowest offset that does not collide with an already placed buffer
alive at the same time (the "greedy by size" scheme of TFLite's arena planner).  Lifetimes are closed intervals,
so a step's inputs and outputs never share memory.

Offsets are multiples of 256 bytes: TensorRT's ``set_tensor_address`` refuses a tensor that is not 256-byte
aligned, and the CUDA runtime points engines at views of one device arena (whose base, from cudaMalloc, is).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ALIGN = 256


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


@dataclass
class Buffer:
    name: str
    nbytes: int
    first: int  # step index that writes it (-1: before the first step)
    last: int  # last step index that reads it (len(steps): after the last step)
    offset: int = -1

    def overlaps(self, other: "Buffer") -> bool:
        return self.first <= other.last and other.first <= self.last


@dataclass
class ArenaPlan:
    """Offsets of every buffer in one arena of ``arena_nbytes``; ``naive_nbytes`` is the sum of all buffers."""

    buffers: dict[str, Buffer]
    arena_nbytes: int

    @property
    def naive_nbytes(self) -> int:
        return sum(_aligned(b.nbytes) for b in self.buffers.values())

    def summary(self) -> dict:
        return {"arena_bytes": self.arena_nbytes, "naive_bytes": self.naive_nbytes, "buffers": len(self.buffers),
                "saving": round(1.0 - self.arena_nbytes / max(self.naive_nbytes, 1), 4)}

    def views(self, arena: np.ndarray, shapes: dict[str, tuple], dtypes: dict[str, str]) -> dict[str, np.ndarray]:
        """Typed views of the arena (a flat uint8 array) for every buffer named in ``shapes``."""
        out = {}
        for name, shape in shapes.items():
            b = self.buffers[name]
            dt = np.dtype(dtypes[name])
            out[name] = arena[b.offset:b.offset + b.nbytes].view(dt).reshape(shape)
        return out


def plan_arena(lifetimes: list[Buffer]) -> ArenaPlan:
    """Assign offsets (in place) to ``lifetimes`` and return the plan."""
    placed: list[Buffer] = []
    for buf in sorted(lifetimes, key=lambda b: (-b.nbytes, b.first, b.name)):
        size = _aligned(buf.nbytes)
        offset = 0
        for other in sorted((p for p in placed if p.overlaps(buf)), key=lambda p: p.offset):
            if offset + size <= other.offset:
                break
            offset = max(offset, other.offset + _aligned(other.nbytes))
        buf.offset = offset
        placed.append(buf)
    arena = max((b.offset + _aligned(b.nbytes) for b in placed), default=0)
    return ArenaPlan({b.name: b for b in lifetimes}, arena)
