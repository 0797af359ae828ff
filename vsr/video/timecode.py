"""A source's SMPTE timecode (QuickTime ``tmcd`` and the ``timecode`` tag FFmpeg reads it into, Matroska's
``TIMECODE`` tag): a trimmed output (``--frames A:B``) starts at frame A, so its timecode is the source's
plus A frames, counted as timecode counts them (drop-frame at 29.97 and 59.94: ``HH:MM:SS;FF``, two or four
frame numbers skipped each minute but every tenth).
"""

from __future__ import annotations

import re
from dataclasses import replace
from fractions import Fraction

_TC = re.compile(r"^(\d{1,2}):(\d{2}):(\d{2})([:;.,])(\d{2,3})$")
DAY_S = 24 * 3600


def _nominal(rate: Fraction) -> int:
    return int(round(rate))


def _drop(rate: Fraction) -> int:
    """Frame numbers drop-frame timecode skips a minute: 2 at 30000/1001, 4 at 60000/1001 (0: not NTSC)."""
    return {30: 2, 60: 4}.get(_nominal(rate), 0) if Fraction(rate).denominator == 1001 else 0


def to_frames(tc: str, rate: Fraction) -> tuple[int, bool] | None:
    """``HH:MM:SS:FF`` (``;`` before FF: drop-frame) -> (frames since 00:00:00:00, drop-frame), or None."""
    m = _TC.match(tc.strip())
    if m is None:
        return None
    h, mi, s, sep, f = int(m[1]), int(m[2]), int(m[3]), m[4], int(m[5])
    fps = _nominal(rate)
    if fps <= 0 or mi > 59 or s > 59 or f >= fps:
        return None
    drop = _drop(rate) if sep in ";.," else 0
    minutes = 60 * h + mi
    return (3600 * h + 60 * mi + s) * fps + f - drop * (minutes - minutes // 10), bool(drop)


def from_frames(n: int, rate: Fraction, drop_frame: bool) -> str:
    """Frames since 00:00:00:00 -> timecode (wrapping at 24 hours), drop-frame where ``drop_frame``."""
    fps = _nominal(rate)
    drop = _drop(rate) if drop_frame else 0
    if drop:
        per_10min, per_min = fps * 600 - drop * 9, fps * 60 - drop
        n %= per_10min * 6 * 24
        tens, rest = divmod(n, per_10min)
        n += drop * 9 * tens + (drop * ((rest - drop) // per_min) if rest > drop else 0)
    else:
        n %= fps * DAY_S
    f, s = n % fps, n // fps
    return f"{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}{';' if drop else ':'}{f:02d}"


def shifted(tc: str, frames: int, rate: Fraction) -> str:
    """``tc`` moved on by ``frames`` frames at ``rate`` (unchanged where it is no timecode vsr reads)."""
    got = to_frames(tc, rate)
    if got is None or not frames:
        return tc
    n, drop = got
    return from_frames(n + frames, rate, drop)


def starting_at(info, frame: int):
    """``info`` (a :class:`~vsr.video.source.VideoInfo`) with its timecode tags those of its frame ``frame``."""
    if not frame or not info.rate:
        return info

    def moved(tags: dict) -> dict:
        return {k: shifted(v, frame, info.rate) if k.lower() == "timecode" else v for k, v in tags.items()}
    return replace(info, metadata=moved(info.metadata), container_metadata=moved(info.container_metadata))
