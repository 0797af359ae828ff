"""Which of a file's streams is its video: the first video stream that is not a still picture.

FFmpeg shows a file's cover art (mp4 ``covr``, a Matroska image attachment) as a video stream of one picture
with the ``attached_pic`` disposition; a Matroska or NUT file may also hold a picture as a track of its own,
before the film's.  So of several video streams the first that is not an attached picture and has a second
frame is the video (read from the first packets only); the first of them where none has.
"""

from __future__ import annotations

import os

import av

ATTACHED_PIC = 0x0400  # AV_DISPOSITION_ATTACHED_PIC
LOOK_PACKETS = 1000  # packets read to find a second frame in one of several video streams


def is_attached_pic(stream) -> bool:
    return bool(int(stream.disposition) & ATTACHED_PIC)


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
        with av.open(name, "r") as c:
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
