"""What an input or output name opens: :func:`open_source` and :func:`open_sink`.

A video file, a folder of frames (PNG, JPEG, TIFF, BMP, WebP as input; PNG as output), or ``-``: a stream on
standard input or output (:mod:`vsr.video.pipe_source`, :mod:`vsr.video.pipe_sink`).
"""

from __future__ import annotations

from pathlib import Path

from vsr.errors import InputError
from vsr.video.encoder_choice import EncoderSettings
from vsr.video.interlace import MODES
from vsr.video.output import is_picture_out, is_png_folder, is_stream
from vsr.video.pipe_sink import StreamSink
from vsr.video.pipe_source import StreamSource
from vsr.video.picture_sink import PictureSink
from vsr.video.png_sink import PngFolderSink
from vsr.video.sink import VideoSink
from vsr.video.png_frames import one_picture
from vsr.video.frame_source import FrameFolderSource, parse_frame_rate
from vsr.video.source import VideoInfo, VideoSource
from vsr.video.webp_source import AnimatedWebpSource, is_animated_webp


def open_source(path: str | Path, deinterlace: str = "auto", frame_rate: str | None = None, picture: bool = False) -> (
        VideoSource | FrameFolderSource | StreamSource | AnimatedWebpSource):
    """The source at ``path``: a video file, a folder of frames, an animated WebP, or ``-``: a stream on
    standard input;
    ``deinterlace``: "auto" (an interlaced video's frames deinterlaced as they are decoded) or "off";
    ``frame_rate``: a folder's frames a second (``--frame-rate``, :func:`parse_frame_rate`; None: 25), refused for
    any other input, which has its own timestamps; ``picture``: one picture (:func:`~vsr.video.png_frames.one_picture`)
    is read as a folder of that one frame is (FFmpeg's reading of it turns neither its EXIF orientation nor its
    colour into a picture's)."""
    if deinterlace not in MODES:
        raise InputError(f"--deinterlace must be one of {', '.join(MODES)}, not {deinterlace!r}")
    rate = None if frame_rate is None else parse_frame_rate(frame_rate)
    p = None if is_stream(path) else existing(path)
    if rate is not None and (p is None or not p.is_dir()):
        own = "is one picture" if p is not None and one_picture(p) else "has its own timestamps"  # (not: 'its own')
        raise InputError(f"--frame-rate is for a folder of frames, whose pictures have no times; "
                         f"{'standard input' if p is None else p} {own}")
    if p is None:
        return StreamSource(deinterlace=deinterlace)
    if p.is_dir() or picture and one_picture(p):
        return FrameFolderSource(p) if rate is None else FrameFolderSource(p, rate)
    if is_animated_webp(p):  # (FFmpeg reads one picture of it)
        return AnimatedWebpSource(p)
    return VideoSource(p, deinterlace=deinterlace)


def existing(path: str | Path) -> Path:
    """``path``, or the one-line error of a source that is not there (a command checks it before its output)."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"no such file or folder: {p}")
    return p


def open_sink(dst: str | Path, info: VideoInfo, settings: EncoderSettings, scale: int = 4,
              trim: bool = False, frames: tuple[int, int | None] = (0, None)) -> PngFolderSink | VideoSink:
    """A :class:`StreamSink` for ``-`` (standard output, in ``settings.container``), a :class:`PngFolderSink`
    for a folder name, else a :class:`VideoSink` (container from the suffix); ``frames``: a trimmed run's
    ``--frames A:B`` (a stream's header holds its chapters, cut to them)."""
    if is_stream(dst):
        return StreamSink(info, settings, scale, trim, frames)
    if settings.container is not None:
        raise InputError(f"--format {settings.container} is for output - (standard output); the container of "
                         f"{Path(dst).name} follows its suffix")
    if is_png_folder(Path(dst)):
        return PngFolderSink(Path(dst), info, settings)
    if info.kind == "png" and is_picture_out(Path(dst), info.path):
        return PictureSink(Path(dst), info, settings)
    return VideoSink(Path(dst), info, settings, scale, trim)
