"""Where the tests find real footage: the one place that knows.

The project's reference data (Vid4, REDS demo frames, short clips, the training images: ~140 MB) lives beside
the repository in ``../shared/data``, or wherever ``$VSR_DATA`` points (the same rule as
:func:`vsr.train.validate.data_root`).  A clone has none of it, so the repository ships a 2.4 MB cut of it in
``tests/fixtures/real`` (same layout, fewer files, the same pixels; what and from where: its SOURCES.md).  Each
part below is the shared one where it is, else the shipped one.  A test that needs a file of neither skips with
:data:`NEEDS_SHARED`, the one reason that says what to put where.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "tests" / "fixtures" / "real"
NEEDS_SHARED = "needs ../shared/data (or VSR_DATA): the Vid4 and training sets; see docs/install.md"


def shared_root() -> Path:
    """``$VSR_DATA``, else ``../shared/data`` beside the repository (it may not exist)."""
    env = os.environ.get("VSR_DATA")
    return Path(env) if env else REPO.parent / "shared" / "data"


SHARED = shared_root()


def _pick(part: str, shipped: str | None = None) -> Path:
    """``part`` of the shared data where it is, else its shipped cut (``shipped``: where that cut lies)."""
    return SHARED / part if (SHARED / part).is_dir() else SHIPPED / (shipped or part)


VIDEOS = _pick("videos")
EDVR_KEYS = _pick("edvr_keys")
VID4 = _pick("sequences/vid4")  # shipped: calendar LR frames 0-8 only (no GT, no city)
CALENDAR = VID4 / "calendar"
# REDS clip 000's 21 LR frames; shipped: their top-left 104x196 (rows x columns), all the tests read of them
REDS = _pick("sequences/reds_demo_000/lr", "sequences/reds_demo_000/lr_crop104x196")
TRAIN_IMAGES = SHARED / "train" / "images"  # never shipped (74 MB)


def needs(*paths: Path) -> pytest.MarkDecorator:
    """Skip unless every path exists (files of the shared data that the repository does not ship)."""
    return pytest.mark.skipif(not all(p.exists() for p in paths), reason=NEEDS_SHARED)


def need(*paths: Path) -> None:
    """:func:`needs` inside a test or fixture."""
    if not all(p.exists() for p in paths):
        pytest.skip(NEEDS_SHARED)
