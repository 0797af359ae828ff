"""Activation scales of int8 segments, fed as graph inputs at every run: static, or following the frames.

Every u8 activation ``T`` of an int8 segment (:mod:`vsr.quant.rewrite`) reads its scale and zero point from two
scalars this table owns (bound once to the ONNX Runtime session, updated in place) and writes back its largest
and smallest code.  Policies:

``static``   the calibration range, never changed (codes outside it saturate).
``runtime``  predicted: each window uses the range measured on the previous one, widened by ``MARGIN``.  A code
             at the end of the u8 range means the prediction was short (saturation): the range is widened and
             the segment run again (at most ``MAX_PASSES`` runs), so a saturated result is never kept.
``exact``    ``runtime``, and also run again while some tensor uses less than ``EXACT_FILL`` of its range: each
             window gets (close to) its own exact ranges, at the price of extra runs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

log = logging.getLogger(__name__)

POLICIES = ("runtime", "static", "exact")
MARGIN = 1.25
MAX_PASSES = 4
EXACT_FILL = 0.6
WIDEN = 4.0


def u8_params(lo: float, hi: float, relu: bool = False) -> tuple[float, int]:
    """Asymmetric u8 ``(scale, zero point)`` covering ``[lo, hi]`` and 0 (``relu``: zero point 0)."""
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    if relu:
        lo = 0.0
    scale = max(hi - lo, 1e-8) / 255.0
    return scale, int(np.clip(round(-lo / scale), 0, 255))


@dataclass
class TensorScale:
    """One activation: its calibration range, the range in use, and the arrays bound to the sessions."""

    calib: tuple[float, float]
    relu: bool
    lo: float = 0.0
    hi: float = 0.0
    scale: np.ndarray = field(default_factory=lambda: np.ones((), np.float32))
    zero: np.ndarray = field(default_factory=lambda: np.zeros((), np.uint8))

    def set(self, lo: float, hi: float) -> None:
        self.lo, self.hi = min(lo, 0.0), max(hi, 0.0)
        s, z = u8_params(self.lo, self.hi, self.relu)
        self.scale[...] = s
        self.zero[...] = z

    def observe(self, qmax: int, qmin: int, policy: str) -> bool:
        """Read the codes a run wrote; set the range for the next run.  True: run again (saturated / loose)."""
        s, z = float(self.scale), int(self.zero)
        sat_hi, sat_lo = qmax == 255 and self.hi > 0, qmin == 0 and z > 0
        if sat_hi or sat_lo:
            self.set(self.lo * WIDEN if sat_lo else self.lo, self.hi * WIDEN if sat_hi else self.hi)
            return True
        lo, hi = (qmin - z) * s, (qmax - z) * s
        floor_lo, floor_hi = self.calib[0] / 64.0, self.calib[1] / 64.0
        loose = policy == "exact" and (hi < EXACT_FILL * self.hi or lo > EXACT_FILL * self.lo)
        self.set(min(lo * MARGIN, floor_lo), max(hi * MARGIN, floor_hi))
        return loose


class ScaleTable:
    """The scales of every int8 activation of a plan, shared by its segments; ``policy`` as in the docstring."""

    def __init__(self, policy: str = "runtime"):
        if policy not in POLICIES:
            raise ValueError(f"int8 scales {policy!r}: choose from {', '.join(POLICIES)}")
        self.policy = policy
        self.tensors: dict[str, TensorScale] = {}
        self.passes = 0  # segment runs, including re-runs
        self.reruns = 0
        self.held = False  # a warm-up run: no re-runs, nothing learnt (its input is not a frame)

    def add(self, name: str, lo: float, hi: float, relu: bool) -> TensorScale:
        t = self.tensors.get(name)
        if t is None:
            t = self.tensors[name] = TensorScale(calib=(float(lo), float(hi)), relu=relu)
            t.set(lo, hi)
        return t

    def reset(self) -> None:
        """Back to the calibration ranges (after a warm-up run on zeros, say)."""
        for t in self.tensors.values():
            t.set(*t.calib)

    def after_run(self, names: list[str], qmax: list[np.ndarray], qmin: list[np.ndarray]) -> bool:
        """Observe one segment run; True when it must run again."""
        if self.held:
            return False
        self.passes += 1
        if self.policy == "static":
            return False
        again = False
        for name, hi, lo in zip(names, qmax, qmin):
            again |= self.tensors[name].observe(int(hi), int(lo), self.policy)
        return again
