"""The colour of PNG frames beyond sRGB: an HDR (PQ, HLG) or wide-gamut picture's ``cICP`` chunk (its ITU-T H.273
colour primaries and transfer, as a video stream's tags say them), and an HDR picture's ``mDCV`` (the mastering
display) and ``cLLI`` (the content light level), as PNG's third edition defines them.

PNG frames without them are sRGB to every reader, which an HDR source's PQ or HLG signal is not: shown washed out,
and read back (``vsr upscale frames/ out.mkv``) as an SDR picture.  vsr's PNG writer (OpenCV's libpng) writes no
colour chunk, so they are put in after ``IHDR`` (:func:`with_chunks`); a folder of PNG frames is read with them
(:func:`read_colour`).  FFmpeg's PNG decoder reads all three; its encoder writes ``cICP`` too (``.apng``).

An SDR frame of BT.709 or BT.601 primaries gets none: sRGB is what every viewer assumes of a video's frames, and
what vsr wrote before.
"""

from __future__ import annotations

import struct
import zlib
from fractions import Fraction
from pathlib import Path

from vsr.video.animation import png_chunks
from vsr.video.colour import RANGE_FULL, SPC_RGB, ColourSpec
from vsr.video.hdr import HDR_TRANSFERS, HdrMetadata, MasteringDisplay

SIGNATURE_AND_IHDR = 8 + 12 + 13
SDR_PRIMARIES = (1, 5, 6)  # BT.709 (sRGB's), BT.470BG, SMPTE 170M: what viewers take an untagged frame for
CHROMA, LUMINANCE = 50000, 10000  # mDCV's units: 0.00002 (chromaticity), 0.0001 cd/m2; cLLI's: 0.0001 cd/m2


def chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def tagged(colour: ColourSpec) -> bool:
    """Whether RGB frames of ``colour`` need a ``cICP``: an HDR transfer or primaries other than SDR's, neither of
    them a guess."""
    if "primaries" in colour.guessed or "transfer" in colour.guessed:
        return False
    return colour.transfer in HDR_TRANSFERS or colour.primaries not in SDR_PRIMARIES


def colour_chunks(colour: ColourSpec, hdr: HdrMetadata | None) -> bytes:
    """The chunks of RGB frames of ``colour`` (``cICP``, then ``mDCV`` and ``cLLI`` where ``hdr`` has them); none
    for an sRGB-like picture."""
    if not tagged(colour):
        return b""
    out = chunk(b"cICP", bytes([colour.primaries, colour.transfer, 0, 1]))  # RGB, full range
    m = hdr.mastering if hdr is not None else None
    if m is not None and m.complete and m.white is not None:
        xy = [round(v * CHROMA) for p in (m.red, m.green, m.blue, m.white) for v in p]
        lum = [round(v * LUMINANCE) for v in (m.max_luminance, m.min_luminance)]
        if all(0 <= v <= 0xFFFF for v in xy) and all(0 <= v <= 0xFFFFFFFF for v in lum):
            out += chunk(b"mDCV", struct.pack(">8H2I", *xy, *lum))
    if hdr is not None and hdr.light_level is not None:
        out += chunk(b"cLLI", struct.pack(">2I", *(min(v * LUMINANCE, 0xFFFFFFFF) for v in hdr.light_level)))
    return out


def with_chunks(png: bytes, chunks: bytes) -> bytes:
    """The PNG file ``png`` with ``chunks`` after its ``IHDR`` (where colour chunks go: before ``PLTE``, ``IDAT``)."""
    return png[:SIGNATURE_AND_IHDR] + chunks + png[SIGNATURE_AND_IHDR:] if chunks else png


def chunks_before_data(path: Path) -> dict[bytes, bytes]:
    """The chunks of the PNG file at ``path`` before its first ``IDAT``, by type (the first of each)."""
    out: dict[bytes, bytes] = {}
    with open(path, "rb") as f:
        if f.read(8) != b"\x89PNG\r\n\x1a\n":
            return out
        for kind, start, size in png_chunks(f):
            if kind == b"IDAT" or size > 1 << 20:
                break
            f.seek(start)
            out.setdefault(kind, f.read(size))
    return out


def read_colour(path: Path) -> tuple[ColourSpec, HdrMetadata | None]:
    """The colour of RGB PNG frames like the file at ``path``: its ``cICP``'s primaries and transfer (with its
    ``mDCV`` and ``cLLI`` for an HDR transfer), else sRGB.  A chunk this cannot read is left out, as readers do."""
    chunks = chunks_before_data(path)
    cicp = chunks.get(b"cICP", b"")
    if len(cicp) != 4 or cicp[2] != 0 or cicp[0] in (0, 2) or cicp[1] in (0, 2):  # (RGB only; unspecified: sRGB)
        return ColourSpec.srgb(), None
    colour = ColourSpec(SPC_RGB, RANGE_FULL, cicp[0], cicp[1])
    if colour.transfer not in HDR_TRANSFERS:
        return colour, None
    mastering = light = None
    mdcv = chunks.get(b"mDCV", chunks.get(b"mDCv", b""))
    if len(mdcv) == 24:
        v = struct.unpack(">8H2I", mdcv)
        xy = [(Fraction(v[i], CHROMA), Fraction(v[i + 1], CHROMA)) for i in range(0, 8, 2)]
        mastering = MasteringDisplay(*xy, Fraction(v[9], LUMINANCE), Fraction(v[8], LUMINANCE))
    clli = chunks.get(b"cLLI", chunks.get(b"cLLi", b""))
    if len(clli) == 8:
        light = tuple(round(Fraction(v, LUMINANCE)) for v in struct.unpack(">2I", clli))
    return colour, HdrMetadata(HDR_TRANSFERS[colour.transfer], mastering, light)


__all__ = ["chunks_before_data", "colour_chunks", "read_colour", "tagged", "with_chunks"]
