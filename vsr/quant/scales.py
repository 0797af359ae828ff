"""Activation scales of int8 segments, fed as graph inputs at every run: static, or following the frames.

Every u8 activation ``T`` of an int8 segment (:mod:`vsr.quant.rewrite`) reads its scale and zero point from two
scalars this table owns (bound once to the ONNX Runtime session, updated in place) and writes back its largest
and smallest code.  Policies:

``static``   the calibration range, never changed (codes outside it saturate).
``runtime``  predicted (:class:`ScaleRule`, ``configs/quant/scales.toml``): a window's range is the widest of the
             ranges measured on the last ``memory`` windows, times ``margin``; a stream's or a scene's first
             window, with nothing measured yet, starts from the calibration range times ``start``.  A code at
             either end of the u8 range means the prediction was short (saturation): the saturated side is
             widened ``widen``-fold and the segment runs again until no code saturates, so a saturated result
             is never kept; where that prediction came from measured windows, the tensor's margin then grows
             by the factor it fell short, for ``memory`` windows.
``exact``    ``runtime``, and also run again while some tensor uses less than ``EXACT_FILL`` of its range: each
             window gets (close to) its own exact ranges, at the price of extra runs.

Ranges are followed per *context* (:meth:`ScaleTable.select`: the tiles of a call, each its own picture), and a
context starts again from ``start`` at a scene cut.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Callable, Hashable

import numpy as np

from vsr.errors import BackendError, ConfigError

log = logging.getLogger(__name__)

POLICIES = ("runtime", "static", "exact")
EXACT_FILL = 0.6


@dataclass(frozen=True)
class ScaleRule:
    """How run-time scales follow the frames; the values in ``configs/quant/scales.toml`` say where they were
    measured (docs/benchmarks.md, issue 33)."""

    margin: float = 1.4  # next window: the last ``memory`` windows' widest measured range x margin
    start: float = 2.0  # a stream's or scene's first window: the calibration range x start
    memory: int = 8  # windows the prediction looks back on, and how long a re-run's extra margin lasts
    widen: float = 4.0  # a saturated side x widen for the run again
    passes: int = 8  # runs of one segment at most; still saturated then: an error, never a saturated output

    def __post_init__(self):
        if not (self.margin >= 1 and self.start > 0 and self.memory >= 1 and self.widen > 1 and self.passes >= 2):
            raise ConfigError(f"int8 scale rule needs margin >= 1, start > 0, memory >= 1, widen > 1 and "
                              f"passes >= 2, not {self}")

    @classmethod
    def load(cls, path: str | Path | None = None) -> ScaleRule:
        """``configs/quant/scales.toml`` (or ``path``)."""
        from vsr.files import load_config

        return load_config(path, "quant/scales.toml", "int8 scale rule", lambda data: cls(
            **{f.name: (int if f.type == "int" else float)(data[f.name]) for f in fields(cls)}))


def u8_params(lo: float, hi: float, relu: bool = False, zero: int | None = None) -> tuple[float, int]:
    """Asymmetric u8 ``(scale, zero point)`` covering ``[lo, hi]`` and 0 (``relu``: zero point 0); ``zero``: the
    zero point is fixed (a constant of the graph) and the scale alone covers the range."""
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    if relu:
        lo = 0.0
    if zero is not None:
        scale = max(hi / (255 - zero) if zero < 255 else 0.0, -lo / zero if zero > 0 else 0.0, 1e-8 / 255.0)
        return scale, zero
    scale = max(hi - lo, 1e-8) / 255.0
    return scale, int(np.clip(round(-lo / scale), 0, 255))


@dataclass
class Track:
    """One tensor in one context: the range in use, the ranges measured on the last windows, the range predicted
    for this window (before any re-run widened it), and the extra margin a re-run left (for ``boost_left``
    windows)."""

    lo: float
    hi: float
    recent: deque = field(default_factory=deque)
    predicted: tuple[float, float] = (0.0, 0.0)
    boost: float = 1.0
    boost_left: int = 0


@dataclass
class TensorScale:
    """One activation: its calibration range, its track per context, and the arrays bound to the sessions."""

    calib: tuple[float, float]
    relu: bool
    first: float = 1.0  # the calibration range x first: where a context starts
    fixed_zero: int | None = None  # the zero point, where the graph holds it as a constant
    scale: np.ndarray = field(default_factory=lambda: np.ones((), np.float32))
    zero: np.ndarray = field(default_factory=lambda: np.zeros((), np.uint8))
    tracks: dict = field(default_factory=dict)
    track: Track = None  # type: ignore[assignment]

    def __post_init__(self):
        if self.track is None:
            self.use(None)

    @property
    def lo(self) -> float:
        return self.track.lo

    @property
    def hi(self) -> float:
        return self.track.hi

    def fresh(self) -> Track:
        t = Track(0.0, 0.0)
        lo, hi = self.calib[0] * self.first, self.calib[1] * self.first
        t.predicted = (min(lo, 0.0), max(hi, 0.0))
        t.lo, t.hi = t.predicted
        return t

    def use(self, context: Hashable, anew: bool = False) -> None:
        """Follow ``context`` from now on (``anew``: from its start, as after a scene cut)."""
        if anew or context not in self.tracks:
            self.tracks[context] = self.fresh()
        self.track = self.tracks[context]
        self.set(self.track.lo, self.track.hi)

    def set(self, lo: float, hi: float) -> None:
        self.track.lo, self.track.hi = min(lo, 0.0), max(hi, 0.0)
        s, z = u8_params(self.track.lo, self.track.hi, self.relu, self.fixed_zero)
        self.scale[...] = s
        self.zero[...] = z

    def saturated(self, qmax: int, qmin: int) -> tuple[bool, bool]:
        """``(low end, high end)`` reached by the codes of the last run."""
        return qmin == 0 and int(self.zero) > 0, qmax == 255 and self.hi > 0

    def measured(self, qmax: int, qmin: int) -> tuple[float, float]:
        s, z = float(self.scale), int(self.zero)
        return (qmin - z) * s, (qmax - z) * s

    def widen(self, low: bool, high: bool, factor: float) -> None:
        lo = (self.lo if self.lo < 0 else -float(self.scale)) * factor if low else self.lo
        self.set(lo, self.hi * factor if high else self.hi)

    def learn(self, lo: float, hi: float, rule: ScaleRule, rerun: bool) -> None:
        """Take a window's measured range ``[lo, hi]`` and predict the next window's."""
        t = self.track
        followed = bool(t.recent)  # this window's range was predicted from frames, not from the calibration
        t.recent.append((lo, hi))
        while len(t.recent) > rule.memory:
            t.recent.popleft()
        if rerun and followed:  # the prediction fell short: keep this tensor wider, by as much, for a while
            p_lo, p_hi = t.predicted
            short = max(lo / p_lo if p_lo < 0 else 1.0, hi / p_hi if p_hi > 0 else 1.0)
            if short > 1.0:
                t.boost, t.boost_left = max(t.boost, short), rule.memory
        elif t.boost_left:
            t.boost_left -= 1
            if not t.boost_left:
                t.boost = 1.0
        m = rule.margin * t.boost
        floor_lo, floor_hi = self.calib[0] / 64.0, self.calib[1] / 64.0
        self.set(min(min(r[0] for r in t.recent) * m, floor_lo), max(max(r[1] for r in t.recent) * m, floor_hi))
        t.predicted = (t.lo, t.hi)


class ScaleTable:
    """The scales of every int8 activation of a plan, shared by its segments; ``policy`` as in the docstring.

    ``recorder(names, ranges)``, where set, hears every window's measured ranges (a run that kept its output)."""

    def __init__(self, policy: str = "runtime", rule: ScaleRule | None = None):
        if policy not in POLICIES:
            raise ValueError(f"int8 scales {policy!r}: choose from {', '.join(POLICIES)}")
        self.policy = policy
        self.rule = rule or ScaleRule.load()
        self.tensors: dict[str, TensorScale] = {}
        self.context: Hashable = None
        self.passes = 0  # segment runs, including re-runs
        self.reruns = 0
        self.held = False  # a warm-up run: no re-runs, nothing learnt (its input is not a frame)
        self.recorder: Callable[[list[str], list[tuple[float, float]]], None] | None = None

    def add(self, name: str, lo: float, hi: float, relu: bool, zero: int | None = None) -> TensorScale:
        t = self.tensors.get(name)
        if t is None:
            first = 1.0 if self.policy == "static" else self.rule.start
            t = self.tensors[name] = TensorScale(calib=(float(lo), float(hi)), relu=relu, first=first,
                                                 fixed_zero=zero)
            t.use(self.context)
        return t

    def select(self, context: Hashable, anew: bool = False) -> None:
        """Follow ``context`` (the tiles of a call); ``anew``: a new scene, start it from ``start``."""
        self.context = context
        if self.policy == "static":
            return
        for t in self.tensors.values():
            t.use(context, anew)

    def reset(self) -> None:
        """Every context back to its start (the calibration ranges x ``start``)."""
        for t in self.tensors.values():
            t.tracks.clear()
            t.use(self.context)

    def after_run(self, names: list[str], qmax: list[np.ndarray], qmin: list[np.ndarray], passes: int = 1) -> bool:
        """Observe one run of a segment, its ``passes``-th this window; True when it must run again."""
        if self.held:
            return False
        self.passes += 1
        if self.policy == "static":
            return False
        ts = [self.tensors[n] for n in names]
        codes = [(int(hi), int(lo)) for hi, lo in zip(qmax, qmin)]
        ends = [t.saturated(*c) for t, c in zip(ts, codes)]
        if any(low or high for low, high in ends):
            if passes >= self.rule.passes:
                raise BackendError(f"int8: activations still saturate after {passes} runs with ranges widened "
                                   f"{self.rule.widen:g}-fold each time (inf or NaN in the frames?)")
            for t, (low, high) in zip(ts, ends):
                t.widen(low, high, self.rule.widen)
            return True
        ranges = [t.measured(*c) for t, c in zip(ts, codes)]
        if self.recorder is not None:
            self.recorder(names, ranges)
        loose = self.policy == "exact" and passes == 1 and any(
            hi < EXACT_FILL * t.hi or lo > EXACT_FILL * t.lo for t, (lo, hi) in zip(ts, ranges))
        for t, (lo, hi) in zip(ts, ranges):
            t.learn(lo, hi, self.rule, passes > 1)
            if loose:  # run again on this window's own range
                t.set(lo * self.rule.margin, hi * self.rule.margin)
        return loose
