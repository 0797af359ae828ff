"""Temporal windows: which source frames feed the model for output frame ``i``."""

from __future__ import annotations


def window_indices(center: int, total: int, num_frame: int, padding: str = "reflection_circle") -> list[int]:
    """Indices of the ``num_frame`` frames around ``center`` in a clip of ``total`` frames.

    ``padding`` decides what stands in for frames beyond the clip ends:
    ``reflection_circle`` (BasicSR's default for EDVR: continue on the far side of the window) or
    ``replicate`` (repeat the end frame).  Indices are clamped to the clip, so clips shorter than the
    window also work.
    """
    if total <= 0:
        raise ValueError("a clip needs at least one frame")
    if not 0 <= center < total:
        raise ValueError(f"center {center} outside clip of {total} frames")
    if padding not in ("reflection_circle", "replicate"):
        raise ValueError(f"unknown padding {padding!r}")
    last = total - 1
    r = num_frame // 2
    out = []
    for i in range(center - r, center - r + num_frame):
        if i < 0:
            j = 0 if padding == "replicate" else center + r - i
        elif i > last:
            j = last if padding == "replicate" else (center - r) - (i - last)
        else:
            j = i
        out.append(min(max(j, 0), last))
    return out
