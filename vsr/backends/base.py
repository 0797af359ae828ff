"""What every inference backend declares and does.

A backend turns a batch of LR windows into HR centre frames:

    infer(x: float32 (N, T, 3, H, W) in [0, 1]) -> float32 (N, 3, 4H, 4W)

H and W may be any size >= 1: a backend pads to the shape bucket of its :class:`~vsr.backends.buckets.BucketPolicy`
and crops back.  Output values are *not* clipped (callers clip when they quantise).

A backend that ``keeps_features`` also takes the windows of a run with each input frame's identity
(:class:`FrameKeys`: source frame index, tile) and computes each (frame, tile)'s features once, keeping them while
a later window may need them::

    infer_stream(x: float32 (N, T, 3, H, W), keys: FrameKeys) -> float32 (N, 3, 4H, 4W)

Its output equals ``infer(x)``'s (within float rounding).  A backend that does not stream has only ``infer``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Protocol

import numpy as np

from vsr.backends.buckets import BucketPolicy
from vsr.errors import InputError
from vsr.report.sample import StepStats

if TYPE_CHECKING:
    from vsr.video.planes import PlaneFormat


# What Backend.prepare says it is doing, in the order the steps come (a backend takes those it has).
PHASES = ("exporting ONNX", "building plan", "loading sessions", "warming up")


def announce(phase: Callable[[str], None] | None, name: str) -> None:
    """``phase(name)`` where a caller listens."""
    if phase is not None:
        phase(name)


@dataclass(frozen=True)
class FrameKeys:
    """Which source frame each input frame of an ``infer_stream`` call is.

    ``frames[n][t]``: the source frame index of frame ``t`` of item ``n``; ``tiles[n]``: item ``n``'s tile (its
    region of the frame, the same in every call of the stream); ``keep_from``: no later call of the stream has a
    frame below this one (their features may go); ``stream``: the run the calls belong to (features are
    kept within one stream only).
    """

    stream: int
    frames: tuple[tuple[int, ...], ...]
    tiles: tuple[int, ...]
    keep_from: int

    def keys(self) -> list[list[tuple[int, int]]]:
        """``(frame, tile)`` of every input frame, ``[n][t]``."""
        return [[(f, tile) for f in row] for row, tile in zip(self.frames, self.tiles)]


def pyramid_nbytes(num_feat: int, height: int, width: int) -> int:
    """Bytes of one frame's EDVR feature pyramid at ``height x width``: L1, L2 and L3, float32 (the stride-2
    convolutions round up)."""
    px = 0
    h, w = height, width
    for _ in range(3):
        px += h * w
        h, w = -(-h // 2), -(-w // 2)
    return 4 * num_feat * px


@dataclass(frozen=True)
class TensorSpec:
    """A declared tensor: name, shape (``None`` or a string for a dynamic dimension) and dtype."""

    name: str
    shape: tuple
    dtype: str = "float32"


# The one-off build steps (a backend's report names them "build:...") whose results the engine cache keeps: the
# ONNX export, the plan and its int8 calibration.  A later run of the same model, size and settings finds them
# there and does not pay them again.
CACHED_BUILDS = ("build:export", "build:plan")


class Pending:
    """An inference that has been queued: :meth:`result` waits for it and returns its output (the same object on
    every call).  A backend that computes on a device returns one from ``submit`` before the device is done, so
    its caller can queue the next batch first (the device never idles while the host prepares or collects);
    every other backend's is done already (:meth:`done`)."""

    def __init__(self, finish: Callable[[], object]):
        self._finish: Callable[[], object] | None = finish
        self._value = None

    @classmethod
    def done(cls, value) -> "Pending":
        pending = cls(lambda: value)
        pending.result()
        return pending

    @property
    def finished(self) -> bool:
        return self._finish is None

    def result(self):
        if self._finish is not None:
            finish, self._finish = self._finish, None
            self._value = finish()
        return self._value


class Backend(Protocol):
    name: str
    num_frame: int
    scale: int
    padding: str  # how windows are filled past the clip's ends (the model config's, e.g. "reflection_circle")
    keeps_features: bool  # takes infer_stream: each frame's features computed once per stream

    def input_spec(self) -> TensorSpec: ...

    def output_spec(self) -> TensorSpec: ...

    def infer(self, x: np.ndarray) -> np.ndarray: ...

    def infer_stream(self, x: np.ndarray, keys: FrameKeys) -> np.ndarray:
        """``infer(x)``, each (frame, tile)'s features computed once per stream (only where ``keeps_features``)."""
        ...

    def feature_nbytes(self, height: int, width: int) -> int:
        """Bytes of the features kept for one (frame, tile) of ``height x width`` (0 where it does not stream)."""
        ...

    def prepare(self, height: int, width: int, batch: int, phase: Callable[[str], None] | None = None,
                planes: PlaneFormat | None = None) -> None:
        """Build what the first ``infer`` of ``(batch, T, 3, height, width)`` would (export, plan, sessions).

        Idempotent; lets a caller keep this warm-up out of its per-frame clock.  ``phase(name)`` is called as
        each step starts (:data:`PHASES`' names), so a caller can show what the wait is for.  ``planes``: the
        sink's plane format (``sink.planes``); a backend that makes those planes itself (the CUDA runtime, on its
        device) returns them from ``infer`` from now on, as a :class:`~vsr.video.planes.PlaneBatch` (its
        ``facts()["download"]`` says so); None: RGB; every other backend ignores it (the post stage converts).
        """
        ...

    def timings(self) -> dict[str, float]:
        """Seconds spent per internal step since creation (e.g. per subgraph); empty if not tracked."""
        ...

    def step_stats(self) -> dict[str, StepStats]:
        """Per-call records of the internal steps (calls, p50/p95, sampled intervals); empty if not kept."""
        ...


class ModelBackend:
    """Shared part of the backends that run an EDVR model: declared I/O, bucket policy and step timings.

    Subclasses set ``name`` and ``_times`` (step name -> seconds) and implement ``infer`` and ``prepare``; one that
    keeps each frame's features sets ``keeps_features`` and implements ``infer_stream``.
    """

    name = "model"
    scale = 4
    keeps_features = False

    def __init__(self, config, buckets: BucketPolicy | None = None):
        self.config = config
        self.num_frame = config.num_frame
        self.padding = config.padding
        self.buckets = buckets if buckets is not None else BucketPolicy.load()
        self._times: dict[str, float] = {}

    def input_spec(self) -> TensorSpec:
        return TensorSpec("lr", ("N", self.num_frame, 3, "H", "W"))

    def output_spec(self) -> TensorSpec:
        return TensorSpec("hr", ("N", 3, "4H", "4W"))

    def timings(self) -> dict[str, float]:
        return dict(self._times)

    def step_stats(self) -> dict[str, StepStats]:
        return {}

    def facts(self) -> dict:
        """What the run's report should say about how this backend computes (e.g. the int8 ISA)."""
        return {"features": "per-frame" if self.keeps_features else "per-window"}

    def infer_stream(self, x: np.ndarray, keys: FrameKeys) -> np.ndarray:
        return self.infer(x)  # nothing kept: every window computes its frames' features

    def submit(self, x: np.ndarray, keys: FrameKeys | None = None) -> Pending:
        """``infer_stream(x, keys)`` (``infer(x)`` without keys) queued: a :class:`Pending`.  Here it is computed
        at once; the CUDA runtime queues it on its device and returns before the device is done."""
        return Pending.done(self.infer(x) if keys is None else self.infer_stream(x, keys))

    def feature_nbytes(self, height: int, width: int) -> int:
        if not self.keeps_features:
            return 0
        return pyramid_nbytes(self.config.num_feat, *self.buckets.bucket(height, width))

    def check_keys(self, x: np.ndarray, keys: FrameKeys) -> None:
        """An InputError unless ``keys`` name the ``(N, T)`` frames of ``x``."""
        if len(keys.frames) != x.shape[0] or any(len(row) != x.shape[1] for row in keys.frames):
            raise InputError(f"frame keys for {len(keys.frames)} items do not match the windows {x.shape}")

    def check_input(self, x: np.ndarray) -> np.ndarray:
        """``x`` as contiguous float32 ``(N, T, 3, H, W)``; an InputError for any other shape."""
        x = np.ascontiguousarray(x, dtype=np.float32)
        if x.ndim != 5 or x.shape[1] != self.num_frame or x.shape[2] != 3:
            raise InputError(f"expected (N, {self.num_frame}, 3, H, W), got {x.shape}")
        return x
