"""Whether a video's frames lie on its frame rate's grid: a container that keeps no timestamp per frame (AVI:
one rate for the whole stream) cannot hold a variable frame rate."""

from __future__ import annotations

import functools
from fractions import Fraction
from pathlib import Path

from vsr.errors import InputError
from vsr.video.reading import open_input
from vsr.video.streams import main_video

__all__ = ["check_constant_rate"]


def check_constant_rate(path: Path, rate: Fraction, container: str, kind: str = "video") -> None:
    """InputError where the video of ``path`` (an animated WebP's frames: ``kind`` "webp") is not on its
    ``rate``'s grid (a variable frame rate), which ``container`` (one frame rate for the whole stream) cannot keep.
    Reads the packets' timestamps only, once per version of the file in a process (a batch job opens a sink per
    chunk)."""
    st = path.stat()
    off = _off_grid(str(path), st.st_mtime_ns, st.st_size, rate, kind)
    if off is not None:
        raise InputError(f"{path} has a variable frame rate (a frame at {off:.3f} s is off its {float(rate):.6g} fps "
                         f"grid), which {container} cannot keep: use a .mkv or .mp4 output")


@functools.lru_cache(maxsize=8)
def _off_grid(path: str, mtime_ns: int, size: int, rate: Fraction, kind: str = "video") -> float | None:
    """The time of the first frame of ``path`` off the grid of ``rate`` (or on a tick already taken), else None."""
    if kind == "webp":
        from vsr.video.webp_source import WEBP_TIME_BASE, frame_starts

        stamps, tb = frame_starts(Path(path)), WEBP_TIME_BASE
    else:
        with open_input(path) as c:
            st = main_video(c)
            stamps = sorted(p.pts for p in c.demux(st) if p.pts is not None and p.size)
            tb = st.time_base
    slack = float(tb * rate) + 1e-6  # one tick of the source's time base, in frames
    last = None
    for pts in stamps:
        slot = float((pts - stamps[0]) * tb * rate)
        if abs(slot - round(slot)) > slack or (last is not None and round(slot) <= last):
            return float(pts * tb)
        last = round(slot)
    return None
