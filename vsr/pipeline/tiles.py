"""Spatial tiles: overlapping LR regions whose HR results are cropped to seamless cores.

Every tile of a frame has the same size (the last tile on an axis is shifted inward rather than cut
short), so a batch of tiles stacks into one array and a backend sees one shape.  Each pixel of the output
comes from the one tile in which it lies at least ``overlap`` pixels away from an edge that is not the
frame's own edge, which is where a convolutional network's result no longer depends on the tile border.
"""

from __future__ import annotations

from dataclasses import dataclass


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


def tile_grid(height: int, width: int, tile: int | tuple[int, int] | None, overlap: int) -> list[Tile]:
    """Row-major tiles covering a ``height x width`` frame; ``tile`` is a side, ``(tile_h, tile_w)``, or None
    (one tile: the whole frame).  A side at least the frame's own on that axis means no cut along it."""
    if tile is None:
        return [Tile(0, height, 0, width, 0, height, 0, width)]
    th, tw = (tile, tile) if isinstance(tile, int) else tile
    return [Tile(y0, y1, x0, x1, cy0, cy1, cx0, cx1)
            for (y0, y1, cy0, cy1) in axis_spans(height, th, overlap)
            for (x0, x1, cx0, cx1) in axis_spans(width, tw, overlap)]


def best_tile(height: int, width: int, max_pixels: float, overlap: int, floor: int) -> tuple[int, int] | None:
    """The tile ``(h, w)`` of at most ``max_pixels`` that computes the fewest pixels in all (cores plus the
    overlaps); sides are multiples of 16 or the frame's own.  None: not even ``floor x floor`` fits."""
    def sides(length: int) -> dict[int, int]:
        """Every candidate side on one axis -> how many tiles it takes."""
        out = {side: len(axis_spans(length, side, overlap)) for side in range(floor, length, 16)}
        out[length] = 1
        return out

    best = None
    across = sides(width)
    for th, ny in sides(height).items():
        for tw, nx in across.items():
            if th * tw > max_pixels:
                continue
            cost = ny * nx * th * tw
            if best is None or cost < best[0] or (cost == best[0] and th * tw > best[1] * best[2]):
                best = (cost, th, tw)
    return None if best is None else (best[1], best[2])
