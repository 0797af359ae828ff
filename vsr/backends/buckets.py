"""Shape buckets: pad frames up to a bucket size, crop the result back."""

from __future__ import annotations

import numpy as np


def bucket_size(h: int, w: int, align: int = 4) -> tuple[int, int]:
    """Smallest (H, W) >= (h, w) that are multiples of ``align`` (EDVR needs 4)."""
    return -(-h // align) * align, -(-w // align) * align


def pad_to_bucket(x: np.ndarray, align: int = 4) -> tuple[np.ndarray, tuple[int, int]]:
    """Pad ``(..., H, W)`` at the bottom/right by reflection (edge copy where too small) to the bucket."""
    h, w = x.shape[-2:]
    hb, wb = bucket_size(h, w, align)
    if (hb, wb) == (h, w):
        return x, (hb, wb)
    pad = [(0, 0)] * (x.ndim - 2) + [(0, hb - h), (0, wb - w)]
    mode = "reflect" if (hb - h) < h and (wb - w) < w else "edge"
    return np.ascontiguousarray(np.pad(x, pad, mode=mode)), (hb, wb)
