"""A decoded frame's side data entries, whichever PyAV reads them: ``frame.side_data`` iterates over the entries
up to PyAV 18.1.0 and over their types (a mapping, an entry of each type as its values) from 18.1.1.

vsr asks for PyAV 18.1.1 or later (pyproject.toml): 18.1.0 raises ``ValueError`` for a whole frame's side data
where one entry is of a type newer than its enum (FFmpeg 8's ``EXIF``, which a JPEG or PNG with EXIF carries
beside its ``DISPLAYMATRIX``), where 18.1.1 names such a type ``UNKNOWN_<value>``."""

from __future__ import annotations


def entries(frame) -> list:
    """The frame's side data (``av.sidedata.SideData``: ``.type``, ``bytes()``), in the decoder's order, all of
    them: taken by position, as both read them (18.1.1's iteration and length count each type once, where a
    frame can hold several entries of one, as two unregistered SEI messages)."""
    container, out = frame.side_data, []
    while True:
        try:
            out.append(container[len(out)])
        except IndexError:
            return out
