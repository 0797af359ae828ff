"""Entering a video mid-way, only where that decodes exactly as a decode from the top does.

A seek lands on a keyframe, and on most files decoding from there gives the same pictures as decoding from the
top.  Not on all: on the cockatoo clip in ``shared/data/videos`` (H.264 4:4:4) every frame decoded after a seek
to its later IDR frames (76, 145) differs from the decode from the top, and FFmpeg flags only some of them
corrupt.  So no keyframe is trusted untested:

- :func:`scan_video`: one decode from the top (no RGB conversion) records each frame's timestamp and a digest of
  its decoded picture, and which frames are keyframes;
- :func:`verify_entry`: seeks to one of those keyframes, decodes the frames a reader will need, and compares
  each timestamp and picture digest with the scan; an entry that differs anywhere is not used (the reader
  starts at an earlier verified entry, or the top);
- :func:`enter`, used by ``VideoSource(path, entry=...)``: seeks to a verified entry when decoding, and checks
  the entry frame's digest once more (another FFmpeg build, another machine); where it differs the caller
  decodes from the top instead.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import av
import numpy as np
from vsr.video.alpha import decoded
from vsr.video.reading import open_input
from vsr.video.streams import main_video

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EntryPoint:
    """Frame ``index`` (a keyframe, at timestamp ``pts``) where decoding can start; ``digest``: its picture's."""

    index: int
    pts: int
    digest: str


@dataclass(frozen=True)
class VideoScan:
    """A decode from the top: per frame (in decode order) its ``pts`` and picture ``digests``; ``keyframes``:
    the indices of the frames the decoder marked as keyframes."""

    pts: tuple[int | None, ...]
    digests: tuple[str, ...]
    keyframes: tuple[int, ...]

    @property
    def frames(self) -> int:
        return len(self.pts)

    @property
    def increasing(self) -> bool:
        """Every frame has a timestamp, later than the previous frame's: a seek by timestamp finds one frame, and
        the source keeps the timestamps as they are (it synthesises the others, counting from the top)."""
        return None not in self.pts and all(a < b for a, b in zip(self.pts, self.pts[1:]))

    def entry(self, index: int) -> EntryPoint:
        return EntryPoint(index, self.pts[index], self.digests[index])


def picture_digest(frame: av.VideoFrame) -> str:
    """A hash of a decoded picture's samples (line padding left out)."""
    h = hashlib.blake2b(digest_size=12)
    fmt = frame.format
    for i, plane in enumerate(frame.planes):
        row = plane.width * sum((c.bits + 7) // 8 for c in fmt.components if c.plane == i)
        rows = np.frombuffer(plane, np.uint8).reshape(plane.height, plane.line_size)
        h.update(np.ascontiguousarray(rows[:, :min(row, plane.line_size)]).data)
    return h.hexdigest()


def _open(path: Path):
    c = open_input(str(path))
    st = main_video(c)
    st.thread_type = "AUTO"  # as VideoSource decodes
    return c, st


def scan_video(path: str | Path, count=None) -> tuple[VideoScan, int | None]:
    """Decode ``path`` from the top once: every frame's timestamp and digest, and the keyframes; and, where
    given, ``count(frames, stream)``'s count of what else the same decoded frames make (the frames of an inverse
    telecine), in the same pass."""
    pts, digests, keys = [], [], []
    c, st = _open(Path(path))

    def recorded() -> Iterator[av.VideoFrame]:
        for frame in decoded(c, st):
            if frame.key_frame:
                keys.append(len(pts))
            pts.append(frame.pts)
            digests.append(picture_digest(frame))
            yield frame
    with c:
        counted = count(recorded(), st) if count is not None else None
        if count is None:
            for _ in recorded():
                pass
    return VideoScan(tuple(pts), tuple(digests), tuple(keys)), counted


def _seek(c, st, entry: EntryPoint, decode=None) -> Iterator[av.VideoFrame] | None:
    """Frames from ``entry`` on after a seek to it, or None where the first one is not the entry's picture."""
    c.seek(entry.pts, stream=st, backward=True, any_frame=False)
    frames = decoded(c, st) if decode is None else decode(c, st)
    for frame in frames:
        if frame.pts is not None and frame.pts < entry.pts:
            continue  # leading pictures shown before the keyframe: they belong to earlier frames
        if frame.pts != entry.pts or picture_digest(frame) != entry.digest:
            return None
        return itertools.chain([frame], frames)
    return None


def enter(c, st, entry: EntryPoint, decode=None) -> Iterator[av.VideoFrame] | None:
    """Seek ``c`` (its video stream ``st``, not yet decoded) to ``entry``: the frames from ``entry.index`` on, or
    None where the decoder does not give the entry's picture there (the caller decodes from the top then).
    ``decode(c, st)``: the frames of ``st`` (default :func:`vsr.video.alpha.decoded`)."""
    try:
        frames = _seek(c, st, entry, decode)
    except av.FFmpegError as e:
        log.warning("seek in %s to frame %d failed (%s): decoding from the top", c.name, entry.index, e)
        return None
    if frames is None:
        log.warning("frame %d of %s decodes differently after a seek than from the top: decoding from the top",
                    entry.index, c.name)
    return frames


def verify_entry(path: str | Path, scan: VideoScan, index: int, through: int) -> bool:
    """True when a seek to keyframe ``index`` decodes frames ``index .. through - 1`` exactly as ``scan``
    (the decode from the top) did: every timestamp and picture digest equal."""
    if not scan.increasing:
        return False
    c, st = _open(Path(path))
    with c:
        try:
            frames = _seek(c, st, scan.entry(index))
            if frames is None:
                return False
            i = index
            for frame in frames:
                if i >= through:
                    return True
                if frame.pts != scan.pts[i] or picture_digest(frame) != scan.digests[i]:
                    return False
                i += 1
            return i == scan.frames or i >= through
        except av.FFmpegError:
            return False
