"""Spatial tiles: overlapping LR regions whose HR results are cropped to seamless cores.

Every tile of a frame has the same size (the last tile on an axis is shifted inward rather than cut
short), so a batch of tiles stacks into one array and a backend sees one shape.  Each pixel of the output
comes from the one tile in which it lies at least ``overlap`` pixels away from an edge that is not the
frame's own edge, which is where a convolutional network's result no longer depends on the tile border.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Peak working memory of one window per LR pixel on ONNX Runtime CPU (warm export cache, batch 1):
# EDVR-tiny (16 features x 3 frames) 29.2 KB, EDVR-M (64 x 5) 64-68 KB, at 64x64 and 128x128 tiles
# (docs/benchmarks.md).  Fitted as a part that grows with features x frames (PCD, fusion) and a fixed
# part (the 64-channel x4 upsampling head).  Used for the automatic tile size.
BYTES_PER_FEAT_FRAME_PIXEL = 132
BYTES_PER_PIXEL_HEAD = 22_900


@dataclass(frozen=True)
class Tile:
    """``y0:y1, x0:x1`` is the LR region fed to the model; ``cy0:cy1, cx0:cx1`` the part of it kept."""

    y0: int
    y1: int
    x0: int
    x1: int
    cy0: int
    cy1: int
    cx0: int
    cx1: int


def axis_spans(length: int, tile: int, overlap: int) -> list[tuple[int, int, int, int]]:
    """``(start, end, core_start, core_end)`` along one axis; cores partition ``[0, length)``."""
    if tile >= length:
        return [(0, length, 0, length)]
    if tile <= 2 * overlap:
        raise ValueError(f"tile {tile} must be larger than twice the overlap {overlap}")
    step = tile - 2 * overlap
    starts = list(range(0, length - tile, step)) + [length - tile]
    cuts = [0] + [(starts[i + 1] + starts[i] + tile) // 2 for i in range(len(starts) - 1)] + [length]
    return [(s, s + tile, cuts[i], cuts[i + 1]) for i, s in enumerate(starts)]


def tile_grid(height: int, width: int, tile: int | None, overlap: int) -> list[Tile]:
    """Row-major tiles covering a ``height x width`` frame (one tile when ``tile`` is None or large enough)."""
    if tile is None:
        return [Tile(0, height, 0, width, 0, height, 0, width)]
    return [Tile(y0, y1, x0, x1, cy0, cy1, cx0, cx1)
            for (y0, y1, cy0, cy1) in axis_spans(height, tile, overlap)
            for (x0, x1, cx0, cx1) in axis_spans(width, tile, overlap)]


def auto_tile(height: int, width: int, num_feat: int, num_frame: int, batch: int, budget_bytes: int,
              overlap: int) -> int | None:
    """The tile side that keeps one batch's activations within ``budget_bytes`` (None: whole frames fit)."""
    per_pixel = (BYTES_PER_FEAT_FRAME_PIXEL * num_feat * num_frame + BYTES_PER_PIXEL_HEAD) * max(batch, 1)
    max_pixels = budget_bytes / per_pixel
    if height * width <= max_pixels:
        return None
    side = int(math.sqrt(max_pixels)) // 16 * 16
    return max(side, 2 * overlap + 16)
