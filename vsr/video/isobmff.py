"""HDR10's static metadata in an mp4 or QuickTime file: the ``mdcv`` and ``clli`` boxes of its video sample entry
(and its ``st3d`` and ``sv3d``, :mod:`vsr.video.spherical`).

FFmpeg's mov muxer writes them only from a stream's coded side data, which PyAV cannot set, so vsr adds them
to the file the muxer closed: into the video track's sample entry (after its ``colr``), every box around it one
box longer.  ``moov`` comes last in what PyAV writes (no ``faststart``), so nothing moves; where it comes first,
the media after it moves up and each chunk offset (``stco``/``co64``) with it.  Fragmented files are left alone.

Box layouts: ISO/IEC 14496-12 (boxes, ``stsd``), ISO/IEC 23001-17 / Apple's QuickTime (``mdcv``: three display
primaries G, B, R then the white point as x, y in 0.00002, luminance max, min in 0.0001 cd/m2; ``clli``: MaxCLL,
MaxFALL in cd/m2).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from vsr.video.splice import splice

# boxes that hold only boxes, on the way from moov to the sample entries
CONTAINERS = (b"moov", b"trak", b"mdia", b"minf", b"stbl")
VISUAL_ENTRY_FIELDS = 78  # a visual sample entry's fixed fields before its boxes (QuickTime's alike)
STSD_FIELDS = 8  # version, flags, entry count
FRAGMENTED = (b"moof", b"mfra", b"sidx")


class NotWritable(Exception):
    """The file's layout is one vsr does not change (its reason, one line)."""


@dataclass(frozen=True)
class Box:
    type: bytes
    start: int  # of its header
    header: int  # 8, or 16 with a 64-bit size
    size: int  # header included

    @property
    def end(self) -> int:
        return self.start + self.size

    @property
    def body(self) -> int:
        return self.start + self.header


def _header(data, i: int, end: int, at: int | None = None) -> Box:
    """The box whose header starts at ``data[i]`` (at file offset ``at``, default ``i``), ending by ``end``."""
    at = i if at is None else at
    size, typ = struct.unpack_from(">I4s", data, i)
    header = 8
    if size == 1:
        if len(data) < i + 16:
            raise NotWritable("a box's 64-bit size runs past its parent")
        size, header = struct.unpack_from(">Q", data, i + 8)[0], 16
    elif size == 0:  # to the end of the file (the last top-level box only)
        size = end - at
    if size < header or at + size > end:
        raise NotWritable(f"box {typ!r} at {at} runs past its parent")
    return Box(typ, at, header, size)


def boxes(data: bytes | memoryview, start: int, end: int) -> list[Box]:
    """The boxes laid end to end in ``data[start:end]``."""
    out, i = [], start
    while i + 8 <= end:
        out.append(_header(data, i, end))
        i = out[-1].end
    return out


def top_level(path: Path) -> list[Box]:
    """The file's top-level boxes, read box header by box header."""
    out, size = [], path.stat().st_size
    with open(path, "rb") as f:
        i = 0
        while i + 8 <= size:
            f.seek(i)
            out.append(_header(f.read(16), 0, size, at=i))
            i = out[-1].end
    return out


def mdcv(primaries, white, luminance) -> bytes:
    """The ``mdcv`` box: ``primaries`` ((x, y) of red, green, blue), ``white`` (x, y), ``luminance`` (max, min in
    cd/m2), numbers or Fractions."""
    red, green, blue = primaries
    xy = [round(v * 50000) for p in (green, blue, red, white) for v in p]
    lum = [round(v * 10000) for v in luminance]
    if not all(0 <= v <= 0xFFFF for v in xy) or not all(0 <= v <= 0xFFFFFFFF for v in lum):
        raise NotWritable("the mastering display's values do not fit mdcv's fields")
    body = struct.pack(">8H2I", *xy, *lum)
    return struct.pack(">I4s", 8 + len(body), b"mdcv") + body


def clli(max_cll: int, max_fall: int) -> bytes:
    """The ``clli`` box: MaxCLL and MaxFALL in cd/m2 (16 bits each)."""
    if not (0 <= max_cll <= 0xFFFF and 0 <= max_fall <= 0xFFFF):
        raise NotWritable("the content light level does not fit clli's fields")
    return struct.pack(">I4sHH", 12, b"clli", max_cll, max_fall)


def _grow(moov: bytearray, chain: list[Box], by: int) -> None:
    """Add ``by`` to the size of every box of ``chain`` (offsets into ``moov``)."""
    for b in chain:
        if b.header == 16:
            struct.pack_into(">Q", moov, b.start + 8, b.size + by)
        elif b.size + by > 0xFFFFFFFF:
            raise NotWritable(f"box {b.type!r} would outgrow its 32-bit size")
        else:
            struct.pack_into(">I", moov, b.start, b.size + by)


def _video_entry(moov: bytes, box: Box) -> tuple[list[Box], Box] | None:
    """The chain of boxes from ``moov`` down to the first video track's first sample entry, and that entry."""
    chain = [box]

    def down(parent: Box, want: bytes) -> Box | None:
        return next((b for b in boxes(moov, parent.body, parent.end) if b.type == want), None)

    for trak in boxes(moov, box.body, box.end):
        if trak.type != b"trak":
            continue
        mdia = down(trak, b"mdia")
        hdlr = mdia and down(mdia, b"hdlr")
        if hdlr is None or moov[hdlr.body + 8:hdlr.body + 12] != b"vide":
            continue
        minf = down(mdia, b"minf")
        stbl = minf and down(minf, b"stbl")
        stsd = stbl and down(stbl, b"stsd")
        if stsd is None:
            raise NotWritable("the video track has no sample description")
        entries = boxes(moov, stsd.body + STSD_FIELDS, stsd.end)
        if not entries:
            raise NotWritable("the video track has no sample entry")
        return chain + [trak, mdia, minf, stbl, stsd, entries[0]], entries[0]
    return None


def _read_moov(path: Path) -> tuple[list[Box], Box, bytearray]:
    """The file's top-level boxes, its ``moov`` box and that box's bytes; :class:`NotWritable` for a fragmented
    file or one without a ``moov``."""
    top = top_level(path)
    if any(b.type in FRAGMENTED for b in top):
        raise NotWritable("a fragmented mp4 (its fragments' offsets would move)")
    moov_box = next((b for b in top if b.type == b"moov"), None)
    if moov_box is None:
        raise NotWritable("no moov box")
    with open(path, "rb") as f:
        f.seek(moov_box.start)
        return top, moov_box, bytearray(f.read(moov_box.size))


def _write_moov(path: Path, top: list[Box], moov_box: Box, moov: bytearray, grown: int) -> None:
    """Put ``moov`` (``grown`` bytes longer than it was) back in place of ``moov_box``."""
    edits = [(moov_box.start, moov_box.end, bytes(moov))]
    if moov_box.end < top[-1].end:  # media after moov (faststart): its chunk offsets move with it
        edits[0] = (moov_box.start, moov_box.end, _moved_offsets(moov, moov_box.end, grown))
    splice(path, edits)


def add_entry_boxes(path: Path, extra: list[bytes], rename: dict[bytes, bytes] | None = None) -> bool:
    """Put the boxes ``extra`` (:func:`mdcv`, :func:`clli`, ``st3d``, ``sv3d``, ``dvvC``) into the video sample entry
    of the mp4/QuickTime file at ``path``, after its ``colr``; those it holds already are left as they are.  The
    entry's type becomes ``rename``'s for it, where that has one (``hvc1`` -> ``dvh1``).  False where nothing
    changed; :class:`NotWritable` for a layout this does not change."""
    top, moov_box, moov = _read_moov(path)
    local = Box(b"moov", 0, moov_box.header, moov_box.size)
    found = _video_entry(moov, local)
    if found is None:
        raise NotWritable("no video track")
    chain, entry = found
    children = boxes(moov, entry.body + VISUAL_ENTRY_FIELDS, entry.end)
    have = {b.type for b in children}
    new = b"".join(x for x in extra if x[4:8] not in have)
    kind = (rename or {}).get(entry.type)
    if kind is not None:
        moov[entry.start + 4:entry.start + 8] = kind
    if not new:
        if kind is not None:
            _write_moov(path, top, moov_box, moov, 0)
        return kind is not None
    colr = next((b for b in children if b.type == b"colr"), None)
    at = colr.end if colr is not None else entry.end
    _grow(moov, chain, len(new))
    moov[at:at] = new
    _write_moov(path, top, moov_box, moov, len(new))
    return True


def box(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I4s", 8 + len(body), kind) + body


def mdta_meta(tags: list[tuple[str, str]]) -> bytes:
    """A ``meta`` atom of QuickTime metadata keys (handler ``mdta``: a ``keys`` box naming each key, an ``ilst``
    holding each value as UTF-8 text under the key's 1-based index), as Apple's cameras write it in ``moov``: an
    atom without ISO's version and flags there (in mp4 files too: ExifTool reads a full box there as ending at
    its version; FFmpeg reads both)."""
    full = b"\0\0\0\0"  # version 0, flags 0
    hdlr = box(b"hdlr", full + b"\0\0\0\0" + b"mdta" + b"\0" * 12 + b"\0")
    keys = box(b"keys", full + struct.pack(">I", len(tags)) + b"".join(
        box(b"mdta", k.encode("utf-8")) for k, _ in tags))
    items = b"".join(struct.pack(">I", 8 + 16 + len(v.encode("utf-8"))) + struct.pack(">I", i)
                     + box(b"data", struct.pack(">II", 1, 0) + v.encode("utf-8"))  # type 1: UTF-8; no locale
                     for i, (_, v) in enumerate(tags, 1))
    return box(b"meta", hdlr + keys + box(b"ilst", items))


def add_moov_box(path: Path, extra: bytes) -> None:
    """Append the box ``extra`` to the ``moov`` of the mp4/QuickTime file at ``path`` (:class:`NotWritable` for a
    layout this does not change)."""
    top, moov_box, moov = _read_moov(path)
    _grow(moov, [Box(b"moov", 0, moov_box.header, moov_box.size)], len(extra))
    moov += extra
    _write_moov(path, top, moov_box, moov, len(extra))


def _moved_offsets(moov: bytearray, after: int, by: int) -> bytes:
    """``moov`` with every chunk offset at or after file offset ``after`` moved up by ``by``."""
    def walk(start: int, end: int) -> None:
        for b in boxes(moov, start, end):
            if b.type in CONTAINERS:
                walk(b.body, b.end)
            elif b.type in (b"stco", b"co64"):
                wide = b.type == b"co64"
                fmt = ">Q" if wide else ">I"
                step = 8 if wide else 4
                (count,) = struct.unpack_from(">I", moov, b.body + 4)
                for k in range(count):
                    at = b.body + 8 + k * step
                    (v,) = struct.unpack_from(fmt, moov, at)
                    if v >= after:
                        if not wide and v + by > 0xFFFFFFFF:
                            raise NotWritable("a 32-bit chunk offset would overflow (stco)")
                        struct.pack_into(fmt, moov, at, v + by)
    walk(8 if struct.unpack_from(">I", moov, 0)[0] != 1 else 16, len(moov))
    return bytes(moov)
