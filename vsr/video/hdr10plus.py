"""HDR10+ (SMPTE ST 2094-40 dynamic metadata, as CTA-861 registers it in ITU-T T.35): a PQ picture's tone-mapping
hints for its scene, carried with each frame of an HEVC or AV1 stream; and HDR Vivid (CUVA 005, China's, in
T.35 too): a PQ or HLG picture's, in HEVC.

FFmpeg's decoders parse them into frame side data that no encoder takes back from PyAV's frames, so vsr takes the
messages' bytes from the source's packets instead (:func:`decoded`: each decoded frame's ``opaque`` is its
packet's payloads), keeps them by frame like closed captions (:mod:`vsr.video.captions`), and writes them into the
output's packet of the same frame: an HEVC prefix SEI or an AV1 metadata OBU (:mod:`vsr.video.bitstream`).  An
HDR10+ payload says nothing of the picture's size except the corners of its processing windows beyond the first
(rare): those are scaled with the picture (:func:`scaled`); an HDR Vivid one nothing at all.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from fractions import Fraction

from vsr.video.bitstream import nal_length_size, t35_payloads
from vsr.video.damage import past_damage

# the codecs whose streams carry it (FFmpeg's names), read from and written to
SOURCES = CARRIERS = ("hevc", "av1")
VIVID_CARRIERS = ("hevc",)  # (FFmpeg's AV1 decoders read no HDR Vivid)
HDR_TRANSFERS = (16, 18)  # AVColorTransferCharacteristic SMPTE ST 2084 (PQ), ARIB STD-B67 (HLG)
# country (USA), terminal provider (Samsung, for HDR10+), provider-oriented code, application identifier 4
HEAD = bytes([0xB5, 0x00, 0x3C, 0x00, 0x01, 0x04])
# country (China), terminal provider (CUVA), provider-oriented code 5, system start code 1
VIVID_HEAD = bytes([0x26, 0x00, 0x04, 0x00, 0x05, 0x01])
_WINDOWS_AT = 58  # bit offset of num_windows' end: country 8, provider 16, oriented 16, application 8 + 8, 2
# a processing window's fields after the first window (bit widths), and which hold pixel positions or lengths:
# upper-left x, y, lower-right x, y, ellipse centre x, y, rotation, three semi-axes, overlap option
_WINDOW = (16, 16, 16, 16, 16, 16, 8, 16, 16, 16, 1)
_UPPER_LEFT, _LOWER_RIGHT, _CENTRE, _AXES = (0, 1), (2, 3), (4, 5), (7, 8, 9)


def is_hdr10plus(payload: bytes) -> bool:
    return payload[:len(HEAD)] == HEAD and len(payload) > len(HEAD) + 1 and payload[len(HEAD)] <= 1  # version 0, 1


def is_vivid(payload: bytes) -> bool:
    return payload[:len(VIVID_HEAD)] == VIVID_HEAD


def found(data: bytes, codec: str, length_size: int | None) -> tuple[bytes, ...] | None:
    """The HDR10+ and HDR Vivid payloads (T.35, from the country code on; the first of each kind) of the access
    unit ``data``, or None."""
    out: dict[bool, bytes] = {}
    for payload in t35_payloads(data, codec, length_size):
        if is_hdr10plus(payload) or is_vivid(payload):
            out.setdefault(is_vivid(payload), payload)
    return tuple(out.values()) or None


def carried(payloads: tuple[bytes, ...], codec: str, scale: int | Fraction) -> list[bytes]:
    """Of one frame's ``payloads``, those an output of ``codec`` (FFmpeg's name) keeps, an HDR10+ one's windows
    scaled for a picture ``scale`` times larger."""
    return [scaled(p, scale) if not is_vivid(p) else p for p in payloads
            if codec in (VIVID_CARRIERS if is_vivid(p) else CARRIERS)]


def scaled(payload: bytes, scale: int | Fraction) -> bytes:
    """``payload`` for a picture ``scale`` times as wide and high (a whole or a fractional number: ``--scale``):
    each processing window after the first (whose extent is the whole picture) keeps the same part of it.  A
    window's corners are pixels (an upper-left one the first pixel its pixel grew into, a lower-right one the last,
    a centre the one at its middle), its lengths counts of them; each 16-bit field saturates."""
    bits, total = int.from_bytes(payload, "big"), len(payload) * 8
    windows = (bits >> (total - _WINDOWS_AT)) & 3
    if scale == 1 or windows <= 1:
        return payload
    at = _WINDOWS_AT
    for _ in range(windows - 1):
        for i, width in enumerate(_WINDOW):
            shift = total - at - width
            if shift < 0:
                return payload  # cut short: as it came
            value = (bits >> shift) & ((1 << width) - 1)
            if i in _UPPER_LEFT:
                new = math.floor(value * scale)
            elif i in _AXES:
                new = round(value * scale)
            elif i in _LOWER_RIGHT:
                new = math.ceil((value + 1) * scale) - 1
            elif i in _CENTRE:
                new = math.floor((value + Fraction(1, 2)) * scale)
            else:
                new = value
            new = min(new, (1 << width) - 1)
            bits = bits & ~(((1 << width) - 1) << shift) | new << shift
            at += width
    return bits.to_bytes(len(payload), "big")


def read_from(codec: str, transfer: int) -> bool:
    """Whether a source of ``codec`` (FFmpeg's name) and transfer characteristic ``transfer`` can hold HDR10+ or
    HDR Vivid: HEVC or AV1, PQ or HLG."""
    return codec in SOURCES and transfer in HDR_TRANSFERS


def carried_by(codec: str, name: str = "HDR10+") -> bool:
    """Whether an output of ``codec`` (FFmpeg's codec name, e.g. "hevc") keeps a source's ``name`` ("HDR10+",
    "HDR Vivid")."""
    return codec in (VIVID_CARRIERS if name == "HDR Vivid" else CARRIERS)


def decoded(c, st) -> Iterator:
    """``c.decode(st)``, each frame's ``opaque`` the HDR10+ and HDR Vivid payloads of the packet it came from
    (None: it had none) where ``st`` is a codec that carries them."""
    tag = tagger(st)

    def decode(packet):
        if tag is not None:
            tag(packet)
        return packet.decode()

    yield from past_damage(c, st, decode)  # (a damaged packet skipped)


def tagger(st):
    """A function that gives a packet of ``st`` (not yet decoded) its HDR10+ and HDR Vivid payloads as its
    ``opaque``, which the stream's decoder, told so here, copies to the packet's frames; None where ``st``'s codec
    carries none."""
    cc = st.codec_context
    codec = cc.codec.canonical_name if cc is not None else None
    if codec not in SOURCES:
        return None
    cc.copy_opaque = True
    size = nal_length_size(codec, cc.extradata)

    def tag(packet) -> None:
        if packet.size:
            packet.opaque = found(bytes(packet), codec, size)
    return tag
