"""Dolby Vision's RPUs (reference processing units: the reshaping curves and display management metadata of each
frame, an HEVC NAL unit of type 62 after the picture's slices) as vsr reads and rewrites them.

FFmpeg's HEVC decoder hands each frame's RPU over as side data (``DOVI_RPU_BUFFER``: the NAL unit's payload, its
emulation prevention bytes kept; :func:`buffer_of`).  An RPU says nothing of the picture's size except its active
area (the level-5 block: offsets of the letterbox bars, in pixels), which is scaled with the picture: each RPU is
read as far as its metadata blocks (:func:`parse`), the offsets rewritten where it has them and its CRC-32 made
again (:func:`scaled`).  Syntax: ETSI GS CCM 001; checked against FFmpeg's parser (tests) and real streams' RPUs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from vsr.video import side_data
from vsr.video.bitstream import escaped, unescaped

PREFIX = 0x19  # rpu_nal_prefix
NAL_HEADER = bytes([62 << 1, 0x01])  # HEVC NAL unit type 62 (UNSPEC62), layer 0, TemporalId 0
FINAL = 0x80  # the byte after the CRC-32
L5_FIELD = 13  # bits of each active-area offset
# FFmpeg's and dovi_tool's bound on an RPU's ext_block_length, and on num_ext_blocks
_MAX_BLOCKS = 255


class NotRpu(ValueError):
    """Bytes that are not an RPU this reads (damaged, or a syntax it does not know)."""


@dataclass(frozen=True)
class Rpu:
    """One RPU: ``body`` its bytes from ``rpu_type`` to the CRC-32 (emulation prevention removed), ``trailing`` the
    zero bytes after its final byte; ``profile`` the profile its header says (5, 7, 8, 4; 0 where it says none),
    ``complete`` whether it holds its own mapping and display metadata (not one of a compressed stream that
    refers to an earlier RPU), ``l5`` the bit position in ``body`` of each level-5 block's four offsets."""

    body: bytes
    trailing: int
    profile: int
    complete: bool
    l5: tuple[int, ...]

    def offsets(self) -> list[tuple[int, int, int, int]]:
        """Each level-5 block's (left, right, top, bottom) offsets."""
        bits, total = int.from_bytes(self.body, "big"), len(self.body) * 8
        return [tuple((bits >> (total - at - L5_FIELD * (i + 1))) & ((1 << L5_FIELD) - 1) for i in range(4))
                for at in self.l5]


class _Bits:
    """A big-endian bit reader of ``data``."""

    def __init__(self, data: bytes) -> None:
        self.value, self.total, self.pos = int.from_bytes(data, "big"), len(data) * 8, 0

    def u(self, n: int) -> int:
        if self.pos + n > self.total:
            raise NotRpu("ends early")
        self.pos += n
        return (self.value >> (self.total - self.pos)) & ((1 << n) - 1)

    def ue(self) -> int:
        zeros = 0
        while not self.u(1):
            zeros += 1
            if zeros > 32:
                raise NotRpu("an Exp-Golomb number of more than 32 bits")
        return (1 << zeros) - 1 + self.u(zeros)

    def se(self) -> int:
        k = self.ue()
        return (k + 1) // 2 if k % 2 else -(k // 2)

    def align(self) -> None:
        self.pos = -(-self.pos // 8) * 8

    @property
    def left(self) -> int:
        return self.total - self.pos


def crc32_mpeg2(data: bytes) -> int:
    """CRC-32/MPEG-2 (polynomial 0x04C11DB7, not reflected, initial 0xFFFFFFFF, no final XOR): the RPU's."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte << 24
        for _ in range(8):
            crc = ((crc << 1) ^ 0x04C11DB7) & 0xFFFFFFFF if crc & 0x80000000 else (crc << 1) & 0xFFFFFFFF
    return crc


def guess_profile(vdr_rpu_profile: int, full_range: int, el_spatial: int, disable_residual: int,
                  vdr_bit_depth: int) -> int:
    """The profile an RPU's header implies, as FFmpeg's and dovi_tool's readers take it (0: none)."""
    if vdr_rpu_profile == 0:
        return 5 if full_range else 0
    if vdr_rpu_profile == 1:
        if el_spatial and not disable_residual:
            return 7 if vdr_bit_depth == 12 else 4
        return 8
    return 0


def parse(buffer: bytes) -> Rpu:
    """The RPU of ``buffer`` (FFmpeg's ``DOVI_RPU_BUFFER``: from the 0x19 prefix, emulation prevention kept);
    :class:`NotRpu` where it is damaged (its CRC-32 too) or of a syntax this does not read."""
    raw = unescaped(bytes(buffer))
    if len(raw) < 6 or raw[0] != PREFIX:
        raise NotRpu("no RPU prefix")
    end = len(raw.rstrip(b"\x00"))
    if end < 6 or raw[end - 1] != FINAL:
        raise NotRpu("no final byte")
    body = raw[1:end - 1]
    if crc32_mpeg2(body[:-4]) != int.from_bytes(body[-4:], "big"):
        raise NotRpu("CRC-32 mismatch")
    b = _Bits(body)
    if b.u(6) != 2:
        raise NotRpu("rpu_type is not 2")
    rpu_format, vdr_rpu_profile = b.u(11), b.u(4)
    b.u(4)  # vdr_rpu_level
    if not b.u(1) or rpu_format & 0x700:
        raise NotRpu("no sequence information, or an RPU format of another kind")
    b.u(1)  # chroma_resampling_explicit_filter_flag
    coef_type = b.u(2)
    if coef_type > 1:
        raise NotRpu(f"coefficient data type {coef_type}")
    denom = b.ue() if coef_type == 0 else 32
    b.u(2)  # vdr_rpu_normalized_idc
    full_range = b.u(1)
    bl_depth, el_depth, vdr_depth = b.ue() + 8, (b.ue() & 0xFF) + 8, b.ue() + 8
    b.u(1)  # spatial_resampling_filter_flag
    dm_compression, el_spatial, disable_residual = b.u(3), b.u(1), b.u(1)
    if bl_depth > 16 or el_depth > 16 or vdr_depth > 16:
        raise NotRpu("a bit depth above 16")
    dm_present, use_prev = b.u(1), b.u(1)
    if use_prev:
        b.ue()  # prev_vdr_rpu_id
    else:
        _mapping(b, bl_depth, el_depth, denom if coef_type == 0 else None, not disable_residual)
    l5: list[int] = []
    if dm_present:
        _display_management(b, dm_compression, l5)
    profile = guess_profile(vdr_rpu_profile, full_range, el_spatial, disable_residual, vdr_depth)
    return Rpu(body, len(raw) - end, profile, not use_prev and dm_present and not dm_compression, tuple(l5))


def _coef(b: _Bits, denom: int | None, signed: bool) -> None:
    """A coefficient: fixed point (an Exp-Golomb whole part and ``denom`` bits), else a 32-bit float."""
    if denom is None:
        b.u(32)
        return
    b.se() if signed else b.ue()
    b.u(denom)


def _mapping(b: _Bits, bl_depth: int, el_depth: int, denom: int | None, nlq: bool) -> None:
    """The rest of the header and the mapping (``vdr_rpu_data_payload``): read past."""
    b.ue()  # vdr_rpu_id
    b.ue()  # mapping_color_space
    b.ue()  # mapping_chroma_format_idc
    pieces = []
    for _ in range(3):
        pivots = b.ue() + 2
        if pivots > 9:
            raise NotRpu(f"{pivots} pivots")
        b.u(bl_depth * pivots)
        pieces.append(pivots - 1)
    if nlq:
        if b.u(3) != 0:  # nlq_method_idc: linear with dead zone, the one there is
            raise NotRpu("a non-linear quantizer of another kind")
        b.u(2 * bl_depth)
    b.ue()  # num_x_partitions_minus1
    b.ue()  # num_y_partitions_minus1
    for count in pieces:
        for _ in range(count):
            kind = b.ue()
            if kind == 0:  # polynomial
                order = b.ue() + 1
                if order > 2 or (order == 1 and b.u(1)):
                    raise NotRpu("a polynomial of another order, or interpolated")
                for _ in range(order + 1):
                    _coef(b, denom, True)
            elif kind == 1:  # multivariate multiple regression
                order = b.u(2) + 1
                if order > 3:
                    raise NotRpu("an MMR of order 4")
                for _ in range(1 + 7 * order):
                    _coef(b, denom, True)
            else:
                raise NotRpu(f"mapping {kind}")
    if nlq:
        for _ in range(3):
            b.u(el_depth)  # nlq_offset
            for _ in range(3):  # vdr_in_max, linear dead zone slope, threshold
                _coef(b, denom, False)


def _display_management(b: _Bits, compressed: int, l5: list[int]) -> None:
    """``vdr_dm_data_payload``: read past, the position of each level-5 block kept in ``l5``."""
    b.ue(), b.ue(), b.ue()  # affected_dm_metadata_id, current_dm_metadata_id, scene_refresh_flag
    if not compressed:
        # YCbCr to RGB: 9 coefficients, 3 offsets; RGB to LMS: 9; EOTF and its 3 parameters, the last 32 bits;
        # bit depth, colour space, chroma format, range; source min and max PQ, diagonal
        b.u(9 * 16 + 3 * 32 + 9 * 16 + 3 * 16 + 32 + 5 + 2 + 2 + 2 + 12 + 12 + 10)
    _blocks(b, 1, l5)
    if b.left > 40:  # more than alignment and the CRC-32: the second set (CM v4.0)
        _blocks(b, 2, l5)


def _blocks(b: _Bits, version: int, l5: list[int]) -> None:
    count = b.ue()
    if count > _MAX_BLOCKS:
        raise NotRpu(f"{count} metadata blocks")
    b.align()
    for _ in range(count):
        length, level = b.ue(), b.u(8)
        if length > 1024 or b.left < length * 8:
            raise NotRpu("a metadata block runs past the end")
        if version == 1 and level == 5:
            if length * 8 < 4 * L5_FIELD:
                raise NotRpu("a level-5 block too short")
            l5.append(b.pos)
        b.pos += length * 8


def _scaled_offset(value: int, scale: int | Fraction) -> int:
    return min(math.floor(value * scale + Fraction(1, 2)), (1 << L5_FIELD) - 1)


def scaled(rpu: Rpu, scale: int | Fraction) -> bytes:
    """``rpu`` for a picture ``scale`` times as wide and high, as a ``DOVI_RPU_BUFFER`` holds it (prefix, emulation
    prevention, final byte, its trailing zeros): each active-area offset scaled (saturating at 13 bits) and the
    CRC-32 made again.  The bytes it came in where there is nothing to change."""
    body = rpu.body
    if rpu.l5 and scale != 1:
        bits, total = int.from_bytes(body, "big"), len(body) * 8
        mask = (1 << L5_FIELD) - 1
        for at in rpu.l5:
            for i in range(4):
                shift = total - at - L5_FIELD * (i + 1)
                value = _scaled_offset((bits >> shift) & mask, scale)
                bits = bits & ~(mask << shift) | value << shift
        head = bits.to_bytes(len(body), "big")[:-4]
        body = head + crc32_mpeg2(head).to_bytes(4, "big")
    return escaped(bytes([PREFIX]) + body + bytes([FINAL])) + b"\x00" * rpu.trailing


def nal(buffer: bytes) -> bytes:
    """The HEVC NAL unit (without start code or length) of an RPU as a ``DOVI_RPU_BUFFER`` holds it."""
    return NAL_HEADER + bytes(buffer)


def buffer_of(frame) -> bytes | None:
    """A decoded frame's RPU (its ``DOVI_RPU_BUFFER``), or None."""
    for sd in side_data.entries(frame):
        if sd.type.name == "DOVI_RPU_BUFFER":
            return bytes(sd)
    return None


def rescaled(buffer: bytes, scale: int | Fraction) -> bytes:
    """A source frame's RPU for its frame ``scale`` times larger (:func:`scaled`); one this cannot read as it
    came (a decoder judges it as it would the source's)."""
    try:
        return scaled(parse(buffer), scale)
    except NotRpu:
        return bytes(buffer)
