"""MPEG-2's display shape: a sequence header codes square samples or a display aspect ratio of 4:3, 16:9 or 2.21:1
(``aspect_ratio_information``, ISO/IEC 13818-2 6.3.3), nothing else.  FFmpeg's encoder takes the code nearest the
sample aspect ratio it is given without a word (libavcodec/mpeg12enc.c), so an anamorphic 1.85:1 source was shown
as 16:9, 4% narrower, and a 2.39:1 one as 2.21:1.  vsr writes the same nearest code (a DVD's 4:3 and 16:9 are
what its players and authoring tools expect, and an ITU-R BT.601 frame's 15:11 is 4:3 to them) and says so in one
line where it is not the source's shape.  Square samples are always coded exactly.
"""

from __future__ import annotations

from fractions import Fraction

from vsr.video.resize import sample_aspect

CODED = {2: Fraction(4, 3), 3: Fraction(16, 9), 4: Fraction(221, 100)}
NAMES = {Fraction(4, 3): "4:3", Fraction(16, 9): "16:9", Fraction(221, 100): "2.21:1"}


def written_aspect(sar: Fraction, width: int, height: int) -> Fraction:
    """The display aspect ratio of a ``width`` x ``height`` MPEG-2 stream encoded with ``sar``, as FFmpeg's encoder
    codes it: the code whose sample aspect ratio is nearest, a later one on a tie (16:9 for a square 1920x1080)."""
    best, shown = abs(sar - 1), Fraction(width, height)
    for dar in CODED.values():
        error = abs(sar - dar * height / width)
        if error <= best:
            best, shown = error, dar
    return shown


def _said(dar: Fraction) -> str:
    return NAMES.get(dar, f"{float(dar):.2f}:1")


def aspect_warnings(codec: str, info, width: int, height: int) -> list[str]:
    """The line that says an MPEG-2 output of ``width`` x ``height`` from ``info``'s frames is shown at another
    display aspect ratio than the source's (none where it is the same)."""
    if codec != "mpeg2video":
        return []
    sar = sample_aspect(info.sample_aspect_ratio, info.width, info.height, width, height) or Fraction(1)
    want = sar * width / height
    got = written_aspect(sar, width, height)
    if got == want:
        return []
    change = float(got / want - 1) * 100
    how = f"{abs(change):.0f}% {'wider' if change > 0 else 'narrower'}" if abs(change) >= 1 else "within 1%"
    return [f"MPEG-2 codes square samples or a display of 4:3, 16:9 or 2.21:1 only: the source's {_said(want)} is "
            f"shown as {_said(got)} ({how}); -c libx264 (.ts, .mkv, .mp4) keeps its shape"]


__all__ = ["aspect_warnings", "written_aspect"]
