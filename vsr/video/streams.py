"""Which of a file's streams is its video (the first video stream that is not a still picture), its frame
rate, and its frames at one size.

FFmpeg shows a file's cover art (mp4 ``covr``, a Matroska image attachment) as a video stream of one picture
with the ``attached_pic`` disposition; a Matroska or NUT file may also hold a picture as a track of its own,
before the film's.  So of several video streams the first that is not an attached picture and has a second
frame is the video (read from the first packets only); the first of them where none has.
"""

from __future__ import annotations

import os
import warnings
from fractions import Fraction
from typing import Iterator

import av

from vsr.video.reading import open_input

ATTACHED_PIC = 0x0400  # AV_DISPOSITION_ATTACHED_PIC
LOOK_PACKETS = 1000  # packets read to find a second frame in one of several video streams


def is_attached_pic(stream) -> bool:
    return bool(int(stream.disposition) & ATTACHED_PIC)


def no_video(container, name: str) -> str | None:
    """Why ``container`` (named ``name`` in the message) has no video to upscale, or None: no video stream, or
    only cover art (a song's picture: a one-frame "video" of a few microseconds beside its sound)."""
    videos = container.streams.video
    if not videos:
        return f"no video stream in {name}"
    if all(is_attached_pic(s) for s in videos):
        return f"no video stream in {name}, only cover art (an attached picture)"
    return None


def main_video(container):
    """The video stream of an opened PyAV input container (an IndexError where it has none, as
    ``streams.video[0]``).  A file with several video streams is read from its first packets, with a demuxer
    of its own (``container`` is not moved)."""
    videos = container.streams.video
    candidates = [s for s in videos if not is_attached_pic(s)] or list(videos[:1])
    if len(candidates) <= 1:
        return candidates[0]
    moving = _moving(container, candidates)
    return next((s for s in candidates if s.index == moving), candidates[0])


def _moving(container, candidates) -> int | None:
    """The index of the first of ``candidates`` with a second packet in the file's first packets, else None."""
    name = getattr(container, "name", None)
    if not name or not os.path.isfile(name):  # a pipe is read once: its first such stream
        return None
    counts = {s.index: 0 for s in candidates}
    try:
        with open_input(name) as c:
            for n, pkt in enumerate(c.demux([c.streams[i] for i in counts])):
                if pkt.size and pkt.stream.index in counts:
                    counts[pkt.stream.index] += 1
                    if counts[pkt.stream.index] >= 2:
                        break
                if n >= LOOK_PACKETS:
                    break
    except (av.FFmpegError, OSError):
        return None
    return next((i for i in counts if counts[i] >= 2), None)


def frame_rate(st, first: av.VideoFrame) -> Fraction | None:
    """The stream's average frame rate, else FFmpeg's guess; the guess where the average is not the rate of the
    first frame's duration and the guess is (PyAV's FFmpeg gives a DV stream an "average" of 60000 fps: its
    time base, 1/60000, where each frame lasts 2002 ticks)."""
    rate = st.average_rate or st.guessed_rate
    guess = st.guessed_rate
    if rate and guess and first.duration and st.time_base:
        implied = 1 / (Fraction(int(first.duration)) * st.time_base)
        if abs(rate / implied - 1) > 0.05 and abs(guess / implied - 1) <= 0.05:
            return guess
    return rate


def uniform(decoded: Iterator[av.VideoFrame], index: int, info) -> Iterator[av.VideoFrame]:
    """``decoded`` (frames ``index, index + 1, ...``) at the first frame's size and pixel format: a stream that
    changes them part-way (a broadcast's SD and HD programmes, files joined end to end) has its later frames
    scaled (bicubic) and converted to the first's, as ffmpeg does, said once (the model and the encoder take
    one size a run)."""
    said = False
    for frame in decoded:
        if frame.width != info.width or frame.height != info.height or frame.format.name != info.pix_fmt:
            if not said:
                said = True
                warnings.warn(f"{info.path}: frame {index} is {frame.width}x{frame.height} {frame.format.name}, "
                              f"not {info.width}x{info.height} {info.pix_fmt} as the frames before: it and the "
                              f"frames like it are scaled to {info.width}x{info.height} before they are upscaled "
                              f"(cut the source at frame {index} to upscale each part at its own size)",
                              stacklevel=2)
            out = frame.reformat(width=info.width, height=info.height, format=info.pix_fmt,
                                 interpolation="BICUBIC")
            out.pts, out.time_base, out.duration = frame.pts, frame.time_base, frame.duration
            frame = out
        yield frame
        index += 1
