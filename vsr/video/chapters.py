"""A source's chapters (Matroska, mp4/mov, ...), written into the output at the times the output plays them.

An untrimmed output keeps the source's timestamps, so its chapters are the source's as they are, set before the
header (mp4 then gets its QuickTime chapter track).  A trimmed one (``--frames A:B``, a batch job's join of
such a run) starts where frame A was: its chapters move back by frame A's time, those before the span are left
out, the one running at its start starts at 0, and none runs past its end; they are set once the span is known, before the file
is closed (Matroska and mp4 both write chapters given then).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from vsr.video.reading import tags


@dataclass(frozen=True)
class Chapter:
    """One chapter: ``start`` and ``end`` in seconds of the container's timeline, its ``metadata`` (title...)."""

    start: Fraction
    end: Fraction
    metadata: tuple[tuple[str, str], ...] = ()


def read_chapters(container) -> tuple[Chapter, ...]:
    """The chapters of an opened PyAV input container, in order."""
    out = []
    for c in container.chapters():
        tb = Fraction(c["time_base"])
        out.append(Chapter(c["start"] * tb, c["end"] * tb, tuple(sorted(tags(c.get("metadata", {})).items()))))
    return tuple(sorted(out, key=lambda c: c.start))


def as_written(chapters: tuple[Chapter, ...], offset: Fraction = Fraction(0), span: tuple | None = None,
               time_base: Fraction = Fraction(1, 1_000_000_000)) -> list[dict]:
    """``chapters`` for PyAV's ``set_chapters``: moved back by ``offset`` seconds, kept to ``span`` (start, end
    in source seconds; None: all), in ``time_base`` (nanoseconds: Matroska's own unit; each muxer converts)."""
    out = []
    for c in chapters:
        start, end = c.start - offset, c.end - offset
        if span is not None:
            lo, hi = span
            if c.end <= lo or c.start >= hi:
                continue
            # one already running at the span's start runs from the output's start (0, as the source's first
            # chapter does, audio priming and all); none runs past the span's end
            start, end = (start if c.start >= lo else Fraction(0)), min(c.end, hi) - offset
        out.append({"id": len(out) + 1, "start": round(start / time_base), "end": round(end / time_base),
                    "time_base": time_base, "metadata": dict(c.metadata)})
    return out
