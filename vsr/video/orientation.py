"""How a video is shown: its display matrix (FFmpeg's ``AV_FRAME_DATA_DISPLAYMATRIX``: the MP4/MOV track header's
matrix, Matroska's projection pose), kept whole from source to output.

A rotation angle alone (what ``frame.rotation`` gives) loses a mirror: a front camera's or a mirrored clip's
matrix ``[-1 0; 0 1]`` reads as 180 degrees, and written back as a rotation of 180 it shows the picture upside
down.  The matrix is 9 ``int32`` (16.16 fixed point, the last column 2.30) in FFmpeg's order; its translation
(pixels, 16.16) is scaled with the picture.
"""

from __future__ import annotations

import struct

from vsr.video import side_data

__all__ = ["HOLDERS", "IDENTITY", "not_kept", "output_matrix", "read_matrix"]

IDENTITY = (1 << 16, 0, 0, 0, 1 << 16, 0, 0, 0, 1 << 30)
_LAYOUT = "=9i"  # native-endian int32, as FFmpeg keeps it
# the muxers that write a stream's display matrix (MP4/MOV's track header, Matroska's projection pose); MPEG-TS,
# AVI, NUT, Y4M, GIF, APNG, WebP and PNG frames have no field for it
HOLDERS = ("mp4", "mov", "ipod", "3gp", "3g2", "psp", "ismv", "f4v", "matroska", "webm")


def read_matrix(frame) -> tuple[int, ...] | None:
    """The display matrix a decoded frame carries, None where it has none (or the identity)."""
    for sd in side_data.entries(frame):
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


def not_kept(rotation: int, matrix: tuple[int, ...] | None, where: str) -> str | None:
    """The line that says ``where`` ("this mpegts output", "PNG frames") cannot show the picture as the source
    says (its ``rotation`` in degrees, its display ``matrix``), or None where the source is shown as stored."""
    if matrix is None and not rotation:
        return None
    mirrored = matrix is not None and matrix[0] * matrix[4] - matrix[1] * matrix[3] < 0
    what = "mirror" if mirrored else f"rotation ({rotation} degrees)"
    return (f"the source's display {what} cannot be written into {where}: players will show the picture as "
            "stored, not as the source is shown (.mp4, .mov, .mkv and .webm keep it)")
