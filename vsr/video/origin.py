"""Where an output's timeline starts: a transport stream's clock is not carried into a file's timeline.

An MPEG transport or program stream (``.ts``, ``.m2ts``, AVCHD's ``.mts``, ``.mpg``, ``.vob``) times its
packets on a running clock: 1.4 s at the start of any file the ffmpeg command writes, hours into a broadcast for a DVB
capture.  Copied as they are into MP4 or Matroska, those timestamps become a lead-in that players show as a
black or frozen picture (an empty edit of 11.4 s).  So, as ``ffmpeg`` does, every stream of such a source moves
back by the source's start (the earliest of its streams), their spacing and A/V sync unchanged; into a transport
or program stream again the clock is kept, timestamps as they were.  Any other container's start (an MP4's edit
list, a clip cut from a longer one) is the file's own, and is kept.
"""

from __future__ import annotations

__all__ = ["CLOCKED", "origin"]

# FFmpeg's demuxer names of the sources whose timestamps are a running clock, and the muxers that keep one
CLOCKED = ("mpegts", "mpeg")
_KEEPS_CLOCK = ("mpegts", "mpeg", "vob", "dvd", "svcd", "vcd")


def origin(info, container: str) -> int:
    """How far (in ``info.time_base``) the output into FFmpeg's muxer ``container`` moves every timestamp back:
    the source's start where its timestamps are a transport clock and ``container`` keeps none, else 0."""
    if info.container not in CLOCKED or container in _KEEPS_CLOCK or not info.start_s:
        return 0
    return round(info.start_s / info.time_base)
