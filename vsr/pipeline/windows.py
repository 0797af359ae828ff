"""Temporal windows: which source frames feed the model for output frame ``i``, and the window stage that
assembles them from a stream of decoded frames."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Iterator

import numpy as np

if TYPE_CHECKING:
    from vsr.video.source import SourceFrame

# stands in for the clip length while the stream has not ended: no window reaches the far end then
_UNENDED = 1 << 62


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


@dataclass(frozen=True)
class FrameWindow:
    """The ``T`` source frames (float32 ``(3, H, W)``) that make output frame ``index``."""

    index: int
    pts: int
    duration: int
    frames: tuple[np.ndarray, ...]
    sources: tuple[int, ...]


def scene_window_indices(center: int, total: int, num_frame: int, padding: str, cuts: Iterable[int]) -> list[int]:
    """:func:`window_indices` within the scene of ``center``: ``cuts`` (frames that start a new scene) act as
    clip ends, so the frames beyond a cut are filled as beyond the clip's ends."""
    a = max((c for c in cuts if c <= center), default=0)
    b = min((c for c in cuts if c > center), default=total)
    return [a + j for j in window_indices(center - a, b - a, num_frame, padding)]


def windows(frames: Iterable, num_frame: int, padding: str, start: int = 0, stop: int | None = None,
            scenes: bool = False) -> Iterator[FrameWindow]:
    """Source frames in index order -> the :class:`FrameWindow` of each output frame ``start <= i < stop``.

    ``frames`` must begin at or before ``start - 2 * (num_frame // 2)`` (the farthest a reflection reaches
    back); its end is the clip's end, unless ``stop`` comes first (then frames past ``stop + num_frame // 2``
    are never asked for).  A frame is pulled only when the next window needs it and dropped once no later
    window can, so at most ``3 * (num_frame // 2) + 1`` frames are held here.

    ``scenes``: ``frames`` yields ``(SourceFrame, starts_a_scene)`` pairs, and no window crosses a scene cut
    (:func:`scene_window_indices`); a window is made once the frame ``num_frame // 2`` after its centre has
    told whether it starts a scene (a cut there changes the window).
    """
    r = num_frame // 2
    source = iter(frames)
    held: dict[int, SourceFrame] = {}
    cuts: list[int] = []  # scene starts a window from here on may meet: after ``center - 2 * r``, as ``held``
    seen = 0  # index of the last frame pulled, plus one
    total = None  # the clip's length, once ``frames`` has ended
    center = start
    while stop is None or center < stop:
        while True:
            if total is not None and center >= total:
                return
            if not scenes or total is not None or seen > center + r:
                end = _UNENDED if total is None else total
                idx = (scene_window_indices(center, end, num_frame, padding, cuts) if scenes
                       else window_indices(center, end, num_frame, padding))
                if all(j in held for j in idx):
                    break
                if total is not None:
                    raise ValueError(f"the window {idx} of frame {center} needs frames before the first one given")
            item = next(source, None)
            if item is None:
                total = seen
            else:
                f, cut = item if scenes else (item, False)
                if cut:
                    cuts.append(f.index)
                if f.index >= center - 2 * r:  # earlier ones feed no window from here on
                    held[f.index] = f
                seen = f.index + 1
            f = item = None
        c = held[center]
        window = FrameWindow(center, c.pts, c.duration, tuple(held[j].rgb for j in idx), tuple(idx))
        c = None
        for k in [k for k in held if k < center + 1 - 2 * r]:
            del held[k]
        cuts = [k for k in cuts if k > center + 1 - 2 * r]
        yield window
        window = None
        center += 1
