"""Byte ranges of a written file replaced by longer ones in place: what follows each moves up, read back to front.

A container's header (an mp4 ``moov``, a Matroska ``Tracks``) grows after the muxer closed the file; moving the
rest in place needs no second copy of a large video on disk.  Only the output's temporary is ever spliced: a
failure half-way leaves a broken temporary, which the sink removes like any other.
"""

from __future__ import annotations

import os
from pathlib import Path

CHUNK = 8 << 20  # bytes moved per read (a 4K video moves at disk speed; memory stays small)


def splice(path: Path, edits: list[tuple[int, int, bytes]]) -> int:
    """Replace the bytes ``[start, end)`` of each edit with its ``bytes`` (never fewer than it replaces), the
    edits in the file's order and apart; what lies between and after them moves up by the growth before it.
    Returns the file's growth."""
    edits = sorted(edits, key=lambda e: e[0])
    shifts, s, prev_end = [], 0, 0
    for start, end, new in edits:
        if start < prev_end or end < start or len(new) < end - start:
            raise ValueError(f"bad splice [{start}, {end}) of {len(new)} bytes after {prev_end}")
        shifts.append(s)  # how far the bytes before this edit (and after the previous one) move
        s += len(new) - (end - start)
        prev_end = end
    size = os.path.getsize(path)
    if edits and prev_end > size:
        raise ValueError(f"splice past the end of {path} ({prev_end} > {size})")
    with open(path, "r+b") as f:
        _move(f, prev_end, size, s)  # the tail, by the whole growth
        for i in reversed(range(len(edits))):
            start, end, new = edits[i]
            f.seek(start + shifts[i])
            f.write(new)
            _move(f, edits[i - 1][1] if i else 0, start, shifts[i])
        f.flush()
        os.fsync(f.fileno())
    return s


def _move(f, start: int, end: int, by: int) -> None:
    """Move ``[start, end)`` up by ``by`` bytes, from its end back, so that nothing is overwritten unread."""
    if by == 0 or end <= start:
        return
    pos = end
    while pos > start:
        n = min(CHUNK, pos - start)
        pos -= n
        f.seek(pos)
        data = f.read(n)
        if len(data) != n:
            raise OSError(f"short read at {pos} while moving bytes")
        f.seek(pos + by)
        f.write(data)
