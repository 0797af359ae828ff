"""360-degree and stereoscopic video: a source's projection (equirectangular, cubemap; its yaw, pitch and roll)
and stereo layout (side by side, top and bottom, ...), without which a player shows a 360 video as a flat,
stretched picture and both eyes' pictures side by side.

FFmpeg's demuxers read them (mp4/mov ``st3d`` and ``sv3d``, Google's Spherical Video V1 XML, Matroska's
``StereoMode`` and ``Projection``) into stream side data that its decoders put on every frame; its muxers write
them only from a stream's side data, which PyAV cannot set.  So vsr reads them from the first decoded frame
(:func:`read_view`) and writes them into the closed file itself (:func:`write_container_view`), as FFmpeg's muxers
would: boxes of the video sample entry (Spherical Video V2: :mod:`vsr.video.isobmff`) or elements of the track's
``Video`` (:mod:`vsr.video.matroska`).  Equirectangular bounds are fractions of the picture and stay; a cubemap's
padding is pixels and is scaled with it.
"""

from __future__ import annotations

import struct
from fractions import Fraction
from dataclasses import dataclass, replace

import numpy as np

from vsr.video import isobmff, matroska, side_data
from vsr.video.track_metadata import CONTAINERS, TrackMetadata, add_track_metadata

# AVSphericalProjection
EQUIRECT, CUBEMAP, EQUIRECT_TILE = 0, 1, 2
PROJECTIONS = {EQUIRECT: "equirectangular", CUBEMAP: "cubemap", EQUIRECT_TILE: "tiled equirectangular",
               3: "half equirectangular", 4: "rectilinear", 5: "fisheye", 6: "parametric immersive"}
# AVStereo3DType -> Matroska's StereoMode (left eye first, right eye first: AV_STEREO3D_FLAG_INVERT)
STEREO = {0: "2D", 1: "side by side", 2: "top and bottom", 3: "frame alternate", 4: "checkerboard",
          5: "side by side (quincunx)", 6: "interleaved lines", 7: "interleaved columns", 8: "unspecified"}
_MKV_STEREO = {0: (0, 0), 1: (1, 11), 2: (3, 2), 3: (13, 14), 4: (5, 4), 6: (7, 6), 7: (9, 8)}
_MP4_STEREO = {0: 0, 2: 1, 1: 2}  # st3d's stereo_mode: monoscopic, top-bottom, left-right
INVERT = 1
# Matroska's IDs (RFC 9559)
STEREO_MODE, PROJECTION = 0x53B8, 0x7670
PROJECTION_TYPE, PROJECTION_PRIVATE, POSE_YAW, POSE_PITCH, POSE_ROLL = 0x7671, 0x7672, 0x7673, 0x7674, 0x7675


@dataclass(frozen=True)
class Spherical:
    """``AVSphericalMapping``: the projection, its yaw, pitch and roll in degrees (16.16 fixed point), a tiled
    equirectangular picture's bounds (left, top, right, bottom: fractions in 0.32 fixed point), a cubemap's padding
    in pixels."""

    projection: int
    yaw: int = 0
    pitch: int = 0
    roll: int = 0
    bounds: tuple[int, int, int, int] = (0, 0, 0, 0)
    padding: int = 0

    @classmethod
    def from_side_data(cls, data: bytes) -> "Spherical":
        v = np.frombuffer(data, "=i4", count=9)
        u = v.astype(np.int64) & 0xFFFFFFFF
        return cls(int(v[0]), int(v[1]), int(v[2]), int(v[3]), (int(u[4]), int(u[5]), int(u[6]), int(u[7])),
                   int(u[8]))

    @property
    def name(self) -> str:
        return PROJECTIONS.get(self.projection, f"projection {self.projection}")

    def scaled(self, scale: int | Fraction) -> "Spherical":
        return replace(self, padding=min(round(self.padding * scale), 0xFFFFFFFF))

    def describe(self) -> dict:
        return {"projection": self.name, "yaw": self.yaw / 65536, "pitch": self.pitch / 65536,
                "roll": self.roll / 65536}


@dataclass(frozen=True)
class Stereo:
    """``AVStereo3D``'s frame packing (``kind``) and whether the right eye's picture comes first."""

    kind: int
    inverted: bool = False

    @classmethod
    def from_side_data(cls, data: bytes) -> "Stereo":
        v = np.frombuffer(data, "=i4", count=2)
        return cls(int(v[0]), bool(v[1] & INVERT))

    @property
    def name(self) -> str:
        return STEREO.get(self.kind, f"stereo type {self.kind}") + (" (right eye first)" if self.inverted else "")


@dataclass(frozen=True)
class View:
    """What a player needs to show the pictures: their projection and their stereo layout (each None: none)."""

    spherical: Spherical | None = None
    stereo: Stereo | None = None

    def describe(self) -> dict:
        return {"projection": self.spherical.describe() if self.spherical else None,
                "stereo": self.stereo.name if self.stereo else None}


def read_view(frame) -> View | None:
    """The projection and stereo layout of a source whose first decoded frame is ``frame`` (None: neither)."""
    spherical = stereo = None
    for sd in side_data.entries(frame):
        name = sd.type.name
        if name == "SPHERICAL":
            spherical = Spherical.from_side_data(bytes(sd))
        elif name == "STEREO3D":
            stereo = Stereo.from_side_data(bytes(sd))
    return View(spherical, stereo) if spherical is not None or stereo is not None else None


def _full(kind: bytes, body: bytes) -> bytes:
    return isobmff.box(kind, b"\0\0\0\0" + body)  # version 0, flags 0


def mp4_boxes(view: View) -> tuple[list[bytes], list[str]]:
    """The ``st3d`` and ``sv3d`` boxes of ``view`` (Spherical Video V2, as FFmpeg's mov muxer writes them), and
    what of it they cannot say."""
    out, lost = [], []
    st, sp = view.stereo, view.spherical
    if st is not None:
        if st.kind in _MP4_STEREO and not st.inverted:
            out.append(_full(b"st3d", bytes([_MP4_STEREO[st.kind]])))
        else:
            lost.append(f"{st.name} stereo layout")
    if sp is not None:
        if sp.projection in (EQUIRECT, EQUIRECT_TILE):
            left, top, right, bottom = sp.bounds
            kind = _full(b"equi", struct.pack(">IIII", top, bottom, left, right))
        elif sp.projection == CUBEMAP:
            kind = _full(b"cbmp", struct.pack(">II", 0, sp.padding))  # layout 0: the only one defined
        else:
            lost.append(f"{sp.name} projection")
            return out, lost
        pose = _full(b"prhd", struct.pack(">iii", sp.yaw, sp.pitch, sp.roll))
        out.append(isobmff.box(b"sv3d", _full(b"svhd", b"vsr\0") + isobmff.box(b"proj", pose + kind)))
    return out, lost


def matroska_elements(view: View) -> tuple[bytes, list[str]]:
    """``StereoMode`` and ``Projection`` of ``view`` (children of a track's ``Video``), and what of it they cannot
    say."""
    out, lost = b"", []
    st, sp = view.stereo, view.spherical
    if st is not None:
        if st.kind in _MKV_STEREO:
            out += matroska.uint(STEREO_MODE, _MKV_STEREO[st.kind][st.inverted])
        else:
            lost.append(f"{st.name} stereo layout")
    if sp is not None:
        if sp.projection in (EQUIRECT, EQUIRECT_TILE):
            left, top, right, bottom = sp.bounds
            kind, private = 1, b"\0\0\0\0" + struct.pack(">IIII", top, bottom, left, right)
        elif sp.projection == CUBEMAP:
            kind, private = 2, b"\0\0\0\0" + struct.pack(">II", 0, sp.padding)
        else:
            lost.append(f"{sp.name} projection")
            return out, lost
        body = matroska.uint(PROJECTION_TYPE, kind) + matroska.element(PROJECTION_PRIVATE, private)
        for eid, value in ((POSE_YAW, sp.yaw), (POSE_PITCH, sp.pitch), (POSE_ROLL, sp.roll)):
            if value:
                body += matroska.double(eid, value / 65536)
        out += matroska.element(PROJECTION, body)
    return out, lost


def write_container_view(path, container: str, view: View | None, scale: int | Fraction) -> str | None:
    """Write ``view`` (its cubemap padding ``scale`` times) into the closed file at ``path`` of FFmpeg's format
    ``container`` (None: a stream, not rewritten).  Returns what could not follow (one line), or None."""
    meta, said = view_metadata(path is not None, container, view, scale)
    try:
        add_track_metadata(path, container, meta)
    except isobmff.NotWritable as e:
        return view_not_written(container, view, e)
    return said


def view_metadata(file: bool, container: str, view: View | None,
                  scale: int | Fraction) -> tuple[TrackMetadata, str | None]:
    """``view`` (its cubemap padding ``scale`` times) as a ``container`` file (``file``; else a stream, which
    holds none) holds it beside the video track, and the line that says what it cannot hold, or None."""
    if view is None:
        return TrackMetadata(), None
    view = _scaled(view, scale)
    if not file or container not in CONTAINERS:
        where = f"this {container} output" if file else "a stream"
        return TrackMetadata(), (f"the source's {_what(view)} cannot be written into {where}: players will show the "
                                 "pictures flat (.mp4, .mov, .mkv and .webm keep it)")
    if container in ("mp4", "mov"):
        boxes, lost = mp4_boxes(view)
        meta = TrackMetadata(boxes=boxes)
    else:
        elements, lost = matroska_elements(view)
        meta = TrackMetadata(video=elements)
    said = (f"the source's {' and '.join(lost)} cannot be written into this {container} output: dropped"
            if lost else None)
    return meta, said


def view_not_written(container: str, view: View, e: Exception) -> str:
    """The line that says :func:`view_metadata` could not be written into a ``container`` file (``e``: why)."""
    return f"the source's {_what(view)} could not be written into the {container} file ({e})"


def _scaled(view: View, scale: int | Fraction) -> View:
    return replace(view, spherical=view.spherical.scaled(scale)) if view.spherical is not None else view


def _what(view: View) -> str:
    return " and ".join(x for x in (view.spherical and f"{view.spherical.name} projection",
                                    view.stereo and f"{view.stereo.name} stereo layout") if x)
