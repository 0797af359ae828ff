"""Each frame's features once, on the device: the CUDA runtime's storage for :mod:`vsr.backends.features`.

A window of T frames shares T-1 of them with the next, so the runtime runs the model in two programs (two CUDA
graphs per bucket): ``features`` on the frames a call sees first (``M`` at a time, one fixed shape: rows beyond
the new frames are zeros, so a frame's features never depend on its neighbours in the call) and ``windows`` on
the windows, their frames' features gathered from the store.  :class:`FeatureStore` keeps, per slot of
:class:`~vsr.backends.features.FeatureSlots`, a frame's RGB in the model's dtype and layout (the centre frame's
bilinear base) and its pyramid ``[L1, L2, L3]``; each slot's tensors are allocated once (outside any graph's
pool: they live as long as the stream needs them), and every copy in or out of the store is one
``torch._foreach_copy_`` (one multi-tensor kernel on a GPU, wherever the strides agree, which they do: slots,
graph outputs and graph inputs are all in the runtime's layout).
"""

from __future__ import annotations

import numpy as np
import torch

from vsr.backends.base import pyramid_nbytes

LEVELS = ("rgb", "l1", "l2", "l3")  # what a slot keeps, in the features program's output order


class FeatureStore:
    """The kept features of one stream on the device: ``kept[level][slot]`` a ``(1, C, h, w)`` tensor."""

    def __init__(self, centre: int):
        self.centre = centre  # the window's frame whose RGB is its bilinear base
        self.kept: list[list[torch.Tensor | None]] = [[] for _ in LEVELS]

    def keep(self, rows: list[tuple[int, int]], outs) -> None:
        """``outs`` (the features program's ``[rgb, L1, L2, L3]`` of ``(M, ...)``): row ``r`` into slot ``slot``
        for each ``(slot, r)`` of ``rows``."""
        dst, src = [], []
        for kept, out in zip(self.kept, outs):
            for slot, r in rows:
                kept.extend([None] * (slot + 1 - len(kept)))
                row = out[r:r + 1]
                if kept[slot] is None or kept[slot].shape != row.shape or kept[slot].dtype != row.dtype:
                    kept[slot] = torch.empty_like(row)  # once per slot (and size): the layout of the output
                dst.append(kept[slot])
                src.append(row)
        torch._foreach_copy_(dst, src)

    def gather(self, slots: np.ndarray, inputs) -> None:
        """The windows program's ``inputs`` ``[L1 (P*T, C, h, w), L2, L3, centre (P, 3, H, W)]`` for the windows
        whose frames are in ``slots (m, T)``, ``m <= P``, into their first rows (the rest keep what they held)."""
        dst, src = [], []
        flat = slots.reshape(-1)
        for level, inp in zip(self.kept[1:], inputs[:3]):
            dst += [inp[j:j + 1] for j in range(len(flat))]
            src += [level[s] for s in flat]
        centre = inputs[3]
        dst += [centre[j:j + 1] for j in range(slots.shape[0])]
        src += [self.kept[0][s] for s in slots[:, self.centre]]
        torch._foreach_copy_(dst, src)


def slot_nbytes(num_feat: int, height: int, width: int, itemsize: int) -> int:
    """Bytes one slot keeps for a ``height x width`` frame (a bucket): its RGB and its pyramid, ``itemsize`` bytes
    per value."""
    return (pyramid_nbytes(num_feat, height, width) // 4 + 3 * height * width) * itemsize


def pyramid_shapes(num_feat: int, height: int, width: int) -> list[tuple[int, int, int]]:
    """``(C, h, w)`` of L1, L2 and L3 for a ``height x width`` frame (the stride-2 convolutions round up)."""
    out, h, w = [], height, width
    for _ in range(3):
        out.append((num_feat, h, w))
        h, w = -(-h // 2), -(-w // 2)
    return out
