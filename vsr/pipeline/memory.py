"""The memory plan of a run, made once before it starts: how big the tiles may be.

``--memory-budget`` is the peak memory the whole process should stay within.  Everything that does not
depend on the tile size is estimated first: the process with its libraries and the model loaded, the LR
frames the window assembler and the queues hold, the HR frames being assembled, queued and encoded, and the
encoder's own memory (the sink's estimate).  What is left is the model's working memory; the tile side is
the largest that fits it.  A run that cannot fit (even with the smallest tile, or with the tile or
batch the user chose) raises ``MemoryBudgetError`` before its first frame.  Each figure is a measurement
(docs/benchmarks.md), and the plan goes into the run's report so that a run that exceeds it can be traced to the
estimate that was wrong.

A backend that keeps each frame's features between windows (``keeps_features``, :mod:`vsr.backends.features`) holds
at most :func:`vsr.pipeline.batches.kept_features` of them; they are kept only where they fit the budget beside
the plan made without them (:func:`with_features`), so the tiles are those of a backend that does not stream;
otherwise every window computes its frames' features again, and the plan says so.  A backend whose model runs
on the GPU keeps them there: they are counted against the GPU's free memory beside the model's, not the budget.

A backend whose model runs in GPU memory (the CUDA runtime) describes that memory (:class:`DeviceMemory`: what is
free now and what one LR pixel takes, measured by the backend on the device itself); then the model's working
memory is planned against the GPU's free memory and only the arrays around the model against the budget.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

from vsr.errors import MemoryBudgetError
from vsr.machine import total_memory_mb
from vsr.pipeline.tiles import best_tile, tile_grid

MB = 1 << 20
# Process RSS with Python, numpy, torch, ONNX Runtime, PyAV and a model loaded (295-330 MB measured).
PROCESS_BASE_MB = 350.0
# Model working memory of one item (window or tile) per LR pixel, and its fixed part, ONNX Runtime CPU with
# the split plan's shared arena and its memory pattern off (vsr.plan.segments): peak RSS of `prepare` + 2
# `infer` minus the loaded process (295 MiB), EDVR-S, batch 1 / 2: 64x64 180 / 280 MiB, 128x128 477 / 872,
# 240x256 1331 / 2578 (scripts/bench_mem_pattern.py --memory).  Above 130 MB fixed that is 12.9-23.7 KB per
# pixel (least squares: 19.9-25.3 KB + 82-231 MB); 26 KB keeps every point under the estimate.  The x4 head
# (64 channels at 4x the resolution, its im2col buffers) dominates the per-pixel part, so it hardly depends on
# the trunk's width; the fixed part does (EDVR-M: 340 MB), which a config gives in its TOML (ModelMemory).
MODEL_BYTES_PER_PIXEL = 26_000
MODEL_FIXED_MB = 130.0
MIN_TILE = 64
# float32 arrays of the items around the model (see item_mb): inputs built/queued/running, outputs
# returned/queued/cropped plus the colour conversion's two temporaries.  At whole 256x240 frames they were the
# ~60 MB by which the measured peak exceeded the plan before they were counted.
BATCHES_IN_FLIGHT = 3
RESULTS_IN_FLIGHT = 5
MARGIN = 0.05  # of the budget, kept free for what the estimates miss (allocator slack, Python objects)
# The default budget follows the machine, not the moment: this share of its total memory (Linux's MemTotal, or a
# cgroup's limit where lower), so that the same machine plans the same tiles from one run to the next (a share of
# the memory available now moved a run's budget between 9,984 and 11,264 MB on one machine, issue 40).  Half: the
# rest stays for the page cache that decoding and encoding stream through, the other programs, and a second vsr
# beside this one (a preview); the plan's figures are measured upper bounds, so half is not a tight fit.
AUTO_SHARE = 0.5
# Floor: the process (350 MB), EDVR-S's smallest tile and a 480p source's frames and encoder fit in it; a run that
# needs more on a machine that has less says which --memory-budget it needs, as any run that cannot fit does.
AUTO_FLOOR_MB = 1024
# Cap: 16 GB holds whole 640x480 frames of EDVR-M with each frame's features kept (11 GB); a larger budget buys
# whole frames of larger sources (1080p: ~58 GB) for at most the tiles' overlap, while one process holding tens
# of GB would starve the rest of a shared machine.
AUTO_CAP_MB = 16384
AUTO_STEP_MB = 1024  # rounded down to this: machines of one kind (MemTotal differs by the kernel's share) agree
FALLBACK_BUDGET_MB = 3072  # where the total memory cannot be read (the fixed default before)
# Each frame's features computed per window instead of kept: this much slower (EDVR-M 180x320, split plan 1.18x,
# torch 1.17x, median of 8 pairs on a quiet machine; docs/benchmarks.md, "Streaming features: quiet rerun").
PER_WINDOW_COST = 1.18


@dataclass(frozen=True)
class ModelMemory:
    """The model's working memory in host memory: ``fixed_mb + bytes_per_pixel * LR pixels`` of one item.
    The defaults are EDVR-S's (above); a config TOML may give its own (``[inference] memory_fixed_mb``,
    ``memory_bytes_per_pixel``): EDVR-M's fixed part is larger (its 64-channel segments and their workspaces)."""

    fixed_mb: float = MODEL_FIXED_MB
    bytes_per_pixel: float = MODEL_BYTES_PER_PIXEL

    @classmethod
    def of(cls, config) -> "ModelMemory":
        """The figures of a :class:`vsr.model.config.ModelConfig` (its own where it gives them)."""
        fixed = getattr(config, "memory_fixed_mb", None)
        per_pixel = getattr(config, "memory_bytes_per_pixel", None)
        return cls(MODEL_FIXED_MB if fixed is None else float(fixed),
                   MODEL_BYTES_PER_PIXEL if per_pixel is None else float(per_pixel))


@dataclass(frozen=True)
class DeviceMemory:
    """The GPU memory a backend's model works in, in MB: ``free_mb`` now (the backend's cached blocks
    included), and the working memory of one item, ``fixed_mb + bytes_per_pixel * pixels / MB``."""

    name: str
    free_mb: float
    bytes_per_pixel: float
    fixed_mb: float = 0.0

    def item_mb(self, pixels: int, batch: int) -> float:
        return self.fixed_mb + self.bytes_per_pixel * pixels * max(batch, 1) / MB

    @property
    def limit_mb(self) -> float:
        """What the model may use of the free memory (the margin kept free)."""
        return self.free_mb * (1.0 - MARGIN)

    def pixels(self, batch: int) -> float:
        """The most LR pixels one item may have."""
        return max(self.limit_mb - self.fixed_mb, 0.0) * MB / (self.bytes_per_pixel * max(batch, 1))


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
    device_mb: float | None = None  # the model's planned GPU memory (None: it works in host memory)
    features_mb: float | None = None  # each frame's kept features (None: the backend does not keep them)
    features: str | None = None  # "kept" (counted in the total) | "per-window" (they did not fit) | None
    budget_from: str | None = None  # how the default budget was made (None: --memory-budget given)
    features_on_device: bool = False  # kept in GPU memory (counted beside device_mb, not in the total)

    @property
    def total_mb(self) -> float:
        kept = self.features_mb if self.features == "kept" and not self.features_on_device else 0.0
        return self.process_mb + self.lr_frames_mb + self.hr_frames_mb + self.encoder_mb + self.model_mb + kept

    def to_dict(self) -> dict:
        d = {k: (round(v, 1) if isinstance(v, float) else v) for k, v in asdict(self).items()}
        for name in ("device_mb", "features_mb", "features", "budget_from"):
            if d[name] is None:
                del d[name]
        if not self.features_on_device:
            del d["features_on_device"]
        d["total_mb"] = round(self.total_mb, 1)
        return d


@dataclass(frozen=True)
class Budget:
    """The ``mb`` a run plans within and ``why``: None where the user gave it, else how the default was made."""

    mb: int
    why: str | None = None

    def named(self) -> str:
        """How a message names it: ``--memory-budget 3072`` (given) or ``the memory budget of 8192 MB (...)``."""
        return f"--memory-budget {self.mb}" if self.why is None else f"the memory budget of {self.mb} MB ({self.why})"


def run_budget(given_mb: int | None) -> Budget:
    """``--memory-budget`` where given, else :func:`machine_budget`."""
    return Budget(int(given_mb)) if given_mb is not None else machine_budget()


def machine_budget(total_mb: float | None = None) -> Budget:
    """The default budget: :data:`AUTO_SHARE` of the machine's memory (``total_mb``, else
    :func:`total_memory_mb`), rounded down to :data:`AUTO_STEP_MB`, within :data:`AUTO_FLOOR_MB`..
    :data:`AUTO_CAP_MB`; :data:`FALLBACK_BUDGET_MB` where that cannot be read.  The same on every run of a
    machine, whatever else runs on it at the moment."""
    total = total_memory_mb() if total_mb is None else total_mb
    if total is None:
        return Budget(FALLBACK_BUDGET_MB, "default: this system does not say how much memory it has")
    share = int(total * AUTO_SHARE) // AUTO_STEP_MB * AUTO_STEP_MB
    mb = min(max(share, AUTO_FLOOR_MB), AUTO_CAP_MB)
    bound = " (the most by default)" if mb == AUTO_CAP_MB else " (the least by default)" if mb == AUTO_FLOOR_MB else ""
    return Budget(mb, f"default: half of this machine's {total:.0f} MB{bound}")


def tiles_cost(height: int, width: int, tile: tuple[int, int] | None, overlap: int) -> float:
    """The LR pixels a frame's tiles compute (their context included) per pixel of the frame: 1.0 whole."""
    return sum((t.y1 - t.y0) * (t.x1 - t.x0) for t in tile_grid(height, width, tile, overlap)) / (height * width)


def with_features(plan: MemoryPlan, features_mb: float, device: DeviceMemory | None = None) -> MemoryPlan:
    """``plan`` with a streaming backend's kept features (``features_mb``): counted where they fit the budget
    beside it -- or, on the GPU (``device``), its free memory beside the model's -- else marked ``per-window``
    (every window then computes its frames' features)."""
    if device is None:
        fits = plan.total_mb + features_mb <= plan.budget_mb * (1.0 - MARGIN)
    else:
        fits = (plan.device_mb or 0.0) + features_mb <= device.limit_mb
    return replace(plan, features_mb=features_mb, features="kept" if fits else "per-window",
                   features_on_device=device is not None)


def model_mb(pixels: int, batch: int, model: ModelMemory = ModelMemory()) -> float:
    return model.fixed_mb + model.bytes_per_pixel * pixels * max(batch, 1) / MB


def item_mb(pixels: int, batch: int, num_frame: int, scale: int, model: ModelMemory = ModelMemory()) -> float:
    """The model's working memory for ``batch`` items of ``pixels`` LR pixels, plus the float32 arrays of
    them in flight around it: the input (T, 3) built, queued and being run; the output (3, s*s) returned,
    queued, being cropped, and two temporaries of the colour conversion."""
    return model_mb(pixels, batch, model) + flight_mb(pixels, batch, num_frame, scale)


def flight_mb(pixels: int, batch: int, num_frame: int, scale: int) -> float:
    """The float32 arrays of ``batch`` items in flight around the model (see :func:`item_mb`)."""
    flight = (BATCHES_IN_FLIGHT * num_frame * 3 + RESULTS_IN_FLIGHT * 3 * scale * scale) * 4
    return flight * pixels * max(batch, 1) / MB


def budget_for(total_mb: float) -> int:
    """The smallest ``--memory-budget`` (a multiple of 64 MB) whose planned share holds ``total_mb``."""
    return int(math.ceil(total_mb / (1.0 - MARGIN) / 64.0)) * 64


def plan_memory(*, budget_mb: float, height: int, width: int, scale: int, num_frame: int, batch: int,
                queue: int, overlap: int, encoder_mb: float, hr_bytes_per_pixel: float = 3.0,
                hr_queue: int | None = None,
                tile: int | tuple[int, int] | None = None, device: DeviceMemory | None = None,
                extra_lr_frames: int = 0, model: ModelMemory = ModelMemory()) -> MemoryPlan:
    """The tile for an ``height x width`` LR source under ``budget_mb`` (see the module's docstring): of the
    tiles whose working memory fits what is left, the one that computes the fewest pixels in all.

    ``hr_bytes_per_pixel``: bytes of one output pixel's integer 4:4:4 planes (3 for 8-bit, 6 for 16-bit).
    ``tile``: a side or ``(h, w)`` the user chose (checked, not chosen), 0 for whole frames, None: automatic.
    ``device``: the GPU memory the model works in (None: host memory, within the budget).
    ``hr_queue``: finished frames waiting for the encoder (None: ``queue``).
    ``extra_lr_frames``: LR frames held beyond the window stage's and its queue's (the scene-cut stage's).
    ``model``: the model's working memory per item in host memory (:class:`ModelMemory`).
    Raises :class:`MemoryBudgetError` naming what would fit when the run cannot fit the budget.
    """
    r = num_frame // 2
    lr_frame = 3 * 4 * height * width / MB  # float32 RGB
    lr_frames = (4 * r + 1 + queue + 1 + extra_lr_frames) * lr_frame
    hr_px = height * width * scale * scale
    hr_444 = hr_bytes_per_pixel * hr_px / MB
    # one frame assembled (4:4:4) and its subsampled copy being made, ``hr_queue`` waiting, one being encoded
    hr_frames = hr_444 + ((queue if hr_queue is None else hr_queue) + 2) * hr_444 / 2
    fixed = PROCESS_BASE_MB + lr_frames + hr_frames + encoder_mb
    left = budget_mb * (1.0 - MARGIN) - fixed

    def pixels_of(t: tuple[int, int] | None) -> int:
        return height * width if t is None else t[0] * t[1]

    def used(t: tuple[int, int] | None, b: int = batch) -> float:
        if device is None:
            return item_mb(pixels_of(t), b, num_frame, scale, model)
        return flight_mb(pixels_of(t), b, num_frame, scale)

    def fits(t: tuple[int, int] | None) -> bool:
        return used(t) <= left and (device is None or device.item_mb(pixels_of(t), batch) <= device.limit_mb)

    def done(t: tuple[int, int] | None) -> MemoryPlan:
        gpu = None if device is None else device.item_mb(pixels_of(t), batch)
        return MemoryPlan(budget_mb, PROCESS_BASE_MB, lr_frames, hr_frames, encoder_mb, used(t), t, True, gpu)

    if tile is not None:
        chosen = None if tile == 0 else _clip(tile, height, width)
        if fits(chosen):
            return done(chosen)
        what = "--tile 0 (whole frames)" if tile == 0 else f"--tile {_side(tile)}"
        if device is not None and used(chosen) <= left:
            raise MemoryBudgetError(_gpu_too_small(device, chosen or (height, width), batch, what))
        raise MemoryBudgetError(_too_small(budget_mb, fixed + used(chosen), f"{what} at --batch {batch}",
                                           "or a smaller --tile (or none: automatic)"))
    if fits(None):
        return done(None)
    per_pixel = _per_pixel(num_frame, scale, model) - (0 if device is None else model.bytes_per_pixel)
    pixels = max(left - used((0, 0)), 0.0) * MB / (per_pixel * max(batch, 1))
    if device is not None:
        pixels = min(pixels, device.pixels(batch))
    floor = max(MIN_TILE, 2 * overlap + 16)
    best = best_tile(height, width, pixels, overlap, floor)
    if best is not None and fits(best):
        return done(best)
    smallest = (min(floor, height), min(floor, width))
    if device is not None and used(smallest) <= left:  # the host has room: the GPU has not
        raise MemoryBudgetError(_gpu_too_small(device, smallest, batch, f"{smallest[0]}x{smallest[1]} tiles"))
    alt = ""
    if batch > 1:
        alt = f", or --batch 1 (needs --memory-budget {budget_for(fixed + used(smallest, 1))})"
    frames = lr_frames + hr_frames + encoder_mb
    if frames > fixed / 2:
        alt += f", or a smaller source and output (their frames in flight and the encoder take {frames:.0f} MB)"
    raise MemoryBudgetError(_too_small(budget_mb, fixed + used(smallest), f"{smallest[0]}x{smallest[1]} tiles "
                                       f"at --batch {batch}", alt.lstrip(", ") or "or a smaller source"))


def _gpu_too_small(device: DeviceMemory, tile: tuple[int, int], batch: int, what: str) -> str:
    need = device.item_mb(tile[0] * tile[1], batch)
    return (f"the GPU ({device.name}) has {device.free_mb:.0f} MB free: {what} at --batch {batch} need about "
            f"{need:.0f} MB of it; give a smaller --tile or --batch, or free the GPU")


def _per_pixel(num_frame: int, scale: int, model: ModelMemory) -> float:
    return model.bytes_per_pixel + (BATCHES_IN_FLIGHT * num_frame * 3 + RESULTS_IN_FLIGHT * 3 * scale * scale) * 4


def _clip(tile: int | tuple[int, int], height: int, width: int) -> tuple[int, int] | None:
    """The LR region one item really has (a side at least the frame's own: no cut there); None: whole."""
    th, tw = (tile, tile) if isinstance(tile, int) else tile
    if th >= height and tw >= width:
        return None
    return min(th, height), min(tw, width)


def _side(tile: int | tuple[int, int]) -> str:
    return str(tile) if isinstance(tile, int) else f"{tile[0]}x{tile[1]}"


def _too_small(budget_mb: float, need_mb: float, setting: str, alternative: str) -> str:
    return (f"--memory-budget {budget_mb:.0f} MB is too small for this run: {setting} needs about "
            f"{need_mb:.0f} MB; give --memory-budget {budget_for(need_mb)} {alternative}")
