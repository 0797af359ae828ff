"""Dolby Vision: a single-layer stream's RPUs (reference processing units: the reshaping curves and the display
management metadata of each frame, in an HEVC NAL unit of type 62 after the picture's slices) carried from a
source into an HEVC output frame by frame, and the track's configuration record (``dvcC``/``dvvC``) beside it.

FFmpeg's HEVC decoder hands each frame's RPU over as side data; no encoder takes it back from PyAV's frames, so
the sink appends it to the packet of the same frame (:class:`vsr.video.captions.PictureMessages`), its active
area scaled with the picture (:mod:`vsr.video.rpu`).

What follows: profile 8 (a base layer any HEVC decoder shows as HDR10, HLG or SDR: 8.1, 8.4, 8.2) and profile 5
(IPTPQc2, shown right only by a Dolby Vision decoder), into 10-bit 4:2:0 HEVC.  An enhancement layer (profiles
4 and 7) is not decoded, and its RPU describes a picture vsr does not make: those, and every other output, keep
what the base layer is (said in one line, :func:`carried`).

Syntax: ETSI GS CCM 001 (the RPU), Dolby's "Dolby Vision Streams Within the ISO Base Media File Format" (the
configuration record and its levels); checked against FFmpeg's RPU parser (tests) and real streams' RPUs.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import av

from vsr.video import matroska
from vsr.video.rpu import NotRpu, buffer_of, parse
from vsr.video.track_metadata import TrackMetadata

# level: the most pixels a second and the widest picture it admits (Dolby's table; level 13 the last)
LEVELS = {1: (1280 * 720 * 24, 1280), 2: (1280 * 720 * 30, 1280), 3: (1920 * 1080 * 24, 1920),
          4: (1920 * 1080 * 30, 2560), 5: (1920 * 1080 * 60, 3840), 6: (3840 * 2160 * 24, 3840),
          7: (3840 * 2160 * 30, 3840), 8: (3840 * 2160 * 48, 3840), 9: (3840 * 2160 * 60, 3840),
          10: (3840 * 2160 * 120, 3840), 11: (3840 * 2160 * 120, 7680), 12: (7680 * 4320 * 60, 7680),
          13: (7680 * 4320 * 120, 7680)}
CARRIED = (5, 8)  # the profiles that follow into an output


def level(width: int, height: int, rate: Fraction | None) -> int | None:
    """The lowest level that admits a ``width`` × ``height`` picture at ``rate`` frames a second (25 where it is
    unknown, as FFmpeg takes it); None where none does."""
    pps = width * height * (rate if rate else 25)
    for n, (most, widest) in LEVELS.items():
        if pps <= most and width <= widest:
            return n
    return None


def compatibility(profile: int, colour) -> int | None:
    """The base layer's signal compatibility ID of a ``profile`` stream in ``colour``
    (:class:`~vsr.video.colour.ColourSpec`): profile 5 none (0); profile 8 HDR10 (1), SDR BT.709 (2) or HLG (4);
    None where ``colour`` is none of those."""
    if profile == 5:
        return 0
    tags = (colour.matrix, colour.primaries, colour.transfer)
    return {(9, 9, 16): 1, (1, 1, 1): 2, (9, 9, 18): 4}.get(tags) if profile == 8 else None


def config_record(profile: int, level_: int, compatibility_id: int) -> bytes:
    """The 24-byte ``DOVIDecoderConfigurationRecord`` of a single-layer stream (version 1.0, RPU and base layer
    present, no enhancement layer)."""
    flags = profile << 9 | level_ << 3 | 1 << 2 | 0 << 1 | 1  # 7 + 6 bits, then RPU, EL, BL present
    return bytes([1, 0]) + (flags << 8 | compatibility_id << 4).to_bytes(3, "big") + bytes(19)


def config_box(record: bytes) -> bytes:
    """The sample entry's box of ``record``: ``dvcC`` up to profile 7, ``dvvC`` from 8 (to 10)."""
    kind = b"dvcC" if record[2] >> 1 <= 7 else b"dvvC"
    return (8 + len(record)).to_bytes(4, "big") + kind + record


def profile_of(frame) -> int | None:
    """The profile of a source whose first decoded frame is ``frame``, as its RPU says (0: an RPU this does not
    read: damaged, or AV1's); None where it has none (not Dolby Vision)."""
    buffer = buffer_of(frame)
    if buffer is None:
        return None
    try:
        return parse(buffer).profile
    except NotRpu:
        return 0


@dataclass(frozen=True)
class Output:
    """A Dolby Vision output stream: its ``profile``, ``level`` and base layer's ``compatibility`` ID."""

    profile: int
    level: int
    compatibility: int

    def record(self) -> bytes:
        return config_record(self.profile, self.level, self.compatibility)

    def describe(self) -> str:
        return f"{self.profile}.{self.compatibility}" if self.profile == 8 else str(self.profile)


def carried(profile: int | None, codec: str, pix_fmt: str, colour, size: tuple[int, int], rate: Fraction | None,
            deinterlaced: bool = False) -> tuple[Output | None, str | None]:
    """Whether a source of Dolby Vision ``profile`` (None: not Dolby Vision) follows into ``codec`` (FFmpeg's
    codec name, e.g. "hevc") in ``pix_fmt`` with output ``colour`` (:class:`~vsr.video.colour.ColourSpec`) at
    ``size`` (width, height) and ``rate``: the output stream, and the line that says what does not follow."""
    if profile is None:
        return None, None
    base = ("its colours are Dolby's IPTPQc2, which no player shows right without them" if profile == 5 else
            "the output is its base layer alone")
    if profile not in CARRIED:
        why = ("an enhancement layer, which is not decoded" if profile in (4, 7) else
               "RPUs of a kind vsr does not read (damaged, or AV1's)")
        return None, f"the source's Dolby Vision (profile {profile or 'unknown'}) has {why}: {base}"
    compatibility_id = compatibility(profile, colour)
    if deinterlaced:
        why = "deinterlaced frames, which its RPUs do not describe"
    elif codec != "hevc" or pix_fmt not in ("yuv420p10le", "p010le"):
        why = f"{codec} in {pix_fmt} (it needs 10-bit 4:2:0 HEVC: libx265, a video output's default for it)"
    elif compatibility_id is None:
        why = "a base layer tagged other than HDR10, HLG or SDR BT.709"
    else:
        n = level(*size, rate)
        out = Output(profile, n or max(LEVELS), compatibility_id)
        if n is not None:
            return out, None
        return out, (f"Dolby Vision: {size[0]}x{size[1]} at {float(rate or 25):.6g} fps is beyond its highest level "
                     f"({max(LEVELS)}), which the output says it is: players may refuse it")
    return None, f"the source's Dolby Vision (profile {profile}) cannot follow into {why}: {base}"


# the containers (FFmpeg's names) whose file vsr gives the configuration record (track_metadata)
RECORDED = ("mp4", "mov", "matroska")


def carried_into(info, codec: str, pix_fmt: str, size: tuple[int, int],
                 container=None) -> tuple[Output | None, str | None]:
    """:func:`carried` of the source ``info`` (:class:`~vsr.video.source.VideoInfo`) into the encoder ``codec`` in
    ``container`` (:class:`~vsr.video.encoder_choice.OutputContainer`): one that gets no record is said too."""
    out, said = carried(info.dolby_vision, av.Codec(codec, "w").canonical_name, pix_fmt,
                        info.colour.for_output(pix_fmt), size, info.rate, info.deinterlaced or info.film)
    if out is not None and container is not None and not (container.played and container.format in RECORDED):
        where = f"this {container.format} output" if container.played else "a stream"
        note = (f"Dolby Vision {out.describe()} follows into {where} as its RPUs alone, without the configuration "
                "record players look for first (an .mkv, .mp4 or .mov file holds it)")
        said = f"{said}; {note}" if said else note
    return out, said


_TAGS = {"matrix": "colorspace", "primaries": "color_primaries", "transfer": "color_trc"}


def tagged(out: Output | None, colour, tags: dict[str, int]) -> dict[str, int]:
    """An output stream's colour ``tags``; a profile 5 stream's say "unspecified" where its source did (IPTPQc2 is
    none of H.273's colours: vsr read its pixels with a guess, ``colour.guessed``, that its tags must not claim)."""
    if out is None or out.profile != 5:
        return tags
    return {k: 2 if any(_TAGS.get(g) == k for g in colour.guessed) else v for k, v in tags.items()}


# the sample entry of a profile 5 stream, which no HEVC decoder alone shows right: Dolby's own types
_ENTRY_TYPES = ((b"hvc1", b"dvh1"), (b"hev1", b"dvhe"))


def track_metadata(container: str, out: Output | None) -> TrackMetadata:
    """``out``'s configuration record as ``container`` (FFmpeg's format name) holds it beside the video track: a
    ``dvcC``/``dvvC`` box in the sample entry (mp4, mov; a profile 5 entry typed ``dvh1``), a
    ``BlockAdditionMapping`` in Matroska; nothing elsewhere (an MPEG-TS or raw stream has its RPUs only)."""
    if out is None:
        return TrackMetadata()
    record = out.record()
    if container in ("mp4", "mov"):
        return TrackMetadata(boxes=[config_box(record)], rename=_ENTRY_TYPES if out.profile == 5 else ())
    if container == "matroska":
        body = (matroska.element(matroska.ADD_ID_NAME, b"Dolby Vision configuration")
                + matroska.uint(matroska.ADD_ID_TYPE, int.from_bytes(config_box(record)[4:8], "big"), 4)
                + matroska.element(matroska.ADD_ID_EXTRA, record))
        return TrackMetadata(track=matroska.element(matroska.BLOCK_ADDITION_MAPPING, body))
    return TrackMetadata()
