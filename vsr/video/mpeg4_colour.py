"""The colour description of an MPEG-4 Part 2 stream in its own Visual Object header (ISO/IEC 14496-2 6.2.2:
``video_signal_type``: range, primaries, transfer, matrix), what its decoders read: FFmpeg's encoder writes none
(``video_signal_type`` 0), and AVI, where vsr writes it by default, keeps no colour either, so players guessed the
matrix by the picture's size (a BT.709 640x360 picture decoded as BT.601's, a BT.601 PAL source x4 as BT.709's).
"""

from __future__ import annotations

VO_START = b"\x00\x00\x01\xb5"
VIDEO_ID = 1  # visual_object_type of a video object
UNSPECIFIED_FORMAT = 5  # video_format: component, PAL, NTSC, SECAM, MAC, unspecified


def _bits(data: bytes) -> str:
    return "".join(f"{b:08b}" for b in data)


def with_colour(data: bytes, matrix: int, full_range: bool, primaries: int, transfer: int) -> bytes:
    """``data`` (a packet) with its Visual Object header saying the colour (FFmpeg's AVColorSpace,
    AVColorPrimaries and AVColorTransferCharacteristic numbers: the same codes); unchanged where it has no such
    header, or one that says a colour already or that this does not read."""
    start = data.find(VO_START)
    if start < 0 or not all(0 < v < 256 for v in (matrix, primaries, transfer)):
        return data
    body = start + len(VO_START)
    end = data.find(b"\x00\x00\x01", body)
    if end < 0:
        return data
    bits = _bits(data[body:end])
    at = 8 if bits[:1] == "1" else 1  # is_visual_object_identifier: then verid (4) and priority (3)
    if int(bits[at:at + 4] or "0", 2) != VIDEO_ID or bits[at + 4:at + 5] != "0":
        return data
    if bits[at + 5:] not in ("0" + "1" * k for k in range(8)):  # what follows is next_start_code()'s stuffing
        return data
    signal = "1" + f"{UNSPECIFIED_FORMAT:03b}" + ("1" if full_range else "0") + "1"
    head = bits[:at + 4] + signal + f"{primaries:08b}{transfer:08b}{matrix:08b}"
    head += "0" + "1" * (7 - len(head) % 8)  # stuffing: a 0, then ones up to the byte
    return data[:body] + int(head, 2).to_bytes(len(head) // 8, "big") + data[end:]


__all__ = ["with_colour"]
