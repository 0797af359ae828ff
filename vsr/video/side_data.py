"""A decoded frame's side data entries, whichever PyAV reads them: ``frame.side_data`` iterates over the entries
up to PyAV 18.1.0 and over their types (a mapping, entries as its values) from 18.1.1."""

from __future__ import annotations


def entries(frame) -> list:
    """The frame's side data (``av.sidedata.SideData``: ``.type``, ``bytes()``), in the decoder's order."""
    container = frame.side_data
    return [item if hasattr(item, "type") else container[item] for item in container]
