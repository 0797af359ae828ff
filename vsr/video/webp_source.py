"""An animated WebP file as a source, read by libwebp (through Pillow).

FFmpeg's WebP demuxer reads a file as one picture and its decoder has no animation (ANMF frames): an animated
WebP, what phones and chat applications make of short clips, was "not a video file".  libwebp's own animation
decoder (Pillow's WebP plugin) gives each frame whole, composed onto the canvas as the file says (blending,
disposal), with its time in milliseconds; its alpha follows it as a PNG frame's does, its loop count as a GIF's.
A still WebP stays FFmpeg's (one frame).
"""

from __future__ import annotations

import os
import stat
from fractions import Fraction
from pathlib import Path
from typing import Iterator

import numpy as np

from vsr.errors import InputError
from vsr.video.alpha import Alpha
from vsr.video.animation import webp_chunks
from vsr.video.captions import FrameStore
from vsr.video.colour import ColourSpec
from vsr.video.source import SourceFrame, VideoInfo

WEBP_TIME_BASE = Fraction(1, 1000)  # (libwebp's timestamps and durations are milliseconds)
_ANIMATION = 0x02  # VP8X flags: the file holds an animation
SHORTEST_MS, PLAYED_MS = 10, 100  # a frame said to last 10 ms or less is shown 100 (:func:`played`)


def is_animated_webp(path: Path) -> bool:
    """Whether the file at ``path`` is a WebP file whose VP8X header says it holds an animation (a regular file:
    opening a named pipe would wait for its writer; what the path is, the video source says)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False
        with open(path, "rb") as f:
            head = f.read(21)
    except OSError:
        return False
    return len(head) == 21 and head[:4] == b"RIFF" and head[8:16] == b"WEBPVP8X" and bool(head[20] & _ANIMATION)


def anmf_frames(path: Path) -> list[tuple[int, bytes]]:
    """Each frame of the animated WebP at ``path`` as its ANMF chunk says: ``(duration in ms, image chunk)``,
    the chunk ``b"VP8 "`` (lossy) or ``b"VP8L"`` (lossless); [] where the file cannot be read.  What libwebp's
    demuxer reads of it: the chunks' headers, decoding nothing."""
    frames = []
    try:
        with open(path, "rb") as f:
            for fourcc, start, size in webp_chunks(f):
                if fourcc != b"ANMF" or size < 16:
                    continue
                f.seek(start + 12)  # (x, y, width - 1, height - 1, then the duration: 24 bits each; flags)
                duration = int.from_bytes(f.read(3).ljust(3, b"\0"), "little")
                inner = webp_chunks(f, start + 16, start + size)
                kinds = [k for k, _, _ in inner if k in (b"VP8 ", b"VP8L")]
                frames.append((duration, kinds[0] if kinds else b""))
    except OSError:
        return []
    return frames


def played(duration: int) -> int:
    """How long a frame of ``duration`` ms is shown: as browsers show it (Chromium and Firefox, for every animated
    format) and FFmpeg's GIF demuxer times it, 100 ms where it says 10 or less (a 0 would put two frames at one
    time)."""
    return duration if duration > SHORTEST_MS else PLAYED_MS


def frame_times(path: Path) -> list[tuple[int, int]]:
    """``(start, duration)`` of each frame of the animated WebP at ``path`` as it is played (:func:`played`), in ms:
    each starts where the one before ends."""
    out, at = [], 0
    for duration, _ in anmf_frames(path):
        out.append((at, played(duration)))
        at += played(duration)
    return out


def frame_starts(path: Path) -> list[int]:
    """When each frame of the animated WebP at ``path`` starts, in ms (:func:`frame_times`)."""
    return [start for start, _ in frame_times(path)]


def lossless_frames(path: Path) -> bool | None:
    """Whether every frame of the animated WebP at ``path`` is lossless (VP8L), not VP8 (lossy); None where its
    chunks cannot be read."""
    kinds = {kind for _, kind in anmf_frames(path) if kind}
    return None if not kinds else kinds == {b"VP8L"}


class AnimatedWebpSource:
    """The frames of an animated WebP file at their times (a 1/1000 s time base), RGB, and the alpha where the
    file has it; played as many times as its loop count says (0: for ever)."""

    def __init__(self, path: Path):
        try:
            from PIL import Image, UnidentifiedImageError
        except ImportError:
            raise InputError(f"{path} is an animated WebP, which vsr reads with Pillow: pip install pillow") from None
        self.path = Path(path)
        try:
            self._image = Image.open(self.path)
            self._image.load()
        except Image.DecompressionBombError:  # (Pillow's own limit, 179 megapixels: x4, far beyond FFmpeg's frames)
            raise InputError(f"cannot read {self.path}: its picture size is larger than vsr upscales") from None
        except (OSError, UnidentifiedImageError, SyntaxError, ValueError, EOFError) as e:
            raise InputError(f"not a video file: {self.path} (an animated WebP libwebp cannot read: {e})") from None
        im = self._image
        count = getattr(im, "n_frames", 1)
        times = self._times(count)
        alpha = "A" in im.mode
        total = times[-1][0] + times[-1][1] - times[0][0] if times else 0
        rate = Fraction(1000 * count, total) if total > 0 else None
        self._times_of = times
        self.info = VideoInfo(path=self.path, kind="webp", width=im.width, height=im.height,
                              pix_fmt="rgba" if alpha else "rgb24", bits=8, colour=ColourSpec.srgb(),
                              time_base=WEBP_TIME_BASE, rate=rate, frames=count, header_frames=count,
                              start_pts=times[0][0] if times else 0, duration_s=total / 1000 if total else None,
                              container="webp", plays=int(im.info.get("loop", 0)),
                              alpha=FrameStore() if alpha else None)

    def _times(self, count: int) -> list[tuple[int, int]]:
        """``(timestamp, duration)`` of every frame in milliseconds: each starts where the one before ends, as
        libwebp's decoder times them (from the ANMF chunks: nothing decoded), a 10 ms or shorter one shown for 100
        as players show it (:func:`played`)."""
        times = frame_times(self.path)
        if len(times) != count:
            raise InputError(f"not a video file: {self.path} (its {len(times)} animation frames are not the "
                             f"{count} libwebp decodes)")
        return times

    @property
    def files(self) -> list[Path]:
        return [self.path]

    def frames(self, start: int = 0) -> Iterator[SourceFrame]:
        im, mode = self._image, "RGBA" if self.info.alpha is not None else "RGB"
        for i in range(start, len(self._times_of)):
            try:
                im.seek(i)
                pixels = np.asarray(im.convert(mode))
            except (OSError, EOFError, ValueError) as e:
                raise InputError(f"cannot decode frame {i} of {self.path}: {e}") from None
            pts, duration = self._times_of[i]
            if self.info.alpha is not None:
                self.info.alpha.put(i, pts, Alpha(np.ascontiguousarray(pixels[:, :, 3]), 255))
            rgb = np.ascontiguousarray(pixels[:, :, :3].transpose(2, 0, 1), dtype=np.float32) / np.float32(255)
            yield SourceFrame(i, pts, duration, rgb)

    def close(self) -> None:
        self._image.close()
