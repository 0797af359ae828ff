"""Shape buckets: which (H, W) a frame runs at, padding up to it and cropping back.  See configs/plan/buckets.toml.

Every backend pads through one :class:`BucketPolicy`, so the whole graph, the split plan and PyTorch see the same
padded frame and give the same pixels near the bottom/right edge.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from vsr.errors import ConfigError

PAD_MODES = ("reflect", "edge")


@dataclass(frozen=True)
class BucketPolicy:
    """sizes: explicit (H, W) buckets; max_pad: the most rows/columns a frame is padded to reach one of them;
    align: rounding for sizes no listed bucket fits; pad_mode: reflect | edge."""

    sizes: tuple[tuple[int, int], ...] = ()
    align: int = 4
    pad_mode: str = "reflect"
    max_pad: int = 16

    def __post_init__(self):
        if self.align < 1 or any(h % self.align or w % self.align or h < 1 or w < 1 for h, w in self.sizes):
            raise ConfigError(f"bucket sizes must be positive multiples of align={self.align}: {self.sizes}")
        if self.pad_mode not in PAD_MODES:
            raise ConfigError(f"pad_mode must be one of {PAD_MODES}, not {self.pad_mode!r}")

    @classmethod
    def load(cls, path: str | os.PathLike | None = None) -> "BucketPolicy":
        """``configs/plan/buckets.toml`` (or ``path``)."""
        from vsr.files import load_config

        return load_config(path, "plan/buckets.toml", "bucket config", lambda data: cls(
            sizes=tuple((int(h), int(w)) for h, w in data.get("sizes", [])), align=int(data.get("align", 4)),
            pad_mode=str(data.get("pad_mode", "reflect")), max_pad=int(data.get("max_pad", 16))))

    def bucket(self, h: int, w: int) -> tuple[int, int]:
        # padding costs compute and changes the output near the bottom/right edge (the receptive field sees
        # it): a listed bucket is only worth it when it is close
        fits = [(bh * bw, bh, bw) for bh, bw in self.sizes
                if h <= bh <= h + self.max_pad and w <= bw <= w + self.max_pad]
        if fits:
            _, bh, bw = min(fits)
            return bh, bw
        a = self.align
        return -(-h // a) * a, -(-w // a) * a

    def pad(self, x: np.ndarray) -> tuple[np.ndarray, tuple[int, int]]:
        """``x (..., h, w)`` padded at the bottom/right to its bucket ``(H, W)``; ``x`` itself when it is one."""
        h, w = x.shape[-2:]
        hb, wb = self.bucket(h, w)
        if (hb, wb) == (h, w):
            return x, (hb, wb)
        out = np.empty(x.shape[:-2] + (hb, wb), x.dtype)
        self.pad_into(x, out)
        return out, (hb, wb)

    def pad_into(self, x: np.ndarray, out: np.ndarray) -> None:
        """Write ``x (..., h, w)`` into ``out (..., H, W)`` padded at the bottom/right."""
        h, w = x.shape[-2:]
        hb, wb = out.shape[-2:]
        if (h, w) == (hb, wb):
            np.copyto(out, x)
            return
        mode = self.pad_mode if (hb - h) < h and (wb - w) < w else "edge"
        pad = [(0, 0)] * (x.ndim - 2) + [(0, hb - h), (0, wb - w)]
        np.copyto(out, np.pad(x, pad, mode=mode))
