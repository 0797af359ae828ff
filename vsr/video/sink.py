"""``VideoSink``: output frames encoded into a video file (PyAV), with the source's other streams.

The video sink copies the source's timestamps frame by frame (variable frame rate stays variable; a transport
stream's clock moved out, :mod:`vsr.video.origin`), its audio and subtitle packets (:mod:`vsr.video.passthrough`),
stream metadata, display matrix and sample aspect ratio, and tags the colour it really wrote.  It writes under a
temporary name and renames on :meth:`VideoSink.commit` (:mod:`vsr.video.output`); :meth:`VideoSink.abort` (any failure,
Ctrl-C) removes the temporary, so an interrupted run never leaves a file at the output path.
"""

from __future__ import annotations

import logging
import warnings
from fractions import Fraction
from pathlib import Path
from typing import Callable

import av
from av.video.reformatter import VideoReformatter
import numpy as np

from vsr import interrupt
from vsr.errors import InputError, OutputError
from vsr.machine import fewer_cores
from vsr.video.alpha import output_planes, upscale_into
from vsr.video.animation import muxer_options, set_last_duration
from vsr.video.captions import PictureMessages
from vsr.video.dovi import track_metadata
from vsr.video.chapters import as_written, chapters_dropped
from vsr.video.codecs import BIG_OUTPUT_X264_PARAMS, NamedBuffer, muxer_for
from vsr.video.conversions import track_tags
from vsr.video.colour import SITING_NAMES, FramePlanes, bit_depth, planar444, planes_to_frame
from vsr.video.dts import DtsRepair
from vsr.video.durations import PacketDurations
from vsr.video.encoder_choice import EncoderChoice, EncoderSettings, OutputContainer, choose_encoder
from vsr.video.encoder_open import open_encoder
from vsr.video.grid import check_constant_rate, clock_options, encoder_time_base
from vsr.video.hdr import as_encoded, hdr_metadata, hdr_not_written
from vsr.video.isobmff import NotWritable
from vsr.video.output import WRITE_ERRNOS, Partial, commit_output, output_path, video_partial, writes
from vsr.video.orientation import HOLDERS, not_kept, output_matrix
from vsr.video.origin import CLOCKED, origin
from vsr.video.palette import Palettes
from vsr.video.passthrough import Passthrough
from vsr.video.resize import factor, resized, sample_aspect
from vsr.video.source import VideoInfo
from vsr.video.spherical import view_metadata, view_not_written
from vsr.video.tags import write_container_keys
from vsr.video.track_metadata import add_track_metadata, display_metadata, display_not_written
from vsr.video.trimmed import Window

log = logging.getLogger(__name__)

VARIABLE_FPS = 0x0400  # AVFMT_VARIABLE_FPS: the container keeps each frame's timestamp (not AVI)

# video stream tags that describe the source's encoding, not the content (Matroska's VP8/VP9 alpha, as FFmpeg reads
# it: its muxer writes it again where libvpx encodes alpha)
DROPPED_TAGS = ("DURATION", "ENCODER", "VENDOR_ID", "ALPHA_MODE")


class VideoSink:
    """Encodes frames into a container: those of :meth:`new_planes` (the planes of :attr:`planes`: the output
    format's own where it is planar YUV, chroma subsampled and sited as tagged), or ``(3, H, W)`` 4:4:4 planes
    from :func:`vsr.video.planes.encode_planes`.

    With ``trim`` (``--frames A:B``) the output starts where the source starts: timestamps move back by
    the time of frame A, and only audio/subtitle packets inside the written frames' span are copied.
    ``passthrough=False``: video only, the source's audio and subtitles are left out (a chunk of a batch job,
    :mod:`vsr.jobs.chunks`, whose join adds them with :meth:`mux`).  ``probe``: check everything as for a real
    output and open the encoder, writing into memory only; then :meth:`abort` (``vsr jobs add`` checks a job's
    encoder settings so, hours before its first chunk).
    """

    def __init__(self, dst: Path, info: VideoInfo, settings: EncoderSettings, scale: int = 4,
                 trim: bool = False, passthrough: bool = True, probe: bool = False):
        self.info = info
        self.pts_offset = self.origin = 0
        self._partial: Partial | None = None  # the temporary file, held open (a file's, not a stream's)
        # (pts, dts, duration) of each video packet as the encoder gave it, in the source's time base, when a
        # caller asks for them (a chunk of a batch job: containers do not all give them back exactly)
        self.packet_times: list[tuple[int | None, int | None, int]] | None = None
        self.keep_window = trim
        self._window_start: float | None = None
        self._window_end = 0.0
        self._dts = DtsRepair()
        self._ended = False  # end(): the encoder flushed and the file closed
        self._chapters = ()
        # a 360 video's projection, written into the closed file (not a batch job's chunk: its join does)
        self._view, self.scale = (info.view if passthrough else None), scale
        self.passthrough: Passthrough | None = None
        self.oc = None
        self.oc = self._open_in_memory(Path(dst)) if probe else self._open(Path(dst), settings)
        try:
            self.choice = choice = choose_encoder(self._container(), settings, info, scale)
            for said in choice.warnings:
                warnings.warn(said, stacklevel=2)
            if passthrough and self.oc.format.name not in HOLDERS:  # (a batch job's chunk: its join says it)
                name = self.oc.format.name
                lost = not_kept(info.rotation, info.display_matrix,
                                f"this {name} output" if self.tmp is not None else f"a {name} stream")
                if lost:
                    warnings.warn(lost, stacklevel=2)
            if choice.low_memory_x264:
                log.info("output beyond 4K: libx264 with %s to bound its memory (-x x264-params=... overrides)",
                         BIG_OUTPUT_X264_PARAMS)
            # what the run's report names: the settings the encoder really runs with, its defaults included
            self.codec, self.pix_fmt, self.colour = choice.codec, choice.pix_fmt, choice.colour
            self.width, self.height = choice.width, choice.height  # (x4, or --scale's)
            self._reformatter = VideoReformatter()  # (--scale's downscale, set up once)
            self.crf, self.preset, self.quantiser = choice.crf, choice.preset, choice.quantiser
            self.encoder_options, self.low_memory_x264 = choice.encoder_options, choice.low_memory_x264
            # (an output with alpha: the planes of a frame with an alpha plane, which finish() fills from the
            # source's, taken frame by frame also where the output has none)
            # (a palette codec's frames: RGB(A) made, then a palette each, vsr.video.palette)
            self._made = ("rgba" if info.has_alpha else "rgb24") if self.pix_fmt == "pal8" else self.pix_fmt
            self._palettes = Palettes() if self.pix_fmt == "pal8" else None
            self.planes, self._frame_fmt = output_planes(self._made, self.colour)
            self._alpha = info.alpha
            self._alpha_top = (1 << bit_depth(self._frame_fmt)) - 1 if self._frame_fmt else 0
            self.vs = self._add_video(choice)
            self._durations = PacketDurations(self.oc.format.name)
            # (what is in pixels beside the picture grows with it: x4, or --scale's)
            self.scale = factor(info.width, choice.width)
            self._captions = PictureMessages(info.captions, info.hdr10plus, av.Codec(choice.codec, "w").canonical_name,
                                             self.scale, dovi=info.dovi, rpus=choice.dolby_vision is not None,
                                             colour=choice.colour)
            self.origin = self.pts_offset = origin(info, self.oc.format.name) if passthrough else 0  # (a clock)
            if info.kind == "video" and passthrough:
                joins = info.stream_index if info.container in CLOCKED else None  # (where clocks restart)
                self.passthrough = Passthrough(info.path if info.side_packets is None else info.side_packets, self.oc,
                                               joins)
            self.oc.metadata.update(info.container_metadata)
            # the source's chapters (not a batch job's chunk): as they are before the header, or once a trimmed
            # output's span is known (end())
            self._chapters = info.chapters if passthrough else ()
            if said := chapters_dropped(self.oc.format.name, self._chapters):
                warnings.warn(said, stacklevel=2)
                self._chapters = ()
            self._chapters_before_header(trim)
            writes(lambda sink: open_encoder(sink.oc, sink.vs, choice))(self)  # (the header's full disk: OUT named)
        except BaseException:
            self.abort()
            raise

    def _chapters_before_header(self, trim: bool) -> None:
        """An untrimmed output's chapters, set before its header is written (mp4 then makes its chapter track)."""
        if self._chapters and not trim:
            self.oc.set_chapters(as_written(self._chapters, self.origin * Fraction(self.info.time_base)))

    def _open(self, dst: Path, settings: EncoderSettings):
        """The output container, under a temporary name beside the output (:attr:`tmp`, renamed on commit)."""
        self.dst = output_path(dst)
        self.tmp = video_partial(self.dst)
        try:
            muxer = muxer_for(self.dst.name)
            self._partial = Partial(self.tmp)  # (its io: what FFmpeg and the rewrites open, never the name)
            oc = av.open(str(self._partial.io), "w", format=muxer)
            oc.options.update(muxer_options(oc.format.name, self.info.plays))  # (an animation's loops, AVI's shift)
            return oc
        except ValueError:
            raise InputError(f"unknown output container for {self.dst.name!r} (use .mp4, .mkv, .mov, ...)") from None
        except (av.FFmpegError, OSError) as e:
            raise InputError(f"cannot write {self.dst}: {getattr(e, 'strerror', None) or e}") from None

    def _container(self) -> OutputContainer:
        """What :func:`choose_encoder` needs of the opened container: a file's, which a person plays."""
        return OutputContainer.of(self.oc)

    def _open_in_memory(self, dst: Path):
        """For ``probe``: the container FFmpeg picks for ``dst``'s name, writing into memory (nothing on disk)."""
        self.dst = output_path(dst)
        self.tmp = video_partial(self.dst)  # never created: abort's unlink finds nothing
        try:
            return av.open(NamedBuffer(self.dst.name), "w")
        except ValueError:
            raise InputError(f"unknown output container for {self.dst.name!r} (use .mp4, .mkv, .mov, ...)") from None

    def plane_dtype(self) -> np.dtype:
        return np.dtype(np.uint8 if bit_depth(planar444(self.pix_fmt)) <= 8 else np.uint16)

    def memory_estimate_mb(self) -> float:
        """What the encoder itself will hold at its peak, estimated from measurements (see ENCODER_MB_PER_MPX)."""
        return self.choice.memory_mb

    def new_planes(self, height: int, width: int) -> np.ndarray | FramePlanes:
        """Where one output frame's integer planes (of :attr:`planes`) are assembled, region by region: for
        Y/Cb/Cr and G/B/R the planes of the frame the encoder will get (with its alpha plane, filled by
        :meth:`finish`)."""
        if self._frame_fmt is not None:
            return FramePlanes(width, height, self._frame_fmt)
        if self.planes.packed:
            return np.empty((3, height, width), self.plane_dtype())
        return FramePlanes(width, height, self.planes.pix_fmt)

    def finish(self, planes: np.ndarray | FramePlanes, pts: int | None = None) -> av.VideoFrame:
        """A complete frame from :meth:`new_planes` (of the source's frame at ``pts``) -> the frame to encode
        (output pixel format, colour tags, the source's alpha upscaled where the output has alpha).

        Called in the post-processing stage, so the encoder thread only encodes (RGB and formats other than planar
        YUV are repacked by swscale here).
        """
        alpha = self._alpha.take(pts) if self._alpha is not None and pts is not None else None
        if getattr(planes, "alpha", None) is not None:
            upscale_into(alpha, planes.alpha, self._alpha_top)
        frame = resized(planes_to_frame(planes, self._made, self.colour), self.width, self.height,  # (--scale)
                        self._reformatter)
        return frame if self._palettes is None else self._palettes(frame)

    def _add_video(self, choice: EncoderChoice):
        """The output video stream as ``choice`` says (codec, size, pixel format, options, colour tags), at the
        source's rate, time base and aspect, with its rotation and tags."""
        info = self.info
        vs = self.oc.add_stream(choice.codec, rate=info.rate or None)
        if choice.codec_tag is not None:
            vs.codec_tag = choice.codec_tag
        vs.width, vs.height = choice.width, choice.height
        vs.pix_fmt = choice.pix_fmt
        vs.time_base = self._stream_time_base()
        cc = vs.codec_context
        # one frame a tick where the container keeps no timestamps (a raw H.264 stream, AVI): the encoder's too,
        # which x264 writes as the stream's clock (VUI), a raw stream's only frame rate
        cc.time_base = self.encoder_tb = vs.time_base if vs.time_base != info.time_base else encoder_time_base(
            choice.codec, Path(info.path), info.kind, info.time_base, info.rate, film=info.film)
        sar = sample_aspect(info.sample_aspect_ratio, info.width, info.height, choice.width, choice.height)
        if sar:
            cc.sample_aspect_ratio = sar
        for name, value in choice.colour_tags().items():
            setattr(cc, name, value)
        siting = {"chroma_sample_location": SITING_NAMES[self.planes.siting]} if self.planes.siting else {}
        # (the chroma where vsr.video.planes sited it, for players; a constant rate said as one: x264's VUI)
        vs.options = clock_options(choice.codec, {**self.encoder_options, **siting}, info, cc.time_base)
        vs.thread_type = "AUTO"
        if bound := fewer_cores():  # a container's CPU quota, a worker's share: the encoder's own count ignores them
            cc.thread_count = bound
        if info.display_matrix is not None:  # a mirror too, not only the angle
            vs.set_display_matrix(output_matrix(info.display_matrix, (info.width, info.height),
                                                (choice.width, choice.height)))
        elif info.rotation:
            vs.set_display_rotation(info.rotation)
        vs.metadata.update(track_tags(info.metadata, self.oc.format.name, DROPPED_TAGS))
        # the one video: without it Matroska's muxer writes FlagDefault 0 (FFmpeg leaves the flag to its caller)
        vs.disposition = av.stream.Disposition.default
        return vs

    def _stream_time_base(self) -> Fraction:
        """The source's time base, or one frame where the container keeps no timestamp per frame (AVI: its
        header's frame rate is the stream's time base, every index entry one tick), for a constant-rate source."""
        info = self.info
        if self.oc.format.flags & VARIABLE_FPS or not info.rate:
            return info.time_base
        if info.kind in ("video", "webp") and Path(info.path).is_file() and not info.film:  # (a film's are even)
            check_constant_rate(Path(info.path), info.rate, self.oc.format.name, info.kind)
        return 1 / Fraction(info.rate)

    # ---- writing -------------------------------------------------------------------------------

    def _window(self) -> Window | None:
        """What passthrough packets a trimmed output keeps (None: untrimmed, all of them)."""
        if not self.keep_window:
            return None
        return Window(self._window_start if self.pts_offset != self.origin else None, self._window_end)

    def _copy_until(self, t_src: float | None) -> None:
        if self.passthrough is not None:
            self.passthrough.copy_until(t_src, float(self.pts_offset * self.info.time_base), self._window())

    @writes
    def write(self, planes: np.ndarray | av.VideoFrame, pts: int, duration: int) -> None:
        """Encode one frame: integer 4:4:4 planes, or a frame made by :meth:`finish`."""
        t = float(pts * self.info.time_base)
        if self._window_start is None:
            self._window_start = t
            if self.keep_window:
                self.pts_offset = pts - self.info.start_pts + self.origin
        frame = planes if isinstance(planes, av.VideoFrame) else planes_to_frame(planes, self.pix_fmt, self.colour)
        frame.pts = self._encoder_ts(pts - self.pts_offset)
        frame.time_base = self.encoder_tb
        self._window_end = t + float((duration or 0) * self.info.time_base)
        if duration:  # (where the frame ends, in the encoder's time base)
            duration = self._encoder_ts(pts - self.pts_offset + duration) - frame.pts
        self._captions.frame(pts, frame.pts)
        if duration:
            frame.duration = duration
        self._durations.frame(frame.pts, duration)
        for pkt in self._dts.repair(self.vs.encode(frame)):
            self._copy_until(float(pkt.dts * pkt.time_base) + float(self.pts_offset * self.info.time_base)
                             if pkt.dts is not None else t)
            self._mux_video(pkt)

    def _encoder_ts(self, ts: int) -> int:
        """A time in the source's time base, in the encoder's (:func:`~vsr.video.grid.encoder_time_base`)."""
        return ts if self.encoder_tb == self.info.time_base else round(ts * self.info.time_base / self.encoder_tb)

    def _mux_video(self, pkt: av.Packet) -> None:
        pkt = self._durations.packet(self._captions.packet(pkt))
        if self.packet_times is not None:
            self.packet_times.append((pkt.pts, pkt.dts, pkt.duration))
        self.oc.mux(pkt)

    @property
    def written_span(self) -> tuple[float | None, float]:
        """Source seconds from the first frame written to the end of the last one (its time plus duration)."""
        return self._window_start, self._window_end

    def trim_span(self, first_pts: int, end_s: float) -> None:
        """For a trimmed sink (``trim=True``) fed already encoded packets by :meth:`mux`: the span of the source
        they cover (frame A's timestamp; the end of the last frame, in source seconds: another sink's
        :attr:`written_span`), as :meth:`write` finds it from the frames; those packets must then come moved
        back by :attr:`pts_offset`, as :meth:`write` moves frames."""
        self._window_start = float(first_pts * self.info.time_base)
        self._window_end = end_s
        self.pts_offset = first_pts - self.info.start_pts + self.origin

    @writes
    def mux(self, packet: av.Packet) -> None:
        """Mux an already encoded video packet (stream copy, e.g. from a chunk written by a sink with the same
        settings), the source's audio and subtitle packets due before it first, as :meth:`write` does."""
        t = packet.dts if packet.dts is not None else packet.pts
        self._copy_until(float(t * packet.time_base) + float(self.pts_offset * self.info.time_base))
        packet.stream = self.vs
        self.oc.mux(packet)

    @writes
    def end(self) -> None:
        """Flush the encoder (the frames its lookahead and frame threads hold: most of a short 4K clip with
        libx264) and close the file; once.  The runner's encode stage calls it after the last frame, so a run's
        wall time, fps and encode stage include it; :meth:`commit` calls it where nobody did."""
        if self._ended:
            return
        self._ended = True
        for pkt in self._durations.flushed(list(self._dts.repair(self.vs.encode(None), last=True))):
            self._mux_video(pkt)
        if self.passthrough is not None:
            self.passthrough.flush(float(self.pts_offset * self.info.time_base), self._window())
        if self._chapters and self.keep_window and self.tmp is not None and self._window_start is not None:
            offset = self.pts_offset * Fraction(self.info.time_base)  # where frame A went: the source's start
            span = (Fraction(self._window_start), Fraction(self._window_end))
            self.oc.set_chapters(as_written(self._chapters, offset, span))
        container = self.oc.format.name
        try:
            self.oc.close()
        except av.FFmpegError as e:  # the muxer's end (an index, a timecode track) refused: a one-line error
            if isinstance(e, OSError) and e.errno in WRITE_ERRNOS:
                raise
            raise OutputError(f"cannot finish {self.dst}: the {container} muxer refused to write its end "
                              f"({e.strerror or e})") from e
        for line in filter(None, self._write_container_metadata(container)):
            warnings.warn(line, stacklevel=2)

    def _write_container_metadata(self, container: str) -> list[str | None]:
        """Into the closed file (a stream is not rewritten), what no muxer writes from PyAV: the container's copy
        of the source's HDR metadata, Dolby Vision's configuration and a 360 video's view, in one rewrite
        (:mod:`vsr.video.track_metadata`), and a phone's place and time; what could not be written, said in a line
        each."""
        hdr = as_encoded(self.codec, dict(self.encoder_options), self.info.hdr) if self.tmp is not None else None
        colour = hdr_metadata(container, hdr)
        view, lost = view_metadata(self.tmp is not None, container, self._view, self.scale)
        dv = track_metadata(container, self.choice.dolby_vision if self.tmp is not None else None)
        shape = display_metadata(container, self.vs.codec_context if self.tmp is not None else None)
        try:
            add_track_metadata(self._partial.io if self._partial else None, container, colour + view + dv + shape)
            said = [lost]
        except NotWritable as e:
            said = [hdr_not_written(container, hdr, self.codec, e) if colour else None,
                    view_not_written(container, self._view, e) if view else None,
                    f"Dolby Vision's configuration could not be written into the {container} file ({e})"
                    if dv else None, display_not_written(container, e) if shape else None]
        if self.tmp is not None:
            said.append(write_container_keys(self._partial.io, container, self.info.container_metadata))
            set_last_duration(self._partial.io, container, self._durations.last * self.encoder_tb)
        return said

    @writes
    def commit(self, before_rename: Callable[[], None] | None = None) -> None:
        """:meth:`end` (if not done yet), then (after ``before_rename()``, if given) move the file into place."""
        interrupt.check()  # no flush of a stopped run (nor a stream's clean end)
        self.end()
        if before_rename is not None:
            before_rename()
        self._move_into_place()

    def _move_into_place(self) -> None:
        commit_output(self.tmp, self.dst, self.info.path)
        self._partial.close()

    def abort(self) -> None:
        self._close_quietly()
        self.tmp.unlink(missing_ok=True)

    def _close_quietly(self) -> None:
        for c in (getattr(self, "oc", None), self.passthrough, self._partial):
            try:
                if c is not None:
                    c.close()
            except Exception:  # closing a half-written container may fail; the file goes anyway
                pass


__all__ = ["EncoderSettings", "VideoSink"]
