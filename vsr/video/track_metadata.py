"""Metadata of the video track written into a closed output file, all of it in one rewrite: what FFmpeg's muxers
write only from a stream's side data, which PyAV cannot set (the HDR static metadata, :mod:`vsr.video.hdr`; a
360 video's view, :mod:`vsr.video.spherical`; Dolby Vision's configuration, :mod:`vsr.video.dovi`).  In mp4/mov:
boxes of the video sample entry, whose type may change too (the ``moov`` is rewritten, nothing else moves:
:mod:`vsr.video.isobmff`); in Matroska/WebM: children of the track's ``Colour``, ``Video`` and the track entry
itself (the clusters after ``Tracks`` move up once: :mod:`vsr.video.matroska`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

from vsr.video import isobmff, matroska
from vsr.video.isobmff import NotWritable

CONTAINERS = ("mp4", "mov", "matroska", "webm")


@dataclass(frozen=True)
class TrackMetadata:
    """What to add to a video track: sample entry ``boxes`` (mp4, mov) and the entry's new type by its old one
    (``rename``: ``((b"hvc1", b"dvh1"), ...)``), or Matroska ``colour`` (children of ``Colour``), ``video``
    (children of ``Video``: ``StereoMode``, ``Projection``) and ``track`` (of the track entry:
    ``BlockAdditionMapping``)."""

    boxes: list[bytes] = field(default_factory=list)
    colour: bytes = b""
    video: bytes = b""
    track: bytes = b""
    rename: tuple[tuple[bytes, bytes], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.boxes or self.colour or self.video or self.track or self.rename)

    def __add__(self, other: "TrackMetadata") -> "TrackMetadata":
        return TrackMetadata(self.boxes + other.boxes, self.colour + other.colour, self.video + other.video,
                             self.track + other.track, self.rename + other.rename)


def add_track_metadata(path: Path, container: str, meta: TrackMetadata) -> None:
    """Write ``meta`` into the closed file at ``path`` of FFmpeg's format ``container`` (one of
    :data:`CONTAINERS`); :class:`~vsr.video.isobmff.NotWritable` for a layout this does not change."""
    if not meta:
        return
    if container in ("mp4", "mov"):
        if meta.boxes or meta.rename:
            isobmff.add_entry_boxes(path, meta.boxes, dict(meta.rename))
    elif meta.colour or meta.video or meta.track:
        matroska.add_video_elements(path, meta.colour, meta.video, meta.track)


def display_metadata(container: str, cc) -> TrackMetadata:
    """The display shape of the frames of encoder ``cc`` (None: none to write) in a Matroska/WebM file: its muxer
    writes one only from the stream's sample aspect ratio, which PyAV cannot set (mp4's ``pasp`` comes from the
    encoder's, which it sets), and without it AV1, VP9 and FFV1, whose streams hold no aspect, played square."""
    sar: Fraction | None = cc.sample_aspect_ratio if cc is not None else None
    if container not in ("matroska", "webm") or not sar or sar == 1:
        return TrackMetadata()
    return TrackMetadata(video=matroska.display_size(container == "webm", sar, cc.width, cc.height))


def display_not_written(container: str, e: NotWritable) -> str:
    """The line that says :func:`display_metadata` could not be written into a ``container`` file (``e``: why)."""
    return f"the sample aspect ratio could not be written into the {container} file ({e}): players may show it square"


__all__ = ["CONTAINERS", "TrackMetadata", "add_track_metadata", "display_metadata", "display_not_written"]
