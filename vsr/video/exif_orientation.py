"""A TIFF's, WebP's or PNG's EXIF orientation (tag 0x0112), read from the file's bytes, and a frame turned upright
by it.

OpenCV turns a JPEG upright (``IMREAD_COLOR``), but not a WebP or PNG read with its alpha (``IMREAD_UNCHANGED``);
its TIFF reader turns some orientations itself and fails to read the others (6, a phone's portrait: "can't read
data").  So the orientation is read here, set to 1 in the bytes OpenCV decodes, and applied by
:func:`upright` as viewers apply it, the same for every kind and depth.  A PNG's is its ``eXIf`` chunk's, before
``IDAT`` as browsers read it (:func:`png_orientation`); OpenCV's ``IMREAD_UNCHANGED`` leaves it unapplied.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from vsr.video.png_colour import chunks_before_data

__all__ = ["ORIENTATION", "orientation_of", "png_orientation", "upright"]

ORIENTATION = 0x0112


def orientation_of(data: bytearray, kind: str) -> int:
    """The EXIF orientation (1 to 8) of the ``kind`` ("TIFF" or "WebP") picture in ``data`` (or of "eXIf", a PNG's
    chunk of that type), 1 where it has none (or one out of range); ``data``'s tag is set to 1 (top-left), so that
    a decoder of it does not turn it too."""
    at = _tiff_start(data) if kind == "TIFF" else _exif_start(data, 0) if kind == "eXIf" else _webp_exif(data)
    if at is None:
        return 1
    try:
        where = _orientation_field(data, at)
    except struct.error:  # (an IFD cut short: no orientation to trust)
        return 1
    if where is None:
        return 1
    value, order = where
    orientation = struct.unpack_from(order + "H", data, value)[0]
    struct.pack_into(order + "H", data, value, 1)
    return orientation if 1 <= orientation <= 8 else 1


def _tiff_start(data: bytearray) -> int | None:
    return 0 if bytes(data[:4]) in (b"II*\x00", b"MM\x00*") else None  # (BigTIFF, II+: none read)


def _webp_exif(data: bytearray) -> int | None:
    """Where the TIFF header of a WebP's ``EXIF`` chunk starts (:func:`_exif_start`)."""
    if bytes(data[:4]) != b"RIFF" or bytes(data[8:12]) != b"WEBP":
        return None
    pos = 12
    while pos + 8 <= len(data):
        size = struct.unpack_from("<I", data, pos + 4)[0]
        if bytes(data[pos:pos + 4]) == b"EXIF":
            return _exif_start(data, pos + 8)
        pos += 8 + size + (size & 1)
    return None


def _exif_start(data: bytearray, at: int) -> int | None:
    """Where the TIFF header of EXIF data at ``at`` starts, after an ``Exif\\0\\0`` some writers put first."""
    start = at + (6 if bytes(data[at:at + 6]) == b"Exif\x00\x00" else 0)
    return start if _tiff_start(data[start:start + 4]) == 0 else None


def png_orientation(path: Path) -> int:
    """The EXIF orientation of the PNG file at ``path``: its ``eXIf`` chunk's before ``IDAT``, 1 where none."""
    return orientation_of(bytearray(chunks_before_data(path).get(b"eXIf", b"")), "eXIf")


def _orientation_field(data: bytearray, at: int) -> tuple[int, str] | None:
    """Where IFD0's orientation value is (a SHORT in its entry's value field), and the byte order; None: no tag."""
    order = "<" if data[at] == ord("I") else ">"
    ifd = at + struct.unpack_from(order + "I", data, at + 4)[0]
    count = struct.unpack_from(order + "H", data, ifd)[0]
    for k in range(count):
        entry = ifd + 2 + 12 * k
        tag, kind, n = struct.unpack_from(order + "HHI", data, entry)
        if tag == ORIENTATION:
            return (entry + 8, order) if kind == 3 and n == 1 else None
    return None


def upright(img: np.ndarray, orientation: int) -> np.ndarray:
    """``img`` (rows, columns[, channels]) as a viewer shows a picture of that EXIF ``orientation``: 2 mirrored,
    3 turned 180 degrees, 4 flipped, 5 transposed, 6 turned 90 degrees clockwise, 7 transversed, 8 turned 90
    degrees anticlockwise."""
    turned = {1: img, 2: img[:, ::-1], 3: img[::-1, ::-1], 4: img[::-1], 5: img.swapaxes(0, 1),
              6: np.rot90(img, -1), 7: img.swapaxes(0, 1)[::-1, ::-1], 8: np.rot90(img, 1)}[orientation]
    return np.ascontiguousarray(turned)
