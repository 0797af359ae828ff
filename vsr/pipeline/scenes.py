"""Scene cuts: which frames start a new shot, so that no temporal window mixes two shots.

The detector works in the spirit of PySceneDetect's AdaptiveDetector (which cannot be installed beside headless
OpenCV).  Each frame is shrunk to :data:`THUMB_WIDTH` pixels wide and turned to HSV.  The score of frame ``i``
is the mean absolute HSV difference to frame ``i - 1`` (0-255 scale, hue taken round the circle).  Frame ``i``
starts a new scene when its score is at least ``min_score`` and at least ``threshold`` times the mean score of
the :data:`WINDOW` frames on each side of it.  A cut is a jump that stands out from the motion around it, so
fast pans do not cut and quiet shots need a real jump.

Bounded: whether frame ``i`` starts a new scene depends only on frames ``i - CUT_CONTEXT .. i + CUT_CONTEXT - 1``
(the scores ``i - WINDOW .. i + WINDOW``, each the difference of two frames).  A chunked run that decodes
:data:`CUT_CONTEXT` frames beyond each end of the cut positions it must decide sees the cuts a single pass sees.
At the clip's true ends the neighbourhood is shorter: only the scores that exist count.

Thresholds live in ``configs/pipeline/scenes.toml`` (:class:`CutRule`).  Measured with
``scripts/eval_scene_cuts.py`` (docs/benchmarks.md, "Scene cuts: detector").
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator

import cv2
import numpy as np

from vsr.errors import ConfigError, InputError
from vsr.files import read_small_text

if TYPE_CHECKING:
    from vsr.video.source import SourceFrame

WINDOW = 2  # scores on each side of a candidate that make its neighbourhood mean
CUT_CONTEXT = WINDOW + 1  # frames on each side of the boundary "i - 1 | i" that decide it
THUMB_WIDTH = 128  # pixels; detail below this size does not tell shots apart any better
SCENE_MODES = ("auto", "off", "list")


@dataclass(frozen=True)
class CutRule:
    """A cut where ``score >= min_score`` and ``score >= threshold * mean(neighbour scores)``."""

    threshold: float = 3.0
    min_score: float = 15.0

    def __post_init__(self):
        if not self.threshold > 0 or not self.min_score >= 0:
            raise ConfigError(f"scene cuts need threshold > 0 and min_score >= 0, not {self}")

    @classmethod
    def load(cls, path: str | Path | None = None, threshold: float | None = None) -> CutRule:
        """``configs/pipeline/scenes.toml`` (or ``path``); ``threshold`` (e.g. ``--scene-threshold``) overrides."""
        from vsr.files import load_config

        rule = load_config(path, "pipeline/scenes.toml", "scene-cut config",
                           lambda data: cls(float(data["threshold"]), float(data["min_score"])))
        return rule if threshold is None else cls(threshold, rule.min_score)


def thumbnail(rgb: np.ndarray) -> np.ndarray:
    """Float RGB ``(3, H, W)`` in [0, 1] -> HSV ``(h, THUMB_WIDTH, 3)`` float32 on OpenCV's 8-bit scale."""
    _, h, w = rgb.shape
    tw = min(THUMB_WIDTH, w)
    th = max(1, round(h * tw / w))
    small = np.stack([cv2.resize(np.ascontiguousarray(c), (tw, th), interpolation=cv2.INTER_AREA) for c in rgb], -1)
    u8 = np.clip(small * 255.0 + 0.5, 0, 255).astype(np.uint8)
    return cv2.cvtColor(u8, cv2.COLOR_RGB2HSV).astype(np.float32)


def score(a: np.ndarray, b: np.ndarray) -> float:
    """Mean absolute difference of two :func:`thumbnail` s, averaged over H, S and V (hue round its circle of 180)."""
    d = np.abs(a - b)
    d[..., 0] = np.minimum(d[..., 0], 180.0 - d[..., 0]) * (255.0 / 90.0)  # hue: at most 90 apart -> 0-255
    return float(d.mean())


def is_cut(scores: list[float | None], k: int, rule: CutRule) -> bool:
    """Whether the frame with score ``scores[k]`` starts a new scene; ``scores`` around it (None: no frame before)."""
    s = scores[k]
    if s is None or s < rule.min_score:
        return False
    around = [x for x in scores[max(k - WINDOW, 0): k] + scores[k + 1: k + 1 + WINDOW] if x is not None]
    # no neighbour (a clip of two frames): a jump cannot be told from motion, so no cut
    return bool(around) and s >= rule.threshold * (sum(around) / len(around))


class CutDetector:
    """Source frames in index order -> each frame with whether it starts a new scene, ``WINDOW`` frames late.

    When the first frame is not frame 0, the first ``CUT_CONTEXT`` frames lack the context to decide and are
    marked False: decode that many more frames before the first cut position that matters.  ``cuts`` lists
    the frames marked True so far.
    """

    def __init__(self, rule: CutRule = CutRule()):
        self.rule = rule
        self.cuts: list[int] = []

    def mark(self, frames: Iterable[SourceFrame]) -> Iterator[tuple[SourceFrame, bool]]:
        pending: deque[SourceFrame] = deque()  # frames not yet decided
        scores: deque[float | None] = deque(maxlen=2 * WINDOW + 1)  # of the last frames, the newest last
        first = prev = None
        for f in frames:
            thumb = thumbnail(f.rgb)
            if first is None:
                first = f.index
            scores.append(None if prev is None else score(prev, thumb))
            prev = thumb
            pending.append(f)
            if len(pending) > WINDOW:
                yield self._decide(pending.popleft(), list(scores), len(scores) - 1 - WINDOW, first)
            f = None
        while pending:  # the stream ended: the last frames are decided with what exists after them
            k = len(scores) - len(pending)
            yield self._decide(pending.popleft(), list(scores), k, first)

    def _decide(self, f: SourceFrame, scores: list[float | None], k: int, first: int) -> tuple[SourceFrame, bool]:
        known = first == 0 or f.index >= first + CUT_CONTEXT
        cut = known and is_cut(scores, k, self.rule)
        if cut:
            self.cuts.append(f.index)
        return f, cut


def detect_cuts(frames: Iterable[SourceFrame], rule: CutRule = CutRule()) -> list[int]:
    """The frames of a whole clip (from frame 0) that start a new scene."""
    detector = CutDetector(rule)
    for _ in detector.mark(frames):
        pass
    return detector.cuts


def mark_listed(frames: Iterable[SourceFrame], cuts: Iterable[int]) -> Iterator[tuple[SourceFrame, bool]]:
    """Source frames -> each with whether it is one of ``cuts`` (a list given by the user)."""
    starts = frozenset(cuts)
    for f in frames:
        yield f, f.index in starts and f.index > 0
        f = None


MAX_CUT_FILE_BYTES = 64 << 20  # a frame index a line: millions of cuts


def read_cut_file(path: str | Path) -> tuple[int, ...]:
    """A text file of frame indices (each starts a new scene; whitespace or commas between, ``#`` comments)."""
    p = Path(path)
    text = read_small_text(p, MAX_CUT_FILE_BYTES, "--scene-cuts file")
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        for word in line.split("#", 1)[0].replace(",", " ").split():
            if not word.isdigit():
                raise InputError(f"{p} line {n}: {word!r} is not a frame index (0, 1, 2, ...)")
            out.append(int(word))
    return tuple(sorted(set(out)))
