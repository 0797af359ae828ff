"""Closed captions carried in the video stream: ATSC A/53 Part 4 ``cc_data`` (CEA-608 and CEA-708), as broadcast
H.264, HEVC and MPEG-2 streams hold them, one packet of caption bytes a frame.

FFmpeg's decoders hand them over as a frame's ``A53_CC`` side data; a frame vsr encodes is a new one, which
PyAV cannot give side data to, so libx264's own ``a53cc`` never sees them.  Instead the caption bytes follow
their frame by its timestamp (:class:`Captions`) and go into the encoded packet of the same timestamp as the SEI
message an encoder writes for them (:func:`sei_nal`: ``user_data_registered_itu_t_t35``, ATSC's ``GA94``),
before the picture's first slice (:func:`inject`).  An H.264 or HEVC output keeps them (in every container:
the muxers rewrite Annex B as they need); any other codec cannot hold them, which is said once.
"""

from __future__ import annotations

import re
import threading
import warnings

import av

# output codecs whose pictures carry A/53 captions in an SEI message (FFmpeg's codec names, any encoder)
CARRIERS = ("h264", "hevc")
# the SEI payload's head: ITU-T T.35 country (USA), provider (ATSC), user identifier "GA94", cc_data type
_T35_ATSC = bytes([0xB5, 0x00, 0x31]) + b"GA94" + bytes([0x03])
_START = re.compile(b"\x00\x00\x01")


def a53_of(frame) -> bytes | None:
    """The frame's caption bytes (``cc_data``: 3 bytes a caption packet), or None."""
    try:
        sd = frame.side_data["A53_CC"]
    except KeyError:
        return None
    data = bytes(sd)
    data = data[:len(data) - len(data) % 3]  # whole caption packets
    return data or None


class Captions:
    """The caption bytes of the frames decoded so far, by timestamp (in the source's time base), until the sink
    takes them; ``first`` is the index of the first frame that had any (None: none yet). Filled by the decoding
    thread, read by the encoding one."""

    def __init__(self) -> None:
        self._by_pts: dict[int, bytes] = {}
        self._lock = threading.Lock()
        self.first: int | None = None

    def put(self, index: int, pts: int, data: bytes | None) -> None:
        if data is None:
            return
        with self._lock:
            self._by_pts[pts] = data
            if self.first is None:
                self.first = index

    def take(self, pts: int) -> bytes | None:
        with self._lock:
            return self._by_pts.pop(pts, None)


def _escaped(rbsp: bytes) -> bytes:
    """``rbsp`` with emulation prevention: a 0x03 after each two zero bytes that a byte of 0 to 3 follows."""
    out, zeros = bytearray(), 0
    for b in rbsp:
        if zeros >= 2 and b <= 3:
            out.append(3)
            zeros = 0
        out.append(b)
        zeros = zeros + 1 if b == 0 else 0
    return bytes(out)


def sei_nal(cc: bytes, codec: str) -> bytes:
    """One SEI NAL unit (without start code or length) holding ``cc`` (``cc_data``, 3 bytes a caption packet):
    an H.264 SEI, or an HEVC prefix SEI; a message per 31 packets (``cc_count`` has 5 bits; a decoder joins
    them, as it does a field pair's)."""
    if not cc or len(cc) % 3:
        raise ValueError(f"cc_data of {len(cc)} bytes: a positive multiple of 3")
    messages = b""
    for at in range(0, len(cc), 93):
        part = cc[at:at + 93]
        payload = _T35_ATSC + bytes([0x40 | len(part) // 3, 0xFF]) + part + b"\xff"  # process_cc_data, em_data, marker
        size = len(payload)
        messages += bytes([4]) + b"\xff" * (size // 255) + bytes([size % 255]) + payload  # type 4: T.35 registered
    header = bytes([0x06]) if codec == "h264" else bytes([39 << 1, 0x01])  # HEVC: PREFIX_SEI, layer 0, tid 1
    return header + _escaped(messages + b"\x80")  # rbsp_trailing_bits


def _is_vcl(nal: bytes, codec: str) -> bool:
    kind = nal[0] & 0x1F if codec == "h264" else (nal[0] >> 1) & 0x3F
    return 1 <= kind <= 5 if codec == "h264" else kind <= 31


def _annexb_units(data: bytes) -> list[tuple[int, int]]:
    """(start of the start code, start of the NAL unit) of each NAL unit in Annex B ``data``."""
    out = []
    for m in _START.finditer(data):
        begin = m.start() - 1 if m.start() > 0 and data[m.start() - 1] == 0 else m.start()
        out.append((begin, m.end()))
    return out


def inject(data: bytes, nal: bytes, codec: str, length_size: int | None = None) -> bytes:
    """The access unit ``data`` with ``nal`` inserted before its first slice: Annex B (``length_size`` None:
    as encoders hand packets to FFmpeg's muxers), or NAL units each after a big-endian length of
    ``length_size`` bytes."""
    if length_size is None:
        for begin, at in _annexb_units(data):
            if at < len(data) and _is_vcl(data[at:at + 2], codec):
                return data[:begin] + b"\x00\x00\x00\x01" + nal + data[begin:]
        return data + b"\x00\x00\x00\x01" + nal
    pos = 0
    while pos + length_size < len(data):
        n = int.from_bytes(data[pos:pos + length_size], "big")
        if _is_vcl(data[pos + length_size:pos + length_size + 2], codec):
            break
        pos += length_size + n
    return data[:pos] + len(nal).to_bytes(length_size, "big") + nal + data[pos:]


class CaptionWriter:
    """A sink's side of :class:`Captions`: each written frame's caption bytes, taken by its source timestamp and
    held by its output one until the encoder hands over that frame's packet, which then gets them
    (:meth:`packet`); where the output ``codec`` (FFmpeg's name, e.g. "h264") cannot carry them, said once."""

    def __init__(self, captions: Captions | None, codec: str) -> None:
        self.captions, self.codec = captions, codec
        self._held: dict[int, bytes] = {}
        self.dropped = False

    def frame(self, pts_src: int, pts_out: int) -> None:
        data = None if self.captions is None else self.captions.take(pts_src)
        if data is None:
            return
        if self.codec in CARRIERS:
            self._held[pts_out] = data
        elif not self.dropped:
            self.dropped = True
            warnings.warn(f"the source's closed captions (ATSC A/53 in its video, from frame {self.captions.first}) "
                          f"cannot follow into {self.codec}: dropped (an H.264 or HEVC output keeps them)",
                          stacklevel=3)

    def packet(self, pkt):
        """``pkt``, or a copy of it with its frame's captions before its first slice."""
        data = self._held.pop(pkt.pts, None) if self._held else None
        if data is None:
            return pkt
        out = av.Packet(inject(bytes(pkt), sei_nal(data, self.codec), self.codec))
        out.pts, out.dts, out.duration, out.time_base = pkt.pts, pkt.dts, pkt.duration, pkt.time_base
        out.is_keyframe = pkt.is_keyframe
        return out
