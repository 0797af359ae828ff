"""The memory plan of a run, made once before it starts: how big the tiles may be.

``--memory-budget`` is the peak memory the whole process should stay within.  Everything that does not
depend on the tile size is estimated first: the process with its libraries and the model loaded, the LR
frames the window assembler and the queues hold, the HR frames being assembled, queued and encoded, and the
encoder's own memory (the sink's estimate).  What is left is the model's working memory; the tile side is
the largest that fits it.  Each figure is a measurement (docs/benchmarks.md), and the plan goes into the run's
report so that a run that exceeds it can be traced to the estimate that was wrong.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass

from vsr.pipeline.tiles import best_tile

log = logging.getLogger(__name__)

MB = 1 << 20
# Process RSS with Python, numpy, torch, ONNX Runtime, PyAV and a model loaded (295-330 MB measured).
PROCESS_BASE_MB = 350.0
# Model working memory of one item (window or tile) per LR pixel, and its fixed part, ONNX Runtime CPU with
# the split plan's shared arena; EDVR-S / EDVR-M / EDVR-tiny at 64x64 and 128x128 LR tiles: 27.8-36.3 KB per
# pixel, 85-126 MB fixed.  The x4 head (64 channels at 4x the resolution, its im2col buffers) dominates, so the
# figure hardly depends on the trunk's width.
MODEL_BYTES_PER_PIXEL = 38_000
MODEL_FIXED_MB = 130.0
MIN_TILE = 64
MARGIN = 0.05  # of the budget, kept free for what the estimates miss (allocator slack, Python objects)


@dataclass(frozen=True)
class MemoryPlan:
    """All figures in MB; ``tile`` is the LR tile ``(h, w)`` (None: whole frames)."""

    budget_mb: float
    process_mb: float
    lr_frames_mb: float
    hr_frames_mb: float
    encoder_mb: float
    model_mb: float
    tile: tuple[int, int] | None
    fits: bool

    @property
    def total_mb(self) -> float:
        return self.process_mb + self.lr_frames_mb + self.hr_frames_mb + self.encoder_mb + self.model_mb

    def to_dict(self) -> dict:
        d = {k: (round(v, 1) if isinstance(v, float) else v) for k, v in asdict(self).items()}
        d["total_mb"] = round(self.total_mb, 1)
        return d


def model_mb(pixels: int, batch: int) -> float:
    return MODEL_FIXED_MB + MODEL_BYTES_PER_PIXEL * pixels * max(batch, 1) / MB


def plan_memory(*, budget_mb: float, height: int, width: int, scale: int, num_frame: int, batch: int,
                queue: int, overlap: int, encoder_mb: float, hr_bytes_per_pixel: float = 3.0) -> MemoryPlan:
    """The tile for an ``height x width`` LR source under ``budget_mb`` (see the module's docstring): of the
    tiles whose working memory fits what is left, the one that computes the fewest pixels in all.

    ``hr_bytes_per_pixel``: bytes of one output pixel's integer 4:4:4 planes (3 for 8-bit, 6 for 16-bit).
    """
    r = num_frame // 2
    lr_frame = 3 * 4 * height * width / MB  # float32 RGB
    lr_frames = (4 * r + 1 + queue + 1) * lr_frame
    hr_px = height * width * scale * scale
    hr_444 = hr_bytes_per_pixel * hr_px / MB
    # one frame assembled (4:4:4) and its subsampled copy being made, ``queue`` waiting, one being encoded
    hr_frames = hr_444 + (queue + 2) * hr_444 / 2
    fixed = PROCESS_BASE_MB + lr_frames + hr_frames + encoder_mb
    left = budget_mb * (1.0 - MARGIN) - fixed
    whole = model_mb(height * width, batch)
    if whole <= left:
        return MemoryPlan(budget_mb, PROCESS_BASE_MB, lr_frames, hr_frames, encoder_mb, whole, None, True)
    pixels = max(left - MODEL_FIXED_MB, 0.0) * MB / (MODEL_BYTES_PER_PIXEL * max(batch, 1))
    floor = max(MIN_TILE, 2 * overlap + 16)
    tile = best_tile(height, width, pixels, overlap, floor)
    fits = tile is not None
    if tile is None:
        tile = (min(floor, height), min(floor, width))
    used = model_mb(tile[0] * tile[1], batch)
    if not fits:
        log.warning("--memory-budget %d MB is less than this output needs (about %d MB with %dx%d tiles)",
                    budget_mb, fixed + used, *tile)
    return MemoryPlan(budget_mb, PROCESS_BASE_MB, lr_frames, hr_frames, encoder_mb, used, tile, fits)
