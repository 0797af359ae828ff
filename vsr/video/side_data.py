"""A decoded frame's side data entries, whichever PyAV reads them: ``frame.side_data`` iterates over the entries
up to PyAV 18.1.0 and over their types (a mapping, an entry of each type as its values) from 18.1.1.

PyAV up to 18.1.0 also raises ``ValueError`` for a whole frame's side data where one entry is of a type newer
than its enum (FFmpeg 8's ``EXIF``, which a JPEG or PNG with EXIF carries beside its ``DISPLAYMATRIX``); 18.1.1
names such a type ``UNKNOWN_<value>``.  The same is given to 18.1.0 here, on import."""

from __future__ import annotations

from av.sidedata.sidedata import Type


def _unknown(cls, value):
    """18.1.1's ``Type._missing_``: a type FFmpeg added after PyAV listed its types, as ``UNKNOWN_<value>``."""
    if not isinstance(value, int):
        return None
    member = object.__new__(cls)
    member._name_ = f"UNKNOWN_{value}"
    member._value_ = value
    return cls._value2member_map_.setdefault(value, member)


if "_missing_" not in Type.__dict__:  # (PyAV 18.1.0 and before)
    Type._missing_ = classmethod(_unknown)


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
