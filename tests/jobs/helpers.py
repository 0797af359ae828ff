"""Test helpers for the jobs tests: a cheap window-sensitive backend."""

from __future__ import annotations

import numpy as np


class WindowBackend:
    """A backend with EDVR's interface (3-frame windows, reflection padding, x4) that costs almost nothing:
    output = nearest-neighbour x4 of a weighted sum of the window's frames, with a different weight per position,
    so a window holding any other frame (a wrong halo, a wrong decode) gives other pixels.  Counts its calls.

    EDVR on this 2-core machine takes seconds per frame; what chunking must keep exact is which frames make each
    window, not the model.
    """

    name = "window-test"
    num_frame = 3
    scale = 4
    padding = "reflection_circle"

    def __init__(self):
        self.calls = 0

    def prepare(self, height, width, batch, phase=None, planes=None):
        pass

    def infer(self, x: np.ndarray) -> np.ndarray:
        self.calls += 1
        w = np.array([0.2, 0.5, 0.3], np.float32)[: x.shape[1]]
        y = np.tensordot(x, w, axes=([1], [0]))  # (N, 3, H, W)
        y = y + 0.05 * np.sin(37.0 * x[:, 0])  # the first frame of the window leaves its own trace
        return np.repeat(np.repeat(y, 4, axis=2), 4, axis=3).astype(np.float32)

    def timings(self):
        return {}

    def step_stats(self):
        return {}




def added_ids(stdout: str) -> list[str]:
    """The job ids ``vsr jobs add`` printed (its lines ``job N: IN -> OUT (...)``)."""
    return [line.split()[1].rstrip(":") for line in stdout.splitlines() if line.startswith("job ")]
