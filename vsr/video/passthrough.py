"""``Passthrough``: the source's audio and subtitle streams, muxed beside the new video in time order.

A file's packets are read by a demuxer of its own (:class:`FilePackets`); a stream's, which can be read only
once, are handed over by its source as they pass (:class:`PacketFeed`).

Packets are copied as they are where the output container holds their codec; audio it cannot hold is
re-encoded to the container's default audio codec, text subtitles are converted to ``mov_text``, anything
else is dropped (each with a warning).
"""

from __future__ import annotations

import re
import struct
import warnings
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Protocol

import av

TEXT_SUBTITLES = ("subrip", "srt", "ass", "ssa", "webvtt", "text")


class PassMode(Enum):
    COPY = "copy"  # packets muxed as they are
    ENCODE = "encode"  # audio decoded and re-encoded to the container's default audio codec
    TEXT = "text"  # text subtitles converted to mov_text packets


@dataclass(frozen=True)
class Route:
    """Where one source stream's packets go: the output stream ``out``, how, and the source ``codec``."""

    out: object
    mode: PassMode
    codec: str | None


@dataclass(frozen=True)
class Window:
    """Which passthrough packets a trimmed output (``--frames A:B``) keeps, in source seconds: none that
    start before ``start`` (None: keep them: the codec's priming packets before the source's first frame),
    none at or after ``end`` once the video has ended (None: keep all)."""

    start: float | None
    end: float | None


def subtitle_text(data: bytes, codec: str) -> str:
    """The plain text of one subtitle packet (ASS events lose their fields and override tags)."""
    text = data.decode("utf-8", errors="replace")
    if codec in ("ass", "ssa"):
        text = text.split(",", 8)[-1]
        text = re.sub(r"\{[^}]*\}", "", text).replace("\\N", "\n").replace("\\n", "\n")
    return text


def _route(st, oc) -> Route | None:
    """An output stream in ``oc`` for the source stream ``st`` (with a warning where it is converted), or
    None (dropped, with a warning)."""
    name = st.codec_context.name if st.codec_context else None
    if name in oc.supported_codecs:
        return Route(oc.add_stream_from_template(st), PassMode.COPY, name)
    if st.type == "audio" and oc.default_audio_codec not in (None, "none"):
        target = oc.default_audio_codec
        warnings.warn(f"{oc.format.name} cannot hold {name} audio (stream {st.index}): "
                      f"re-encoding it to {target}", stacklevel=4)
        out = oc.add_stream(target, rate=st.codec_context.sample_rate)
        out.layout = st.codec_context.layout
        return Route(out, PassMode.ENCODE, name)
    if st.type == "subtitle" and name in TEXT_SUBTITLES and "mov_text" in oc.supported_codecs:
        warnings.warn(f"{oc.format.name} cannot hold {name} subtitles (stream {st.index}): "
                      "converting them to mov_text (plain text, styling dropped)", stacklevel=4)
        out = oc.add_mux_stream("mov_text")
        out.time_base = st.time_base
        return Route(out, PassMode.TEXT, name)
    warnings.warn(f"{oc.format.name} cannot hold {name} {st.type} (stream {st.index}): dropped", stacklevel=4)
    return None


class PacketFeed(Protocol):
    """Where a :class:`Passthrough` takes the source's audio and subtitle packets from, in file order:
    :class:`FilePackets` (a file, read again on its own) or a stream's packets as they pass
    (:class:`vsr.video.pipe_source.StreamPackets`)."""

    streams: list  # the source's audio and subtitle streams
    ended: bool  # no packet will come any more

    def select(self, indices: set[int]) -> None:
        """Only the packets of these streams are wanted (called once)."""

    def next_packet(self):
        """The next wanted packet, or None (none now; none ever once ``ended``)."""

    def close(self) -> None: ...


class FilePackets:
    """The audio and subtitle packets of the video file at ``src``, from a demuxer of their own."""

    def __init__(self, src: Path):
        self._in = av.open(str(src), "r")
        self.streams = [st for st in self._in.streams if st.type in ("audio", "subtitle")]
        self._packets = iter(())
        self.ended = False

    def select(self, indices: set[int]) -> None:
        if indices:
            self._packets = self._in.demux([self._in.streams[i] for i in sorted(indices)])

    def next_packet(self):
        try:
            return next(self._packets)
        except StopIteration:
            self.ended = True
            return None

    def close(self) -> None:
        self._in.close()


class Passthrough:
    """The audio and subtitle streams of the source, taken from ``feed`` (a :class:`PacketFeed`, or the path of
    a video file), added to the output container ``oc``."""

    def __init__(self, feed: PacketFeed | Path, oc):
        self.oc = oc
        self.routes: dict[int, Route] = {}
        self._feed = FilePackets(feed) if isinstance(feed, Path) else feed
        self._pending = None
        for st in self._feed.streams:
            route = _route(st, oc)
            if route is None:
                continue
            for k, v in st.metadata.items():
                if k.upper() not in ("DURATION", "ENCODER"):
                    route.out.metadata[k] = v
            route.out.disposition = st.disposition
            self.routes[st.index] = route
        self._feed.select(set(self.routes))
        if not self.routes:
            self.close()

    def copy_until(self, t_src: float | None, shift: float, window: Window | None) -> None:
        """Mux the packets whose source time is before ``t_src`` seconds (None: all that remain), moved
        back by ``shift`` seconds, keeping only those ``window`` keeps."""
        while self._feed is not None:
            pkt = self._next()
            if pkt is None:
                return
            ts = pkt.dts if pkt.dts is not None else pkt.pts
            t = float(ts * pkt.time_base)
            if t_src is not None and t >= t_src:
                return
            self._pending = None
            if window is not None:
                start_t = float((pkt.pts if pkt.pts is not None else ts) * pkt.time_base)
                if window.start is not None and start_t < window.start - 1e-9:
                    continue
                if window.end is not None and t >= window.end and t_src is None:
                    continue
            self._mux(pkt, int(round(shift / pkt.time_base)) if shift else 0)

    def _next(self):
        """The next packet with a timestamp (held in ``_pending`` until muxed), or None: none yet (a stream
        still being read), or none left (then the feed is closed)."""
        while self._pending is None and self._feed is not None:
            pkt = self._feed.next_packet()
            if pkt is None:
                if self._feed.ended:
                    self.close()
                return None
            if pkt.dts is not None or pkt.pts is not None:  # else a flush marker
                self._pending = pkt
        return self._pending

    def _mux(self, pkt, off: int) -> None:
        route = self.routes[pkt.stream.index]
        if route.mode is PassMode.COPY:
            if off:
                if pkt.pts is not None:
                    pkt.pts -= off
                if pkt.dts is not None:
                    pkt.dts -= off
            pkt.stream = route.out
            self.oc.mux(pkt)
        elif route.mode is PassMode.TEXT:
            text = subtitle_text(bytes(pkt), route.codec).encode("utf-8")
            conv = av.Packet(struct.pack(">H", len(text)) + text)
            conv.pts = None if pkt.pts is None else pkt.pts - off
            conv.dts = None if pkt.dts is None else pkt.dts - off
            conv.duration = pkt.duration
            conv.time_base = pkt.time_base
            conv.stream = route.out
            self.oc.mux(conv)
        else:
            for fr in pkt.decode():
                if fr.pts is not None and off:
                    fr.pts -= off
                for p in route.out.encode(fr):
                    self.oc.mux(p)

    def flush(self, shift: float, window: Window | None) -> None:
        """Mux what remains (as :meth:`copy_until` would), then what the re-encoding audio encoders hold."""
        self.copy_until(None, shift, window)
        for route in self.routes.values():
            if route.mode is PassMode.ENCODE:
                for p in route.out.encode(None):
                    self.oc.mux(p)

    def close(self) -> None:
        if self._feed is not None:
            self._feed.close()
            self._feed = None
