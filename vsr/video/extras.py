"""What a file holds besides its video, sound and subtitles: attachments (the fonts of its ASS subtitles), cover
pictures, and the streams no output holds (another video, data), each found once for
:class:`vsr.video.passthrough.Passthrough`."""

from __future__ import annotations

from dataclasses import dataclass

from vsr.video.reading import tags
from vsr.video.streams import is_attached_pic, main_video

# FFmpeg's output formats that hold attachments, and those that hold a cover picture as a stream
ATTACHMENTS = ("matroska",)
COVERS = ("mp4", "ipod")  # (QuickTime's own .mov writes no cover: FFmpeg's mov muxer drops it)
COVER_TYPES = {"png": "image/png", "mjpeg": "image/jpeg", "bmp": "image/bmp", "webp": "image/webp"}


@dataclass(frozen=True)
class Extra:
    """An attachment (``cover=False``) or a cover picture of the source: its file name, MIME type and bytes,
    and for a cover the source stream it came from."""

    name: str
    mimetype: str
    data: bytes
    cover: object = None


def read_extras(c) -> list[Extra]:
    """The attachments and cover pictures of the opened video file ``c`` (not its video, even if that is one
    picture); a cover's stream is ``c``'s, to be used while ``c`` is open."""
    out = []
    main = main_video(c) if c.streams.video else None
    for st in c.streams:
        if st.type == "attachment":
            out.append(_attachment(st))
        elif st.type == "video" and st is not main and is_attached_pic(st):
            codec = st.codec_context.name if st.codec_context else None
            pkt = next((p for p in c.demux(st) if p.size), None)
            if pkt is not None:
                ext = {"mjpeg": "jpg"}.get(codec, codec or "bin")
                meta = tags(st.metadata)
                out.append(Extra(meta.get("filename", f"cover.{ext}"),
                                 meta.get("mimetype", COVER_TYPES.get(codec, "application/octet-stream")),
                                 bytes(pkt), st))
    return out


def attachments(c) -> list[Extra]:
    """The attachments of the opened ``c``: in its header, so a stream on standard input has them too (its
    covers are packets, which :func:`read_extras` would demux from a pipe that cannot be read again)."""
    return [_attachment(st) for st in c.streams if st.type == "attachment"]


def _attachment(st) -> Extra:
    return Extra(st.name or f"attachment{st.index}", st.mimetype or "application/octet-stream", bytes(st.data))


# data streams that mean nothing outside their source's structure: a DVD's navigation packets
NAVIGATION = ("dvd_nav_packet",)


AVDISCARD_ALL = 48  # what FFmpeg's MP4/MOV reader marks a chapter track with (read as the file's chapters)


def left_out(c) -> list[str]:
    """The streams of the opened file ``c`` that no output holds: a video other than its video and its covers
    (another angle, a second programme), data (telemetry, SCTE-35 cues, ...; not a QuickTime timecode track,
    which the video's timecode tag makes again, nor a DVD's navigation), each as "stream N (what)"."""
    main = main_video(c) if c.streams.video else None
    out = []
    for st in c.streams:
        named = {k.lower(): v for k, v in tags(st.metadata).items()}
        if st.type == "video" and st is not main and not is_attached_pic(st):
            cc = st.codec_context
            out.append(f"stream {st.index} (another video, {cc.name} {cc.width}x{cc.height})")
        elif (st.type == "data" and "timecode" not in named and st.name not in NAVIGATION
              and getattr(st, "discard", 0) != AVDISCARD_ALL):  # (an MP4's chapter track: its chapters follow)
            what = ", ".join(repr(x) for x in (st.name, named.get("handler_name", "").strip()) if x)
            out.append(f"stream {st.index} (data{', ' + what if what else ''})")
    return out
