"""The ``Sink`` protocol: what the runner needs from any frame sink (PNG folder or video file)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from vsr.video.planes import PlaneFormat


@runtime_checkable
class Sink(Protocol):
    """Takes finished output frames in order and makes them the output only on :meth:`commit`.

    A frame's life: ``new_planes(h, w)`` -> regions filled with the integer planes of the format :attr:`planes`
    (``plane_views``, ``region``) -> ``finish(planes)`` (post stage) -> ``write(finished, pts, duration)`` (encode
    stage).  ``planes``: worked out once, when the sink opens (pixel format, colour, chroma siting); the runner
    hands it to the post stage and to a backend that makes the planes itself.
    """

    pix_fmt: str
    planes: PlaneFormat

    def plane_dtype(self) -> np.dtype:
        """dtype of the planes :meth:`new_planes` makes (uint8, or uint16 for deeper formats)."""

    def memory_estimate_mb(self) -> float:
        """Peak memory the sink itself holds (an encoder's lookahead, reference frames), for the memory plan."""

    def new_planes(self, height: int, width: int):
        """Room for one output frame's planes, filled region by region: an array ``(3, height, width)``, or an
        object whose ``views`` are its three planes (chroma subsampled where the format's is)."""

    def finish(self, planes, pts: int | None = None):
        """A complete frame from :meth:`new_planes` (of the source's frame at ``pts``, whose alpha the sink takes)
        -> what :meth:`write` takes."""

    def write(self, planes, pts: int, duration: int) -> None:
        """Write one frame (``pts``/``duration`` in the source's time base) to the temporary output."""

    def end(self) -> None:
        """After the last :meth:`write`: flush what the encoder holds and close the temporary output (once; the
        encode stage calls it, so its time is the run's).  A sink with nothing to flush does nothing."""

    def commit(self) -> None:
        """Finish the temporary output (:meth:`end`, where not done yet) and move it to the output path."""

    def abort(self) -> None:
        """Remove the temporary output (safe to call at any point, also after a failed open)."""
