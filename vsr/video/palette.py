"""Frames in 256 colours each, as GIF holds them: FFmpeg's ``palettegen`` makes each frame a palette of its own
(``stats_mode=single``) and ``paletteuse`` maps the frame onto it, a pixel less than half opaque becoming the
palette's transparent entry.  Ordered (Bayer) dithering: its pattern stays put from frame to frame where error
diffusion (FFmpeg's default, ``sierra2_4a``) crawls, and it costs a third of the time (1080p: 0.35 s a frame
against 1.0; 34-35 dB against 36-38 on the tests' frames: docs/benchmarks.md); the palette is counted from a
sample of a large frame's pixels (:func:`sample_step`: 1080p 0.15 s a frame, 2160p 0.39).  swscale's own RGB to ``pal8``
is a fixed 3-3-2 palette, 8 levels of red and green, 4 of blue: 21 dB."""

from __future__ import annotations

import math

import av
import av.filter

# The pixels of a frame its palette is counted from (a sample of a larger frame): on the real clips' frames the
# palette of such a sample maps them as closely as one counted from every pixel (32.4 dB either way, 1080p and
# 2160p), and the count, most of the time of a frame, takes a quarter of it (docs/benchmarks.md)
SAMPLE_PIXELS = 131072


class Palettes:
    """``palettes(frame)``: an RGB or RGBA ``frame`` -> the same picture in ``pal8``, its own palette, at its time."""

    def __init__(self) -> None:
        self._graph: av.filter.Graph | None = None
        self._shape: tuple | None = None

    def __call__(self, frame: av.VideoFrame) -> av.VideoFrame:
        shape = (frame.width, frame.height, frame.format.name)
        if self._graph is None or shape != self._shape:
            self._graph, self._shape = _graph(frame), shape
        self._graph.push(frame)
        out = self._graph.pull()  # (one palette a frame: nothing is held back)
        out.pts = frame.pts
        if frame.time_base is not None:
            out.time_base = frame.time_base
        return out


def _graph(frame: av.VideoFrame) -> av.filter.Graph:
    g = av.filter.Graph()
    src = g.add_buffer(width=frame.width, height=frame.height, format=frame.format.name,
                       time_base=frame.time_base or 1)
    split = g.add("split")
    gen = g.add("palettegen", "stats_mode=single:reserve_transparent=1")
    use = g.add("paletteuse", "new=1:alpha_threshold=128:dither=bayer")
    sink = g.add("buffersink")
    src.link_to(split)
    step = sample_step(frame.width, frame.height)
    if step > 1:  # the palette from every step-th pixel of every step-th row: their colours as they are
        sample = g.add("scale", f"iw/{step}:ih/{step}:flags=neighbor")
        split.link_to(sample, 0, 0)
        sample.link_to(gen)
    else:
        split.link_to(gen, 0, 0)
    split.link_to(use, 1, 0)
    gen.link_to(use, 0, 1)
    use.link_to(sink)
    g.configure()
    return g


def sample_step(width: int, height: int) -> int:
    """Every how many pixels (across and down) ``palettegen`` counts colours: at least :data:`SAMPLE_PIXELS` of a
    frame, the rest of it alike (1080p: every third, 2160p: every seventh)."""
    return max(1, int(math.sqrt(width * height / SAMPLE_PIXELS)))


__all__ = ["Palettes"]
