"""Messages inside a coded picture: H.264 and HEVC NAL units (Annex B or length-prefixed, as the containers hold
them) and their SEI messages, AV1 OBUs and their metadata; read out of a source's packets and put into an
output's, before the picture they belong to.

What vsr carries this way are ITU-T T.35 registered payloads (closed captions, HDR10+): in H.264 and HEVC an SEI
message of type 4 (``user_data_registered_itu_t_t35``), in AV1 a metadata OBU of type 4 (``METADATA_TYPE_ITUT_T35``);
the payload's bytes are the same in both, from its country code on.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

SEI_T35 = 4  # H.264/HEVC SEI payloadType user_data_registered_itu_t_t35
OBU_METADATA, METADATA_T35 = 5, 4  # AV1 obu_type and metadata_type
# the OBUs of a picture, before the first of which metadata goes: frame header, tile group, frame
_AV1_PICTURE = (3, 4, 6)
_START = re.compile(b"\x00\x00\x01")


def escaped(rbsp: bytes) -> bytes:
    """``rbsp`` with emulation prevention: a 0x03 after each two zero bytes that a byte of 0 to 3 follows."""
    out, zeros = bytearray(), 0
    for b in rbsp:
        if zeros >= 2 and b <= 3:
            out.append(3)
            zeros = 0
        out.append(b)
        zeros = zeros + 1 if b == 0 else 0
    return bytes(out)


def unescaped(ebsp: bytes) -> bytes:
    """``ebsp`` without its emulation prevention bytes (each 0x03 after two zero bytes)."""
    out, zeros = bytearray(), 0
    for b in ebsp:
        if zeros >= 2 and b == 3:
            zeros = 0
            continue
        out.append(b)
        zeros = zeros + 1 if b == 0 else 0
    return bytes(out)


def _header_size(codec: str) -> int:
    return 1 if codec == "h264" else 2


def is_vcl(nal: bytes, codec: str) -> bool:
    kind = nal[0] & 0x1F if codec == "h264" else (nal[0] >> 1) & 0x3F
    return 1 <= kind <= 5 if codec == "h264" else kind <= 31


def is_prefix_sei(nal: bytes, codec: str) -> bool:
    return len(nal) > 2 and (nal[0] & 0x1F == 6 if codec == "h264" else (nal[0] >> 1) & 0x3F == 39)


def nal_units(data: bytes, length_size: int | None) -> Iterator[tuple[int, memoryview]]:
    """``(offset of its start code or length, NAL unit)`` of each NAL unit in the access unit ``data``: Annex B
    (``length_size`` None) or each after a big-endian length of ``length_size`` bytes (mp4, Matroska).  Read as
    far as the caller asks, each unit a view (a reader that stops at the first slice reads nothing of it)."""
    view = memoryview(data)
    if length_size is None:
        unit = None  # (start of its start code, start of the unit) of the unit before the next start code
        for m in _START.finditer(data):
            begin = m.start() - 1 if m.start() > 0 and data[m.start() - 1] == 0 else m.start()
            if unit is not None:
                yield unit[0], view[unit[1]:begin]
            unit = (begin, m.end())
        if unit is not None:
            yield unit[0], view[unit[1]:]
        return
    pos = 0
    while pos + length_size < len(data):
        n = int.from_bytes(view[pos:pos + length_size], "big")
        yield pos, view[pos + length_size:pos + length_size + n]
        pos += length_size + n


def inject(data: bytes, nal: bytes, codec: str, length_size: int | None = None) -> bytes:
    """The access unit ``data`` with ``nal`` inserted before its first slice: Annex B (``length_size`` None: as
    encoders hand packets to FFmpeg's muxers), or NAL units each after a big-endian length of ``length_size``
    bytes."""
    for at, unit in nal_units(data, length_size):
        if unit and is_vcl(unit, codec):
            if codec == "hevc" and len(unit) > 1:  # an SEI's TemporalId is its picture's
                nal = nal[:1] + bytes([nal[1] & 0xF8 | unit[1] & 0x07]) + nal[2:]
            break
    else:
        at = len(data)
    return data[:at] + append(b"", nal, length_size) + data[at:]


def append(data: bytes, nal: bytes, length_size: int | None = None) -> bytes:
    """The access unit ``data`` with ``nal`` after its last NAL unit (where a Dolby Vision RPU goes): Annex B
    (``length_size`` None) or after a big-endian length of ``length_size`` bytes."""
    return data + (b"\x00\x00\x00\x01" + nal if length_size is None else len(nal).to_bytes(length_size, "big") + nal)


def _ff_coded(value: int) -> bytes:
    """An SEI payloadType or payloadSize: a 0xFF byte per 255, then the rest."""
    return b"\xff" * (value // 255) + bytes([value % 255])


def sei_nal(payloads: list[bytes], codec: str) -> bytes:
    """One SEI NAL unit (without start code or length) of a T.35 message per payload (each from its country code
    on): an H.264 SEI, or an HEVC prefix SEI."""
    if not payloads:
        raise ValueError("an SEI NAL unit of no message")
    messages = b"".join(_ff_coded(SEI_T35) + _ff_coded(len(p)) + p for p in payloads)
    header = bytes([0x06]) if codec == "h264" else bytes([39 << 1, 0x01])  # HEVC: PREFIX_SEI, layer 0, tid 1
    return header + escaped(messages + b"\x80")  # rbsp_trailing_bits


def sei_t35(nal: bytes, codec: str) -> list[bytes]:
    """The T.35 payloads of the SEI NAL unit ``nal`` (an H.264 SEI or HEVC prefix SEI); a damaged one's that
    end early are left out."""
    rbsp, out, pos = unescaped(bytes(nal[_header_size(codec):])), [], 0
    while pos < len(rbsp) and rbsp[pos:] != b"\x80":
        kind = size = 0
        for which in (0, 1):
            value = 0
            while pos < len(rbsp) and rbsp[pos] == 0xFF:
                value, pos = value + 255, pos + 1
            if pos >= len(rbsp):
                return out
            value, pos = value + rbsp[pos], pos + 1
            kind, size = (value, size) if which == 0 else (kind, value)
        if pos + size > len(rbsp):
            return out
        if kind == SEI_T35:
            out.append(rbsp[pos:pos + size])
        pos += size
    return out


def leb128(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _read_leb128(data: bytes, pos: int) -> tuple[int, int]:
    value = 0
    for i in range(8):
        if pos + i >= len(data):
            raise ValueError("leb128 past the end")
        value |= (data[pos + i] & 0x7F) << (7 * i)
        if not data[pos + i] & 0x80:
            return value, pos + i + 1
    raise ValueError("leb128 of more than 8 bytes")


def obus(data: bytes) -> Iterator[tuple[int, int, bytes]]:
    """``(offset, obu_type, payload)`` of each OBU in the low-overhead bitstream ``data`` (an AV1 packet, as every
    container holds it); stops at one it cannot read.  Each payload a view."""
    view, pos = memoryview(data), 0
    while pos < len(data):
        head = data[pos]
        kind, extension, has_size = (head >> 3) & 0xF, head & 0x4, head & 0x2
        at = pos + 1 + (1 if extension else 0)
        try:
            size, at = _read_leb128(data, at) if has_size else (len(data) - at, at)
        except ValueError:
            return
        if at + size > len(data):
            return
        yield pos, kind, view[at:at + size]
        pos = at + size


def metadata_obu(payload: bytes) -> bytes:
    """An AV1 metadata OBU of the T.35 ``payload`` (from its country code on), with its size field."""
    body = leb128(METADATA_T35) + payload + b"\x80"  # trailing bits
    return bytes([OBU_METADATA << 3 | 0x2]) + leb128(len(body)) + body


def obu_t35(payload: bytes) -> bytes | None:
    """The T.35 payload of a metadata OBU's ``payload`` (None: another kind of metadata)."""
    try:
        kind, at = _read_leb128(payload, 0)
    except ValueError:
        return None
    if kind != METADATA_T35:
        return None
    body = bytes(payload[at:]).rstrip(b"\x00")
    return body[:-1] if body.endswith(b"\x80") else None  # trailing bits: one 1 bit, byte-aligned here


def inject_obus(data: bytes, extra: bytes) -> bytes:
    """The AV1 temporal unit ``data`` with the OBUs ``extra`` before its first picture's OBUs (after its temporal
    delimiter and sequence header, where it has them)."""
    for at, kind, _ in obus(data):
        if kind in _AV1_PICTURE:
            return data[:at] + extra + data[at:]
    return data + extra


def t35_payloads(data: bytes, codec: str, length_size: int | None = None) -> list[bytes]:
    """Every T.35 payload in the access unit ``data`` of ``codec`` ("h264", "hevc": its SEI messages before the
    first slice; "av1": its metadata OBUs), in order."""
    out: list[bytes] = []
    if codec == "av1":
        for _, kind, payload in obus(data):
            if kind in _AV1_PICTURE:
                break
            if kind == OBU_METADATA and (t35 := obu_t35(payload)) is not None:
                out.append(t35)
        return out
    for _, unit in nal_units(data, length_size):
        if unit and is_vcl(unit, codec):
            break
        if is_prefix_sei(unit, codec):
            out += sei_t35(unit, codec)
    return out


def nal_length_size(codec: str, extradata: bytes | None) -> int | None:
    """The NAL length size of a stream whose decoder configuration is ``extradata`` (avcC/hvcC, as mp4 and
    Matroska hold it); None where its packets are Annex B (MPEG-TS, raw streams: extradata absent or Annex B)."""
    if not extradata or extradata[:3] == b"\x00\x00\x01" or extradata[:4] == b"\x00\x00\x00\x01":
        return None
    if codec == "h264" and len(extradata) > 4 and extradata[0] == 1:
        return (extradata[4] & 3) + 1
    if codec == "hevc" and len(extradata) > 21 and extradata[0] == 1:
        return (extradata[21] & 3) + 1
    return None
