"""Opening a file or stream that vsr reads, and the text of its tags.

FFmpeg hands a container's tags over as the bytes the file holds; PyAV decodes them as UTF-8 and by default
refuses the whole file where one is not (an AVI's INFO chunk or an old Matroska title, written in a Windows code
page): such a video was "not a video file".  vsr opens every input with the bytes UTF-8 cannot read kept
(``surrogateescape``, :func:`open_input`) and reads such a tag as Windows-1252, Latin-1 where that has no
character (:func:`tag_text`): what those files' writers used.  And what FFmpeg says when it cannot read one
(:func:`ffmpeg_log`, :func:`one_line`).
"""

from __future__ import annotations

import os
import re
from contextlib import contextmanager
from typing import Iterator

import av
import av.logging

from vsr.errors import InputError
from vsr.files import special_kind


def open_input(file, **options):
    """``av.open(file, "r", **options)``, its tags' undecodable bytes kept for :func:`tag_text`."""
    return av.open(file, "r", metadata_errors="surrogateescape", **options)


def tag_text(value: str) -> str:
    """A tag as text: itself where it was UTF-8, else its bytes as Windows-1252 (or Latin-1)."""
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        raw = value.encode("utf-8", "surrogateescape")
    try:
        return raw.decode("cp1252")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def tags(metadata) -> dict[str, str]:
    """A PyAV metadata mapping (a container's, a stream's, a chapter's) as text."""
    return {tag_text(k): tag_text(v) for k, v in metadata.items()}


def one_line(e: Exception) -> str:
    """The reason an FFmpeg (or file) error gives, on one line."""
    if isinstance(e, av.FFmpegError) and e.strerror:
        return e.strerror
    return (str(e).splitlines() or [type(e).__name__])[0][:200]


@contextmanager
def ffmpeg_log(lines: list[str], named: list | None = None) -> Iterator[None]:
    """FFmpeg's error lines logged in the block (its log is off by default) appended to ``lines``: its own
    words for an error message, where PyAV's errno text can mislead (a picture too large for FFmpeg reads
    "Device or resource busy"); to ``named`` as they came, ``(level, name, text)``."""
    previous = av.logging.get_level()
    av.logging.set_level(av.logging.ERROR)
    try:
        with av.logging.Capture() as logs:
            yield
    finally:
        av.logging.set_level(previous)
        lines.extend(text.strip() for _level, _name, text in logs if text.strip())
        if named is not None:
            named.extend(logs)


def ffmpeg_reason(e: Exception, lines: list[str]) -> str:
    """The reason of ``e`` on one line, with the last line FFmpeg logged (:func:`ffmpeg_log`)."""
    return f"{one_line(e)}: {lines[-1][:120]}" if lines else one_line(e)


def size_error(what: str, lines: list[str]) -> InputError | None:
    """The error of a picture size FFmpeg refused to decode (its log ``lines``), or None."""
    size = next((m for m in map(_INVALID_SIZE.search, lines) if m), None)
    if size is None:
        return None
    # FFmpeg prints the sizes unsigned: a header's W-64 is 4294967232
    width, height = (v - (1 << 32) if v >= 1 << 31 else v for v in (int(size[1]), int(size[2])))
    if width > 0 and height > 0:
        return InputError(f"cannot read {what}: its picture size {width}x{height} is larger than FFmpeg decodes "
                          "(about 268 million pixels at most, e.g. 16000x16000)")
    return InputError(f"cannot read {what}: its picture size {width}x{height} is invalid")


_INVALID_SIZE = re.compile(r"Picture size (\d+)x(\d+) is invalid")


def check_video_file(path) -> None:
    """The source opener's one-line refusal of a file FFmpeg should not be asked to read: a device or a pipe
    (it waits, or reads for ever), an empty file (FFmpeg's "Invalid data found" says less)."""
    mode = os.stat(path).st_mode
    kind = special_kind(mode)
    if kind:
        raise InputError(f"not a video file: {path} is {kind}"
                         + (" (give - and feed it on standard input)" if kind == "a named pipe" else ""))
    if os.stat(path).st_size == 0:
        raise InputError(f"not a video file: {path} is empty")


def open_error(path, e: Exception) -> InputError:
    """Why ``open_input(path)`` fails, in FFmpeg's own words where it logged them (the open is repeated with
    FFmpeg's log captured, only on this error path)."""
    lines: list[str] = []
    with ffmpeg_log(lines):
        try:
            open_input(str(path)).close()
        except (av.FFmpegError, OSError, ValueError):
            pass
    return size_error(str(path), lines) or InputError(f"not a video file: {path} ({ffmpeg_reason(e, lines)})")
