"""Frame sources: a video file (PyAV) or a folder of PNG frames, yielding float32 RGB frames in order.

Opening a source checks everything a user can get wrong (missing path, not a video, no video stream,
no frames) and raises :class:`vsr.errors.InputError` with one line.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Iterator

import av
import numpy as np

from vsr.errors import InputError
from vsr.video.colour import ColourSpec, bit_depth, decode_rgb

log = logging.getLogger(__name__)

PNG_TIME_BASE = Fraction(1, 25)


@dataclass(frozen=True)
class SourceFrame:
    """One decoded frame: ``rgb`` float32 ``(3, H, W)`` in [0, 1]; ``pts``/``duration`` in the source's
    time base (``duration`` may be 0 where the source does not say)."""

    index: int
    pts: int
    duration: int
    rgb: np.ndarray


@dataclass(frozen=True)
class VideoInfo:
    """What the writer needs to reproduce the source faithfully."""

    path: Path
    kind: str  # "video" or "png"
    width: int
    height: int
    pix_fmt: str
    bits: int
    colour: ColourSpec
    time_base: Fraction
    rate: Fraction | None  # average frame rate (informational: timestamps are copied, not recomputed)
    frames: int | None  # from the header or a count; None when unknown
    rotation: int = 0  # display rotation in degrees (counter-clockwise), kept as metadata
    sample_aspect_ratio: Fraction | None = None
    stream_index: int = 0
    metadata: dict = field(default_factory=dict)  # the video stream's tags (language, title, ...)
    container_metadata: dict = field(default_factory=dict)
    start_pts: int = 0
    duration_s: float | None = None

    @property
    def frames_estimate(self) -> int | None:
        """The frame count from the header, else duration x average rate (for progress bars only)."""
        if self.frames:
            return self.frames
        if self.duration_s and self.rate:
            return int(round(self.duration_s * float(self.rate)))
        return None


def _one_line(e: Exception) -> str:
    if isinstance(e, av.FFmpegError) and e.strerror:
        return e.strerror
    return (str(e).splitlines() or [type(e).__name__])[0][:200]


def open_source(path: str | Path) -> "VideoSource | PngFolderSource":
    p = Path(path)
    if not p.exists():
        raise InputError(f"no such file or folder: {p}")
    if p.is_dir():
        return PngFolderSource(p)
    return VideoSource(p)


class VideoSource:
    """Decodes the first video stream of a file.  ``frames()`` may be called once."""

    def __init__(self, path: Path):
        self.path = Path(path)
        if self.path.stat().st_size == 0:
            raise InputError(f"not a video file: {self.path} is empty")
        try:
            self._container = av.open(str(self.path), "r")
        except PermissionError:
            raise InputError(f"cannot read {self.path}: permission denied") from None
        except av.EOFError:
            raise InputError(f"zero frames: {self.path} ends before its first frame") from None
        except (av.FFmpegError, OSError, ValueError) as e:
            raise InputError(f"not a video file: {self.path} ({_one_line(e)})") from None
        try:
            self.info = self._probe()
        except BaseException:
            self._container.close()
            raise

    def _probe(self) -> VideoInfo:
        c = self._container
        if not c.streams.video:
            raise InputError(f"no video stream in {self.path}")
        st = c.streams.video[0]
        cc = st.codec_context
        if not cc.width or not cc.height or cc.pix_fmt is None:
            raise InputError(f"no decodable video stream in {self.path}")
        # the first frame decides format, colour tags and rotation; it also proves there is one
        first = self._first_frame(st)
        pix_fmt = first.format.name
        colour = ColourSpec.of(pix_fmt, first.width, first.height, int(first.colorspace), int(first.color_range),
                               int(first.color_primaries), int(first.color_trc))
        rotation = int(round(first.rotation or 0)) % 360
        frames = st.frames or None
        return VideoInfo(
            path=self.path, kind="video", width=first.width, height=first.height, pix_fmt=pix_fmt,
            bits=bit_depth(pix_fmt), colour=colour, time_base=st.time_base, rate=st.average_rate or st.guessed_rate,
            frames=frames, rotation=rotation, sample_aspect_ratio=cc.sample_aspect_ratio or st.sample_aspect_ratio,
            stream_index=st.index, metadata=dict(st.metadata), container_metadata=dict(c.metadata),
            start_pts=first.pts if first.pts is not None else 0,
            duration_s=(float(st.duration * st.time_base) if st.duration else
                        (c.duration / 1e6 if c.duration else None)))

    def _first_frame(self, st) -> av.VideoFrame:
        try:
            for frame in self._container.decode(st):
                return frame
        except (av.FFmpegError, ValueError) as e:
            raise InputError(f"cannot decode the video of {self.path} ({_one_line(e)})") from None
        raise InputError(f"zero frames: the video stream of {self.path} holds no decodable frame")

    def frames(self, start: int = 0) -> Iterator[SourceFrame]:
        """Frames ``start, start + 1, ...`` (indices in presentation order, as in a decode from the top).

        For ``start > 0`` the stream is seeked: the packets are read without decoding to find the timestamp of
        frame ``start``, the demuxer jumps to the keyframe before it, and decoded frames before that timestamp
        are dropped unconverted.  Where timestamps cannot say which frame is which (missing or repeated packet
        timestamps, a seek that misses) or the decoder flags a frame after the seek as corrupt (some streams'
        keyframes do not decode on their own), it goes on by decoding from the top instead, still without
        converting the frames it skips.
        """
        target = self._pts_of_frame(start) if start > 0 else None
        resume = start
        if target is not None:
            for f, corrupt in self._decode(start, target):
                if corrupt or (resume == start and f.pts != target):
                    # the decoder could not rebuild this frame from the keyframe it was given, or the seek landed
                    # elsewhere: trust only a decode from the top from here on
                    log.info("seek in %s: frame %d not reproducible after the seek; decoding from the start",
                             self.path, resume)
                    break
                yield f
                resume = f.index + 1
            else:
                if resume > start:
                    return
        for f, _ in self._decode(resume, None):
            yield f

    def _decode(self, start: int, target: int | None) -> Iterator[tuple[SourceFrame, bool]]:
        """``(frame, decoder flagged it corrupt)`` from frame ``start``; ``target``: seek to that pts first."""
        # a fresh demuxer: seeking back after the probe is not exact in every container
        self._container.close()
        c = self._container = av.open(str(self.path), "r")
        st = c.streams.video[0]
        st.thread_type = "AUTO"
        spec = self.info.colour
        index = 0
        last_pts = None
        last_dur = 0
        try:
            if target is not None:
                c.seek(target, stream=st, backward=True, any_frame=False)
                index = start
            for frame in c.decode(st):
                pts = frame.pts
                if target is not None and (pts is None or pts < target):
                    continue  # before frame ``start``: decoded only to reach it
                if pts is None:  # some raw streams: continue the timeline
                    pts = 0 if last_pts is None else last_pts + max(last_dur, 1)
                dur = int(frame.duration or 0)
                if index >= start:
                    yield SourceFrame(index, int(pts), dur, decode_rgb(frame, spec)), bool(frame.is_corrupt)
                last_pts, last_dur = pts, dur
                index += 1
        except av.FFmpegError as e:
            raise InputError(f"decoding {self.path} failed at frame {index} ({_one_line(e)})") from None
        finally:
            c.close()

    def _pts_of_frame(self, start: int, reorder: int = 64) -> int | None:
        """The timestamp of frame ``start`` (presentation order) from the packets alone, without decoding; None
        where packet timestamps cannot tell (missing, repeated, or fewer frames than ``start``)."""
        pts = []
        with av.open(str(self.path), "r") as c:
            for pkt in c.demux(c.streams.video[0]):
                if pkt.size == 0:
                    continue  # flush packets
                if pkt.pts is None:
                    return None
                pts.append(int(pkt.pts))
                if len(pts) >= start + reorder:
                    break
        # packets come in decode order; a frame's presentation index is its timestamp's rank, which packets
        # ``reorder`` further on can no longer change (B-frame reordering spans a few frames)
        ranked = sorted(pts)
        if len(ranked) <= start or len(set(ranked)) != len(ranked):
            return None
        return ranked[start]

    def close(self) -> None:
        self._container.close()

class PngFolderSource:
    """Sorted ``*.png`` of a folder; timestamps ``0, 1, 2, ...`` in a 1/25 s time base."""

    def __init__(self, path: Path):
        import cv2

        self.path = Path(path)
        self.files = sorted(self.path.glob("*.png"))
        if not self.files:
            raise InputError(f"zero frames: no *.png files in folder {self.path}")
        first = cv2.imread(str(self.files[0]), cv2.IMREAD_UNCHANGED)
        if first is None:
            raise InputError(f"not a PNG image: {self.files[0]}")
        h, w = first.shape[:2]
        bits = 16 if first.dtype == np.uint16 else 8
        self.info = VideoInfo(path=self.path, kind="png", width=w, height=h,
                              pix_fmt="rgb48le" if bits == 16 else "rgb24", bits=bits, colour=ColourSpec.srgb(),
                              time_base=PNG_TIME_BASE, rate=1 / PNG_TIME_BASE, frames=len(self.files))

    def frames(self, start: int = 0) -> Iterator[SourceFrame]:
        for i in range(start, len(self.files)):
            yield SourceFrame(i, i, 1, read_png(self.files[i], (self.info.height, self.info.width)))

    def close(self) -> None:
        pass


def read_png(path: Path, size: tuple[int, int] | None = None) -> np.ndarray:
    """A PNG file -> float32 RGB ``(3, H, W)`` in [0, 1] (grey and alpha handled; 8 or 16 bit)."""
    import cv2

    img = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
    if img is None:
        raise InputError(f"not a PNG image: {path}")
    if img.ndim == 2:
        img = np.repeat(img[:, :, None], 3, axis=2)
    elif img.shape[2] == 4:
        img = img[:, :, :3]  # alpha dropped: the model has no alpha channel
    if size is not None and img.shape[:2] != size:
        raise InputError(f"{path} is {img.shape[1]}x{img.shape[0]}, the other frames are {size[1]}x{size[0]}")
    top = np.float32(65535.0 if img.dtype == np.uint16 else 255.0)
    return np.ascontiguousarray(img[:, :, ::-1].transpose(2, 0, 1), dtype=np.float32) / top
