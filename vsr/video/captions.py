"""Closed captions carried in the video stream: ATSC A/53 Part 4 ``cc_data`` (CEA-608 and CEA-708), as broadcast
H.264, HEVC and MPEG-2 streams hold them, one packet of caption bytes a frame; and the sink's side of all a
frame carries in its bitstream (captions, HDR10+, HDR Vivid, Dolby Vision's RPUs: :class:`PictureMessages`).

FFmpeg's decoders hand captions over as a frame's ``A53_CC`` side data; a frame vsr encodes is a new one, which
PyAV cannot give side data to, so libx264's own ``a53cc`` never sees them.  Instead the caption bytes follow
their frame by its timestamp (:class:`FrameStore`) and go into the encoded packet of the same timestamp as the
T.35 message an encoder writes for them (:func:`ga94`, ATSC's ``GA94``): an SEI message before the picture's
first slice, or an AV1 metadata OBU (:mod:`vsr.video.bitstream`).  An H.264, HEVC or AV1 output keeps them (in
every container: the muxers rewrite Annex B as they need); any other codec cannot hold them, which is said once.
"""

from __future__ import annotations

import threading
from fractions import Fraction
import warnings

import av

from vsr.video import hdr10plus, rpu
from vsr.video.bitstream import append, inject, inject_obus, metadata_obu, sei_nal
from vsr.video.colour import RANGE_FULL, ColourSpec
from vsr.video.mpeg4_colour import with_colour

# output codecs whose pictures carry A/53 captions (FFmpeg's codec names, any encoder): in an SEI message, or
# in AV1 a metadata OBU (A/53's T.35 payload, as FFmpeg's AV1 decoders read it)
CARRIERS = ("h264", "hevc", "av1")
# the SEI payload's head: ITU-T T.35 country (USA), provider (ATSC), user identifier "GA94", cc_data type
_T35_ATSC = bytes([0xB5, 0x00, 0x31]) + b"GA94" + bytes([0x03])


def a53_of(frame) -> bytes | None:
    """The frame's caption bytes (``cc_data``: 3 bytes a caption packet), or None."""
    try:
        sd = frame.side_data["A53_CC"]
    except KeyError:
        return None
    data = bytes(sd)
    data = data[:len(data) - len(data) % 3]  # whole caption packets
    return data or None


class FrameStore:
    """What the frames decoded so far carry (caption bytes, an HDR10+ payload, an alpha plane), by timestamp (in the
    source's time base), until the sink takes it; ``first`` is the index of the first frame that had any (None:
    none yet).
    Filled by the decoding thread, read by the encoding one."""

    def __init__(self) -> None:
        self._by_pts: dict[int, object] = {}
        self._lock = threading.Lock()
        self.first: int | None = None

    def put(self, index: int, pts: int, data) -> None:
        if data is None:
            return
        with self._lock:
            self._by_pts[pts] = data
            if self.first is None:
                self.first = index

    def take(self, pts: int):
        with self._lock:
            return self._by_pts.pop(pts, None)


def ga94(cc: bytes) -> list[bytes]:
    """The T.35 payloads (ATSC's ``GA94``) of ``cc`` (``cc_data``, 3 bytes a caption packet): one per 31 packets
    (``cc_count`` has 5 bits; a decoder joins them, as it does a field pair's)."""
    if not cc or len(cc) % 3:
        raise ValueError(f"cc_data of {len(cc)} bytes: a positive multiple of 3")
    return [_T35_ATSC + bytes([0x40 | len(part) // 3, 0xFF]) + part + b"\xff"  # process_cc_data, em_data, marker
            for part in (cc[at:at + 93] for at in range(0, len(cc), 93))]


class PictureMessages:
    """A sink's side of the source's :class:`FrameStore` s (``captions``; ``hdr10plus``, None where the source's
    is not read; ``dovi``, a Dolby Vision source's RPUs, which follow where ``rpus``): what each written frame
    carries, taken by its source timestamp and held by its output one until the encoder hands over that frame's
    packet, which then gets it (:meth:`packet`) as the output ``codec`` (FFmpeg's name, e.g. "h264") holds it.
    Captions that ``codec`` cannot carry are said once (HDR10+ and Dolby Vision by the encoder's choice,
    :func:`vsr.video.hdr.hdr_warnings`, :func:`vsr.video.dovi.carried`); an HDR10+ window and an RPU's active
    area are scaled with the picture.  ``colour``: an MPEG-4 Part 2 output's, said in its keyframes' headers."""

    def __init__(self, captions: FrameStore | None, hdr10plus: FrameStore | None, codec: str, scale: int | Fraction = 1,
                 length_size: int | None = None, dovi: FrameStore | None = None, rpus: bool = False,
                 colour: ColourSpec | None = None) -> None:
        self.captions, self.hdr10plus, self.codec, self.scale = captions, hdr10plus, codec, scale
        self.length_size = length_size
        self.dovi, self.rpus = dovi, rpus
        self._held: dict[int, list[bytes]] = {}
        self._rpus: dict[int, bytes] = {}
        self.dropped = False
        self.colour = colour  # (vsr.video.mpeg4_colour)

    def frame(self, pts_src: int, pts_out: int) -> None:
        payloads = self._captions(pts_src)
        dynamic = None if self.hdr10plus is None else self.hdr10plus.take(pts_src)
        if dynamic is not None:
            payloads += hdr10plus.carried(dynamic, self.codec, self.scale)
        if payloads:
            self._held[pts_out] = payloads
        data = None if self.dovi is None else self.dovi.take(pts_src)
        if data is not None and self.rpus:
            self._rpus[pts_out] = rpu.rescaled(data, self.scale)

    def _captions(self, pts_src: int) -> list[bytes]:
        data = None if self.captions is None else self.captions.take(pts_src)
        if data is None:
            return []
        if self.codec in CARRIERS:
            return ga94(data)
        if not self.dropped:
            self.dropped = True
            warnings.warn(f"the source's closed captions (ATSC A/53 in its video, from frame {self.captions.first}) "
                          f"cannot follow into {self.codec}: dropped (an H.264, HEVC or AV1 output keeps them)",
                          stacklevel=4)
        return []

    def packet(self, pkt):
        """``pkt``, or a copy of it with its frame's messages before its picture (its RPU after it)."""
        payloads = self._held.pop(pkt.pts, None) if self._held else None
        unit = self._rpus.pop(pkt.pts, None) if self._rpus else None
        described = self.codec == "mpeg4" and self.colour is not None and pkt.is_keyframe
        if payloads is None and unit is None and not described:
            return pkt
        data = bytes(pkt)
        if described:
            c = self.colour
            data = with_colour(data, c.matrix, c.range == RANGE_FULL, c.primaries, c.transfer)
        if payloads is not None and self.codec == "av1":
            data = inject_obus(data, b"".join(metadata_obu(p) for p in payloads))
        elif payloads is not None:
            data = inject(data, sei_nal(payloads, self.codec), self.codec, self.length_size)
        if unit is not None:
            data = append(data, rpu.nal(unit), self.length_size)
        out = av.Packet(data)
        out.pts, out.dts, out.duration, out.time_base = pkt.pts, pkt.dts, pkt.duration, pkt.time_base
        out.is_keyframe = pkt.is_keyframe
        return out
