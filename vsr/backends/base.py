"""What every inference backend declares and does.

A backend turns a batch of LR windows into HR centre frames:

    infer(x: float32 (N, T, 3, H, W) in [0, 1]) -> float32 (N, 3, 4H, 4W)

H and W may be any size >= 1: a backend pads to its shape bucket (a multiple of 4 at least) and crops back.
Output values are *not* clipped (callers clip when they quantise).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np


@dataclass(frozen=True)
class TensorSpec:
    """A declared tensor: name, shape (``None`` or a string for a dynamic dimension) and dtype."""

    name: str
    shape: tuple
    dtype: str = "float32"


class Backend(Protocol):
    name: str
    num_frame: int
    scale: int
    padding: str  # what stands in for frames beyond the clip ends (see vsr.pipeline.windows.window_indices)

    def prepare(self, height: int, width: int, batch: int) -> None:
        """Build or load everything the first ``infer`` of ``(batch, T, 3, height, width)`` would; idempotent."""
        ...

    def input_spec(self) -> TensorSpec: ...

    def output_spec(self) -> TensorSpec: ...

    def infer(self, x: np.ndarray) -> np.ndarray: ...

    def timings(self) -> dict[str, float]:
        """Seconds spent per internal step since creation (e.g. per subgraph); empty if not tracked."""
        ...


class ModelBackend:
    """Shared part of the backends that run an EDVR model: declared I/O and step timings.

    Subclasses set ``name`` and ``_times`` (step name -> seconds) and implement ``infer``.
    """

    name = "model"
    scale = 4

    def __init__(self, config):
        self.config = config
        self.num_frame = config.num_frame
        self._times: dict[str, float] = {}

    @property
    def padding(self) -> str:
        return self.config.padding

    def prepare(self, height: int, width: int, batch: int) -> None:
        """Nothing to build ahead here: the first ``infer`` does it."""

    def input_spec(self) -> TensorSpec:
        return TensorSpec("lr", ("N", self.num_frame, 3, "H", "W"))

    def output_spec(self) -> TensorSpec:
        return TensorSpec("hr", ("N", 3, "4H", "4W"))

    def timings(self) -> dict[str, float]:
        return dict(self._times)
