"""HDR10's static metadata in a Matroska or WebM file: ``MasteringMetadata``, ``MaxCLL`` and ``MaxFALL`` in the
video track's ``Colour``; its ``StereoMode`` and ``Projection`` (:mod:`vsr.video.spherical`).

FFmpeg's Matroska muxer writes them only from a stream's coded side data, which PyAV cannot set, so vsr adds
them to the file the muxer closed.  ``Tracks`` grows, so everything after it moves up (in place,
:mod:`vsr.video.splice`) and what points into the file follows: the ``SeekHead`` entries, each ``Cues``
position, the ``Segment``'s size, and the CRC-32 of each element rewritten.

Element IDs and layout: the Matroska specification (RFC 9559), EBML (RFC 8794).
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

from vsr.video.isobmff import NotWritable
from vsr.video.splice import splice

EBML, SEGMENT, INFO = 0x1A45DFA3, 0x18538067, 0x1549A966
SEEK_HEAD, SEEK, SEEK_POSITION = 0x114D9B74, 0x4DBB, 0x53AC
TRACKS, TRACK_ENTRY, TRACK_TYPE, VIDEO, COLOUR = 0x1654AE6B, 0xAE, 0x83, 0xE0, 0x55B0
MAX_CLL, MAX_FALL, MASTERING = 0x55BC, 0x55BD, 0x55D0
R_X, R_Y, G_X, G_Y, B_X, B_Y, WHITE_X, WHITE_Y, LUMINANCE_MAX, LUMINANCE_MIN = range(0x55D1, 0x55DB)
CUES, CUE_POINT, CUE_TRACK_POSITIONS, CUE_CLUSTER_POSITION, CUE_CODEC_STATE = 0x1C53BB6B, 0xBB, 0xB7, 0xF1, 0xEA
CRC32, VOID, CLUSTER = 0xBF, 0xEC, 0x1F43B675
# a track's BlockAdditionMapping (Dolby Vision's configuration) and its children
BLOCK_ADDITION_MAPPING, ADD_ID_NAME, ADD_ID_TYPE, ADD_ID_EXTRA = 0x41E4, 0x41A4, 0x41E7, 0x41ED
VIDEO_TRACK = 1
DISPLAY_WIDTH, DISPLAY_HEIGHT, DISPLAY_UNIT = 0x54B0, 0x54BA, 0x54B2
DAR_UNIT = 3  # DisplayUnit: DisplayWidth and DisplayHeight are the display aspect ratio
# Video children that vsr's replace (FFmpeg's muxer writes DisplayUnit 4, "unknown", when it knows no aspect)
REPLACED = frozenset({DISPLAY_UNIT})


class Incomplete(NotWritable):
    """An element that runs past the end of what holds it: a damaged file, or a stream's bytes not all come yet."""


@dataclass
class Element:
    id: int
    start: int  # of its ID
    header: int  # ID and size bytes
    size: int  # of its data
    size_width: int  # bytes of its size field

    @property
    def body(self) -> int:
        return self.start + self.header

    @property
    def end(self) -> int:
        return self.body + self.size


def _vint(data, i: int, end: int) -> tuple[int, int, bool]:
    """The variable-length integer at ``data[i]``: value (its length marker removed), width, all ones
    ("unknown size")."""
    if i >= end:
        raise Incomplete("an element runs past its parent")
    first = data[i]
    width = 1
    while width <= 8 and not first & (0x80 >> (width - 1)):
        width += 1
    if width > 8:
        raise NotWritable("a malformed EBML number")
    if i + width > end:
        raise Incomplete("an EBML number runs past its parent")
    value = first & (0xFF >> width)
    for k in range(1, width):
        value = (value << 8) | data[i + k]
    return value, width, value == (1 << (7 * width)) - 1


def _id(data, i: int, end: int) -> tuple[int, int]:
    _, width, _ = _vint(data, i, end)
    return int.from_bytes(bytes(data[i:i + width]), "big"), width


def _header(data, i: int, end: int, at: int | None = None) -> Element:
    """The element whose ID starts at ``data[i]`` (at file offset ``at``, default ``i``), ending by ``end``."""
    at = i if at is None else at
    eid, n = _id(data, i, len(data))
    size, m, unknown = _vint(data, i + n, len(data))
    if unknown:
        raise NotWritable("an element of unknown size (a live stream's layout)")
    if at + n + m + size > end:
        raise Incomplete(f"element {eid:#x} at {at} runs past its parent")
    return Element(eid, at, n + m, size, m)


def elements(data, start: int, end: int) -> list[Element]:
    """The elements laid end to end in ``data[start:end]`` (none of unknown size)."""
    out, i = [], start
    while i < end:
        out.append(_header(data, i, end))
        i = out[-1].end
    return out


def size_field(value: int, width: int = 0) -> bytes:
    """``value`` as an EBML size, ``width`` bytes wide where it fits (else the fewest that hold it)."""
    need = 1
    while value >= (1 << (7 * need)) - 1:
        need += 1
    if need > 8:
        raise NotWritable("an element too large for EBML")
    width = max(width, need)
    return ((1 << (7 * width)) | value).to_bytes(width, "big")


def _id_bytes(eid: int) -> bytes:
    return eid.to_bytes((eid.bit_length() + 7) // 8, "big")


def element(eid: int, body: bytes, width: int = 0) -> bytes:
    return _id_bytes(eid) + size_field(len(body), width) + body


def uint(eid: int, value: int, width: int = 1) -> bytes:
    n = max(width, (value.bit_length() + 7) // 8, 1)
    return element(eid, value.to_bytes(n, "big"))


def double(eid: int, value: float) -> bytes:
    return element(eid, struct.pack(">d", value))


def master(eid: int, children: bytes, crc: bool, width: int = 0) -> bytes:
    """A master element of ``children``, its CRC-32 element first where ``crc`` (as the muxer wrote one)."""
    if crc:
        children = element(CRC32, struct.pack("<I", zlib.crc32(children))) + children
    return element(eid, children, width)


def _children(data, e: Element) -> tuple[list[Element], bool]:
    """``e``'s children, without its CRC-32 element, and whether it had one."""
    kids = elements(data, e.body, e.end)
    crc = bool(kids) and kids[0].id == CRC32
    return (kids[1:] if crc else kids), crc


def _raw(data, e: Element) -> bytes:
    return bytes(data[e.start:e.end])


def colour_metadata(primaries, white, luminance, light_level) -> bytes:
    """``MaxCLL``, ``MaxFALL`` and ``MasteringMetadata`` (each where given): ``primaries`` ((x, y) of red, green,
    blue), ``white`` (x, y), ``luminance`` (max, min in cd/m2), ``light_level`` (MaxCLL, MaxFALL)."""
    out = b""
    if light_level is not None:
        out += uint(MAX_CLL, light_level[0]) + uint(MAX_FALL, light_level[1])
    if primaries is not None:
        (rx, ry), (gx, gy), (bx, by) = primaries
        values = zip(range(R_X, LUMINANCE_MIN + 1), (rx, ry, gx, gy, bx, by, *white, *luminance))
        out += element(MASTERING, b"".join(double(eid, float(v)) for eid, v in values))
    return out


def _lacking(kids: list[Element], extra: bytes) -> bytes:
    """The elements of ``extra`` of IDs none of ``kids`` has."""
    have = {c.id for c in kids}
    return b"".join(_raw(extra, e) for e in elements(extra, 0, len(extra)) if e.id not in have)


def _with_video(data, track: Element, colour: bytes, video_extra: bytes, track_extra: bytes = b"") -> bytes | None:
    """The video ``track`` entry with ``colour`` in its ``Colour`` (a new one where it has none; nothing where its
    Colour holds HDR metadata already), those of the elements ``video_extra`` its ``Video`` lacks and those of
    ``track_extra`` it lacks itself; None where nothing changes."""
    kids, crc = _children(data, track)
    track_added = _lacking(kids, track_extra)
    video = next((k for k in kids if k.id == VIDEO), None)
    if video is None:
        raise NotWritable("the video track has no Video element")
    vkids, vcrc = _children(data, video)
    replaced = {e.id for e in elements(video_extra, 0, len(video_extra))} & REPLACED
    vkids = [k for k in vkids if k.id not in replaced]
    added = _lacking(vkids, video_extra)
    box = next((c for c in vkids if c.id == COLOUR), None)
    if box is not None and colour:
        ckids, ccrc = _children(data, box)
        if any(c.id in (MAX_CLL, MAX_FALL, MASTERING) for c in ckids):
            colour = b""
    if not colour and not added and not track_added:
        return None
    if box is None:
        vparts = [_raw(data, c) for c in vkids] + ([master(COLOUR, colour, False)] if colour else [])
    else:
        body = b"".join(_raw(data, c) for c in ckids) + colour if colour else None
        vparts = [_raw(data, c) if c is not box or body is None else master(COLOUR, body, ccrc, box.size_width)
                  for c in vkids]
    new_video = master(VIDEO, b"".join(vparts) + added, vcrc, video.size_width)
    return master(TRACK_ENTRY, b"".join(new_video if k is video else _raw(data, k) for k in kids) + track_added, crc,
                  track.size_width)


def display_size(webm: bool, sar, width: int, height: int) -> bytes:
    """The ``Video`` children that show ``width`` x ``height`` samples of aspect ``sar`` at their shape: the display
    aspect ratio (exact) in Matroska, as FFmpeg's muxer writes it; WebM takes only a size in pixels."""
    if webm:
        return uint(DISPLAY_WIDTH, round(width * sar)) + uint(DISPLAY_HEIGHT, height)
    dar = sar * width / height
    return uint(DISPLAY_WIDTH, dar.numerator) + uint(DISPLAY_HEIGHT, dar.denominator) + uint(DISPLAY_UNIT, DAR_UNIT)


def _uint_value(data, e: Element) -> int:
    return int.from_bytes(bytes(data[e.body:e.end]), "big")


def _repositioned(data, e: Element, ids: tuple[int, ...], moved) -> bytes:
    """Element ``e`` with every unsigned integer of an ID in ``ids`` (a position in the segment) passed through
    ``moved``; masters rebuilt around them, each value as wide as before where it fits."""
    kids, crc = _children(data, e)
    parts = []
    for k in kids:
        if k.id in ids:
            parts.append(uint(k.id, moved(_uint_value(data, k)), k.size))
        elif k.id in (SEEK, CUE_POINT, CUE_TRACK_POSITIONS):
            parts.append(_repositioned(data, k, ids, moved))
        else:
            parts.append(_raw(data, k))
    return master(e.id, b"".join(parts), crc, e.size_width)


def add_video_elements(path: Path, colour: bytes, video_extra: bytes, track_extra: bytes = b"") -> bool:
    """Put ``colour`` (:func:`colour_metadata`) into the first video track's ``Colour``, those elements of
    ``video_extra`` (``StereoMode``, ``Projection``) its ``Video`` lacks and those of ``track_extra``
    (``BlockAdditionMapping``) the track entry lacks, into the Matroska/WebM file at ``path``.
    False where nothing was added; :class:`NotWritable` for a layout this does not change."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(64)
        ebml_id, n = _id(head, 0, len(head))
        if ebml_id != EBML:
            raise NotWritable("not an EBML file")
        ebml_size, m, _ = _vint(head, n, len(head))
        seg_start = n + m + ebml_size
        f.seek(seg_start)
        seg_head = f.read(12)
        seg_id, n = _id(seg_head, 0, len(seg_head))
        seg_size, seg_width, unknown = _vint(seg_head, n, len(seg_head))
        if seg_id != SEGMENT or unknown:
            raise NotWritable("no Segment of known size")
        seg_body = seg_start + n + seg_width
        if seg_body + seg_size > size:
            raise NotWritable("the Segment runs past the end of the file")
        level1 = _level1(f, seg_body, seg_body + seg_size)
        wanted = [e for e in level1 if e.id in (SEEK_HEAD, TRACKS, CUES)]
        bodies = {}
        for e in wanted:
            f.seek(e.start)
            bodies[e.start] = f.read(e.end - e.start)

    new = _track_edits(level1, seg_body, lambda e: bodies[e.start], colour, video_extra, track_extra)
    if new is None:
        return False
    growth = sum(len(new[e.start]) - (e.end - e.start) for e in level1 if e.start in new)
    edits = [(e.start, e.end, new[e.start]) for e in level1 if e.start in new]
    seg_field = size_field(seg_size + growth, seg_width)
    if len(seg_field) != seg_width:
        raise NotWritable("the Segment's size field is too narrow")
    edits.append((seg_start + n, seg_start + n + seg_width, seg_field))
    splice(path, edits)
    return True


def _track_edits(level1: list[Element], seg_body: int, read, colour: bytes, video_extra: bytes,
                 track_extra: bytes) -> dict[int, bytes] | None:
    """The new bytes, by start, of the Segment's children (``level1``, whose bytes ``read(e)`` gives) that change:
    ``Tracks`` with the additions (:func:`_with_video`), the ``SeekHead`` and ``Cues`` positions moved by what
    grew before them; None where nothing is added."""
    def local(e: Element) -> tuple[bytes, Element]:
        return read(e), Element(e.id, 0, e.header, e.size, e.size_width)

    tracks = next((e for e in level1 if e.id == TRACKS), None)
    if tracks is None:
        raise NotWritable("no Tracks")
    data, t = local(tracks)
    kids, crc = _children(data, t)
    video = next((k for k in kids if k.id == TRACK_ENTRY and any(
        c.id == TRACK_TYPE and _uint_value(data, c) == VIDEO_TRACK for c in _children(data, k)[0])), None)
    if video is None:
        raise NotWritable("no video track")
    entry = _with_video(data, video, colour, video_extra, track_extra)
    if entry is None:
        return None
    new = {tracks.start: master(TRACKS, b"".join(entry if k is video else _raw(data, k) for k in kids),
                                crc, t.size_width)}
    # positions in the segment point at level-1 elements: each moves by what grew before it
    movers = [e for e in level1 if e.id in (SEEK_HEAD, CUES)]
    for _ in range(8):  # a position one byte wider may grow what holds it: settle
        def moved(pos: int) -> int:
            return pos + sum(len(new[e.start]) - (e.end - e.start) for e in level1
                             if e.start in new and e.end <= seg_body + pos)
        changed = False
        for e in movers:
            data, local_e = local(e)
            ids = (SEEK_POSITION,) if e.id == SEEK_HEAD else (CUE_CLUSTER_POSITION, CUE_CODEC_STATE)
            b = _repositioned(data, local_e, ids, moved)
            if new.get(e.start) != b:
                new[e.start], changed = b, True
        if not changed:
            return new
    raise NotWritable("positions did not settle")


def stream_header(data, video_extra: bytes) -> tuple[int, bytes] | None:
    """A Matroska stream's header (all before its first ``Cluster``) in its first bytes ``data``, with those
    elements of ``video_extra`` its video track's ``Video`` lacks: (its length in ``data``, the new header); None
    while ``data`` holds no whole header yet.  A stream's header is written once, before any frame, so this is
    the only place for what its muxer leaves out (``Tracks`` grows: the ``SeekHead`` positions after it follow;
    the Segment's size is unknown, as FFmpeg writes it on a pipe).  :class:`NotWritable` for another layout."""
    try:
        ebml = _header(data, 0, len(data))
        if ebml.id != EBML:
            raise NotWritable("not an EBML stream")
        seg_id, n = _id(data, ebml.end, len(data))
        _, m, unknown = _vint(data, ebml.end + n, len(data))
        if seg_id != SEGMENT or not unknown:
            raise NotWritable("no Segment of unknown size")
        seg_body = i = ebml.end + n + m
        level1 = []
        while bytes(data[i:i + 4]) != _id_bytes(CLUSTER):
            if i + 4 > len(data):
                return None
            level1.append(_header(data, i, len(data)))
            i = level1[-1].end
    except Incomplete:
        return None
    new = _track_edits(level1, seg_body, lambda e: bytes(data[e.start:e.end]), b"", video_extra, b"") or {}
    return i, bytes(data[:seg_body]) + b"".join(new.get(e.start, _raw(data, e)) for e in level1)


def _level1(f, start: int, end: int) -> list[Element]:
    """The Segment's children, read header by header (clusters are skipped, not read)."""
    out, i = [], start
    while i < end:
        f.seek(i)
        out.append(_header(f.read(16), 0, end, at=i))
        i = out[-1].end
    return out
