"""``Passthrough``: the source's audio and subtitle streams, muxed beside the new video in time order, and its
attachments and cover art.

A file's packets are read by a demuxer of its own (:class:`FilePackets`); a stream's, which can be read only
once, are handed over by its source as they pass (:class:`PacketFeed`).

Packets are copied as they are where the output container holds their codec; audio it cannot hold is
re-encoded to the container's default audio codec, text subtitles are converted to ``mov_text`` (SubRip in
Matroska, WebVTT in WebM), anything else is dropped (each with a warning).

A file's attachments (the fonts its ASS subtitles are styled with) go into a Matroska output as attachments;
its cover art (a picture stream with the ``attached_pic`` disposition, or a Matroska image attachment) into
an mp4 output as its cover (``covr``) and into Matroska as an image attachment.  What an output cannot
hold is named in one warning.
"""

from __future__ import annotations

import struct
import warnings
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Protocol

import av

from vsr.video.codecs import NamedBuffer, held
from vsr.video.conversions import (LOSSLESS_AUDIO, LOSSLESS_TARGETS, TEXT_SUBTITLES, TEXT_TARGETS, UNREAD_IN,
                                   encoder_format, encoder_rate, fit_channels, ordered_layout, subtitle_text,
                                   track_tags)
from vsr.video.extras import ATTACHMENTS, COVERS, Extra, left_out, read_extras
from vsr.video.joins import JoinedPackets
from vsr.video.reading import open_input, tags
from vsr.video.sample_cut import PreRoll, SampleCut, keeps_head, span
from vsr.video.trimmed import CueEnds, OnScreen, Window, on_at


class PassMode(Enum):
    COPY = "copy"  # packets muxed as they are
    ENCODE = "encode"  # audio decoded and re-encoded to the container's default audio codec
    TEXT = "text"  # text subtitles converted to mov_text, SubRip or WebVTT packets


@dataclass(frozen=True)
class Route:
    """Where one source stream's packets go: the output stream ``out``, how, and the source ``codec``."""

    out: object
    mode: PassMode
    codec: str | None
    target: str | None = None  # a TEXT route's output codec: mov_text, subrip or webvtt
    source: object = None  # an ENCODE route's source stream (its decoder is flushed at the end)


def copy_works(st, oc, sample=None) -> bool:
    """Whether ``oc``'s muxer takes ``st``'s packets as they are: a muxer in memory of its format is opened
    with a copy of ``st`` and ``sample`` (its first packet, where known) and closed.  FFmpeg's codec query
    says yes to some it then refuses, at the header (FLAC, Opus or TrueHD in .mov) or at the end (24-bit PCM in
    .mp4)."""
    try:
        with av.open(NamedBuffer(f"probe.{oc.format.name}"), "w", format=oc.format.name) as probe:
            out = probe.add_stream_from_template(st)
            probe.start_encoding()
            if sample is not None:
                pkt = av.Packet(bytes(sample))
                pkt.pts = pkt.dts = 0
                pkt.time_base = sample.time_base
                pkt.stream = out
                probe.mux(pkt)
        return True
    except (av.FFmpegError, ValueError):
        return False


def first_packets(path: Path, indices: list[int], look: int = 2000) -> dict[int, object]:
    """The first packet with data of each of the streams ``indices`` of the file at ``path`` (from its first
    ``look`` packets; a stream with none there is left out)."""
    out: dict[int, object] = {}
    if not indices:
        return out
    try:
        with open_input(str(path)) as c:
            for n, pkt in enumerate(c.demux([c.streams[i] for i in indices])):
                if pkt.size and pkt.stream.index not in out:
                    out[pkt.stream.index] = av.Packet(bytes(pkt))
                    out[pkt.stream.index].time_base = pkt.time_base
                if len(out) == len(indices) or n >= look:
                    break
    except (av.FFmpegError, OSError):
        pass  # the demuxer proper says what is wrong with the file
    return out


def _route(st, oc, sample=None) -> Route | None:
    """An output stream in ``oc`` for the source stream ``st`` (with a warning where it is converted), or
    None (dropped, with a warning); ``sample``: its first packet, where known (:func:`copy_works`)."""
    name = st.codec_context.name if st.codec_context else None  # (the decoder's: "mp3float")
    shown = st.codec_context.codec.canonical_name if st.codec_context else name  # the codec's: "mp3"
    unread = str(name).startswith(UNREAD_IN.get(oc.format.name, ()))
    if name in held(oc) and not unread and copy_works(st, oc, sample):
        return Route(oc.add_stream_from_template(st), PassMode.COPY, name)
    if st.type == "audio" and not (st.codec_context.sample_rate and st.codec_context.layout.nb_channels):
        warnings.warn(f"the source's {shown} audio (stream {st.index}) says no sample rate or channels (damaged?) "
                      f"and {oc.format.name} cannot take it as it is: dropped", stacklevel=4)
        return None
    if st.type == "audio" and oc.default_audio_codec not in (None, "none"):
        lossless = [c for c in LOSSLESS_TARGETS if c in held(oc) and c in av.codecs_available]
        target, layout, said = fit_channels(lossless[0] if name in LOSSLESS_AUDIO and lossless else
                                            oc.default_audio_codec, ordered_layout(st.codec_context.layout), held(oc))
        why = (f"{oc.format.name} holds {shown} audio only as ISO 'ipcm', which QuickTime and FFmpeg before 6 do not "
               "read" if unread else f"{oc.format.name} cannot hold {shown} audio")
        warnings.warn(f"{why} (stream {st.index}): re-encoding it to {target}{said}", stacklevel=4)
        out = oc.add_stream(target, rate=encoder_rate(target, st.codec_context.sample_rate))
        out.layout = layout
        fmt = encoder_format(target, st.codec_context.format)
        if fmt is not None:
            out.format = fmt
        return Route(out, PassMode.ENCODE, name, source=st)
    text = next((c for c in TEXT_TARGETS if c in held(oc)), None)
    if st.type == "subtitle" and name in TEXT_SUBTITLES and text is not None:
        warnings.warn(f"{oc.format.name} cannot hold {shown} subtitles (stream {st.index}): "
                      f"converting them to {text} (plain text, styling dropped)", stacklevel=4)
        out = oc.add_mux_stream(text)
        out.time_base = st.time_base
        return Route(out, PassMode.TEXT, name, text)
    warnings.warn(f"{oc.format.name} cannot hold {shown} {st.type} (stream {st.index}): dropped", stacklevel=4)
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
    """The audio and subtitle packets of the video file at ``src``, from a demuxer of their own; with those of
    its video stream ``video`` (its index) where given, whose clock :class:`JoinedPackets` follows."""

    def __init__(self, src: Path, video: int | None = None):
        self._in = open_input(str(src))
        self._video = video
        self.streams = [st for st in self._in.streams if st.type in ("audio", "subtitle")]
        self._packets = iter(())
        self.ended = False

    def select(self, indices: set[int]) -> None:
        if indices:
            clock = {self._video} if self._video is not None else set()
            self._packets = self._in.demux([self._in.streams[i] for i in sorted(set(indices) | clock)])

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
    a video file), added to the output container ``oc``; a file's attachments and covers (:func:`read_extras`)
    where ``oc`` holds them.  ``video``: the index of the video stream of a source whose timestamps may go back
    where files were joined (MPEG-TS): the packets follow its joins as the video does (:class:`JoinedPackets`)."""

    def __init__(self, feed: PacketFeed | Path, oc, video: int | None = None):
        self.oc = oc
        self._covers: list[tuple[object, bytes]] = []  # (output stream, picture): muxed with the first packets
        self._extras_in = None  # the file the covers' streams are of, open until they are muxed
        self._feed = None
        try:
            self._open(feed, oc, video)
        except BaseException:
            self.close()  # (the sink never gets this object to close)
            raise

    def _open(self, feed: PacketFeed | Path, oc, video: int | None) -> None:
        if isinstance(feed, Path):
            self._extras_in = open_input(str(feed))
            self._add_extras(read_extras(self._extras_in))
            left = left_out(self._extras_in)
            if left:
                warnings.warn(f"the source's {', '.join(left)} cannot follow: vsr writes one video, with the "
                              "audio, subtitles, attachments and cover", stacklevel=3)
            if not self._covers:
                self._close_extras()
        else:  # a stream on standard input: the attachments its header held
            self._add_extras(getattr(feed, "extras", []))
        self.routes: dict[int, Route] = {}
        self._feed = FilePackets(feed, video) if isinstance(feed, Path) else feed
        if video is not None:  # (a stream on standard input gives its video's times beside its packets)
            self._feed = JoinedPackets(self._feed, *((video, str(feed)) if isinstance(feed, Path) else
                                                     (getattr(feed, "video", None), "standard input")))
        self._refused: set[int] = set()  # the streams whose packets a muxer refused (said once each)
        self._pending = None
        self._shift, self._window = 0.0, None  # (copy_until's: where the held cues go, what the audio is cut to)
        self._cut = SampleCut()  # (re-encoded audio, to the sample)
        self._preroll = PreRoll()  # (copied audio the source's edit list leaves out)
        self._cue_ends = CueEnds(lambda i, pkt: self._mux(pkt, int(round(self._shift / pkt.time_base)), i))
        self._on_screen = OnScreen(self._cue_ends.mux)  # (PGS pictures on screen at frame A)
        self._next_pts: dict[int, tuple[int, object]] = {}  # an ENCODE route's next frame time, in its time base
        self._off: dict[int, int] = {}  # an ENCODE route's shift, from its first packet until its decoder drains
        samples = first_packets(feed, [st.index for st in self._feed.streams]) if isinstance(feed, Path) else {}
        for st in self._feed.streams:
            route = _route(st, oc, samples.get(st.index))
            if route is None:
                continue
            route.out.metadata.update(track_tags(tags(st.metadata), oc.format.name, ("DURATION", "ENCODER")))
            route.out.disposition = st.disposition
            self.routes[st.index] = route
        self._feed.select(set(self.routes))
        if not self.routes:
            self._close_feed()

    def _add_extras(self, extras: list[Extra]) -> None:
        fmt, dropped = self.oc.format.name, []
        for x in extras:
            if fmt in ATTACHMENTS:
                self.oc.add_attachment(x.name, x.mimetype, x.data)
            elif x.cover is not None and fmt in COVERS and x.cover.codec_context.name in held(self.oc):
                out = self.oc.add_stream_from_template(x.cover)
                out.disposition = x.cover.disposition
                self._covers.append((out, x.data))
            else:
                dropped.append(x)
        if dropped:
            what = ", ".join(f"{x.name}{' (cover)' if x.cover is not None else ''}" for x in dropped[:4])
            more = f" and {len(dropped) - 4} more" if len(dropped) > 4 else ""
            kinds = " and ".join(k for k, has in (("attachments", any(x.cover is None for x in dropped)),
                                                   ("cover art", any(x.cover is not None for x in dropped))) if has)
            warnings.warn(f"{fmt} cannot hold the source's {kinds}: dropped {what}{more} (a .mkv output keeps "
                          "attachments and covers, .mp4 a cover)", stacklevel=5)

    def _mux_covers(self) -> None:
        """The cover pictures, once the header is written: a picture each, without a time."""
        for out, data in self._covers:
            pkt = av.Packet(data)
            pkt.stream = out
            self.oc.mux(pkt)
        self._covers = []
        self._close_extras()

    def _close_extras(self) -> None:
        if self._extras_in is not None:
            self._extras_in.close()
            self._extras_in = None

    def copy_until(self, t_src: float | None, shift: float, window: Window | None) -> None:
        """Mux the packets whose source time is before ``t_src`` seconds (None: all that remain), moved
        back by ``shift`` seconds, keeping only those ``window`` keeps."""
        if self._covers:
            self._mux_covers()
        self._shift, self._window = shift, window
        if window is not None:
            self._cue_ends.release(window.end)
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
                if (window.start is not None and start_t < window.start - 1e-9 and not on_at(pkt, window.start)
                        and not keeps_head(pkt, window.start, self.routes[pkt.stream.index].mode.value,
                                           self.oc.format.name)):
                    self._on_screen.before(pkt)
                    continue
                if window.start is not None:
                    self._on_screen.reached(pkt, window.start)
                if window.end is not None and t >= window.end and t_src is None:
                    continue
                if self._cue_ends.take(pkt, window.end, self.routes[pkt.stream.index].mode is PassMode.COPY):
                    continue
            for p in self._preroll.take(pkt, self.routes[pkt.stream.index].mode is PassMode.COPY):
                self._mux(p, int(round(shift / p.time_base)) if shift else 0)

    def _next(self):
        """The next packet with a timestamp (held in ``_pending`` until muxed), or None: none yet (a stream
        still being read), or none left (then the feed is closed)."""
        while self._pending is None and self._feed is not None:
            pkt = self._feed.next_packet()
            if pkt is None:
                if self._feed.ended:
                    self._drain_decoders()
                    self._close_feed()
                return None
            if pkt.dts is not None or pkt.pts is not None:  # else a flush marker
                self._pending = pkt
        return self._pending

    def _mux(self, pkt, off: int, index: int | None = None) -> None:
        key = pkt.stream.index if index is None else index
        route = self.routes[key]
        if route.mode is PassMode.COPY:
            if off:
                if pkt.pts is not None:
                    pkt.pts -= off
                if pkt.dts is not None:
                    pkt.dts -= off
            pkt.stream = route.out
            self._put(pkt, route)
        elif route.mode is PassMode.TEXT:
            text = subtitle_text(bytes(pkt), route.codec).encode("utf-8")
            # mov_text: a 16-bit length before the text; SubRip and WebVTT: the text alone
            conv = av.Packet(struct.pack(">H", len(text)) + text if route.target == "mov_text" else text)
            conv.pts = None if pkt.pts is None else pkt.pts - off
            conv.dts = None if pkt.dts is None else pkt.dts - off
            conv.duration = pkt.duration
            conv.time_base = pkt.time_base
            conv.stream = route.out
            self._put(conv, route)
        else:
            self._off[key] = off
            self._encode(route, pkt.decode(), off, key)

    def _put(self, pkt, route: Route) -> None:
        """Mux ``pkt``; one the muxer refuses (timestamps not after its stream's last, where a source's go back
        other than at a join) is dropped, said once per stream: the rest of the output is good."""
        try:
            self.oc.mux(pkt)
        except av.error.ArgumentError as e:
            if route.out.index not in self._refused:
                self._refused.add(route.out.index)
                warnings.warn(f"the {self.oc.format.name} muxer refused a packet of the source's {route.codec} "
                              f"{route.out.type} (output stream {route.out.index}: {e.strerror or e}): dropped, and "
                              "any more it refuses", stacklevel=2)

    def _drain_decoders(self) -> None:
        """The last frames the re-encoded streams' decoders hold until they are flushed (WMA's: 46 ms), into
        their encoders; once, before the source closes."""
        for index, route in self.routes.items():  # (by the key: PyAV 18.1.1 refuses a closed source's index)
            if route.mode is PassMode.ENCODE and index in self._off:
                off = self._off.pop(index)
                try:
                    held = route.source.codec_context.decode(None)
                except av.FFmpegError:  # a damaged stream's decoder that cannot flush: what it held is lost, as before
                    held = []
                self._encode(route, held, off, index)

    def _encode(self, route: Route, frames, off: int, key: int) -> None:
        """Decoded audio ``frames`` of source stream ``key`` into the route's encoder, moved back by ``off``; a
        frame without a time (a decoder's last, at its flush) follows the one before it."""
        for fr in frames:
            if fr.pts is None:
                if key not in self._next_pts:
                    continue  # (nothing before it had a time: nowhere to put it)
                fr.pts, fr.time_base = self._next_pts[key]
            else:
                fr.pts -= off
            tb = fr.time_base
            self._next_pts[key] = (fr.pts + int(round(fr.samples / fr.sample_rate / tb)), tb)
            self._encode_cut(route, self._cut.take(key, fr, *span(self._window, self._shift)))

    def _encode_cut(self, route: Route, frames) -> None:
        for fr in frames:
            for p in route.out.encode(fr):
                self._put(p, route)

    def flush(self, shift: float, window: Window | None) -> None:
        """Mux what remains (as :meth:`copy_until` would), then what the re-encoding audio encoders hold."""
        self.copy_until(None, shift, window)
        if window is not None and window.start is not None:
            self._on_screen.flush(window.start)
        if window is not None and window.end is not None:
            self._cue_ends.flush(window.end)
        self._drain_decoders()
        for index, route in self.routes.items():  # (route.source is closed by now: its index is not kept)
            if route.mode is PassMode.ENCODE:
                self._encode_cut(route, self._cut.flush(index, span(self._window, self._shift)[1]))
                for p in route.out.encode(None):
                    self._put(p, route)

    def close(self) -> None:
        self._close_feed()
        self._close_extras()

    def _close_feed(self) -> None:
        if self._feed is not None:
            self._feed.close()
            self._feed = None
