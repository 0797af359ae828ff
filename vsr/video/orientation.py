"""How a video is shown: its display matrix (FFmpeg's ``AV_FRAME_DATA_DISPLAYMATRIX``: the MP4/MOV track header's
matrix, Matroska's projection pose), kept whole from source to output.

A rotation angle alone (what ``frame.rotation`` gives) loses a mirror: a front camera's or a mirrored clip's
matrix ``[-1 0; 0 1]`` reads as 180 degrees, and written back as a rotation of 180 it shows the picture upside
down.  The matrix is 9 ``int32`` (16.16 fixed point, the last column 2.30) in FFmpeg's order; its translation
(pixels, 16.16) is scaled with the picture.
"""

from __future__ import annotations

import struct

__all__ = ["IDENTITY", "output_matrix", "read_matrix"]

IDENTITY = (1 << 16, 0, 0, 0, 1 << 16, 0, 0, 0, 1 << 30)
_LAYOUT = "=9i"  # native-endian int32, as FFmpeg keeps it


def read_matrix(frame) -> tuple[int, ...] | None:
    """The display matrix a decoded frame carries, None where it has none (or the identity)."""
    for sd in frame.side_data:
        if sd.type.name == "DISPLAYMATRIX":
            data = bytes(sd)
            if len(data) == struct.calcsize(_LAYOUT):
                matrix = struct.unpack(_LAYOUT, data)
                return None if matrix == IDENTITY else matrix
    return None


def output_matrix(matrix: tuple[int, ...], size: tuple[int, int], out_size: tuple[int, int]) -> tuple[int, ...]:
    """``matrix`` for the output picture: its translation scaled from ``size`` (width, height) to ``out_size``."""
    m = list(matrix)
    m[6] = round(m[6] * out_size[0] / size[0])
    m[7] = round(m[7] * out_size[1] / size[1])
    return tuple(max(-(1 << 31), min((1 << 31) - 1, v)) for v in m)
