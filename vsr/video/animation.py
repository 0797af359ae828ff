"""How many times an animation plays: a GIF's loop count (the Netscape application extension; none: once), an
APNG's ``num_plays`` (``acTL``), kept from a source of the same kind and written by the output's muxer; an
animation made of anything else loops for ever, as GIFs almost all do (APNG's and WebP's muxers would play once).

Counted here as plays (0: for ever).  A GIF's count is of repeats after the first play (0: for ever): ``N``
repeats are ``N + 1`` plays, which is how FFmpeg's GIF muxer writes ``loop=N`` back.
"""

from __future__ import annotations

import os
import re
import struct
import zlib
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import BinaryIO

_NETSCAPE = re.compile(rb"\x21\xff\x0bNETSCAPE2\.0\x03\x01(..)", re.S)
_HEAD = 1 << 16  # (a GIF's extension comes before its first image, after at most 768 bytes of palette)


def plays_of(path: Path, container: str) -> int | None:
    """How many times the animation in the file at ``path`` (FFmpeg's format ``container``) plays, 0 for ever;
    None where it is not a GIF or APNG file (or cannot be read)."""
    if container not in ("gif", "apng"):
        return None
    try:
        with open(path, "rb") as f:
            head = f.read(_HEAD)
    except OSError:
        return None
    if container == "gif":
        m = _NETSCAPE.search(head)
        if m is None:
            return 1
        repeats = struct.unpack("<H", m[1])[0]
        return 0 if repeats == 0 else repeats + 1
    at = head.find(b"acTL")
    return struct.unpack(">I", head[at + 8:at + 12])[0] if 0 <= at <= len(head) - 12 else None


def muxer_options(container: str, plays: int | None) -> dict[str, str]:
    """The muxer options of an output in FFmpeg's format ``container``: an animation's that plays ``plays`` times
    (0 or None: for ever), an AVI's timestamps."""
    plays = plays or 0
    if container == "gif":  # (-1: no extension, played once)
        return {"loop": "0" if plays == 0 else str(plays - 1) if plays > 1 else "-1"}
    if container == "apng":
        return {"plays": str(plays)}
    if container == "webp":
        return {"loop": str(plays)}
    if container == "avi":
        # its audio has no timestamps to shift (AAC's or MP3's priming, negative in the source, plays first
        # anyway): FFmpeg's shift of every stream moved each video frame after the first one frame late
        return {"avoid_negative_ts": "disabled"}
    return {}


def webp_chunks(f: BinaryIO, at: int = 12, end: int | None = None) -> Iterator[tuple[bytes, int, int]]:
    """``(fourcc, where its payload starts, its size)`` of each RIFF chunk of the WebP file open as ``f`` from
    ``at`` (12: after the file's header) to ``end`` (the file's end): their headers read alone, each after a seek
    of its own (walks of chunks inside a chunk may run within this one); a chunk cut short ends the walk."""
    end = os.fstat(f.fileno()).st_size if end is None else end
    while at + 8 <= end:
        f.seek(at)
        head = f.read(8)
        if len(head) < 8:
            return
        size = struct.unpack("<I", head[4:])[0]
        yield head[:4], at + 8, size
        at += 8 + size + (size & 1)


def png_chunks(f: BinaryIO) -> Iterator[tuple[bytes, int, int]]:
    """``(type, where its data starts, its length)`` of each chunk of the PNG (APNG) file open as ``f``."""
    at, end = 8, os.fstat(f.fileno()).st_size
    while at + 12 <= end:
        f.seek(at)
        head = f.read(8)
        if len(head) < 8:
            return
        size = struct.unpack(">I", head[:4])[0]
        yield head[4:], at + 8, size
        at += 12 + size


def set_last_duration(path: Path, container: str, seconds: Fraction) -> None:
    """The last frame of the animation file at ``path`` (FFmpeg's format ``container``) held ``seconds``: FFmpeg's
    muxers take no duration for it (``libwebp_anim`` gives it the mean of the frames before, the APNG muxer the
    delay of the one before); rewritten in place, an animated WebP's last ANMF duration (ms), an APNG's last
    ``fcTL`` delay (and its CRC).  Nothing for any other container, or no duration.  Only the chunks' headers are
    read (an APNG at 4K is gigabytes)."""
    if seconds <= 0 or container not in ("webp", "apng"):
        return
    with open(path, "r+b") as f:
        if container == "webp":
            frames = [start for fourcc, start, size in webp_chunks(f) if fourcc == b"ANMF" and size >= 16]
            if frames:
                f.seek(frames[-1] + 12)  # (x, y, width - 1, height - 1: 3 bytes each, then the duration)
                f.write(min(round(seconds * 1000), 0xFFFFFF).to_bytes(3, "little"))
            return
        controls = [start for fourcc, start, size in png_chunks(f) if fourcc == b"fcTL" and size == 26]
        if controls:
            delay = seconds.limit_denominator(0xFFFF) if seconds < 0xFFFF else Fraction(0xFFFF)
            f.seek(controls[-1])
            old = f.read(26)
            body = old[:20] + struct.pack(">HH", delay.numerator, delay.denominator) + old[24:]
            f.seek(controls[-1])
            f.write(body + struct.pack(">I", zlib.crc32(b"fcTL" + body)))


__all__ = ["muxer_options", "plays_of", "png_chunks", "set_last_duration", "webp_chunks"]
