"""Opening the encoder that :func:`vsr.video.encoder_choice.choose_encoder` chose: every option it did not take,
or took with a complaint, is one line naming it; the encoders that print to the terminal themselves (SVT-AV1,
x265) print only errors unless asked."""

from __future__ import annotations

import os
import re
from contextlib import contextmanager
from typing import Iterator

import av
import av.logging

from vsr.errors import InputError
from vsr.video.codecs import check_size
from vsr.video.encoder_choice import EncoderChoice
from vsr.video.output import WRITE_ERRNOS
from vsr.video.threads import normal_policy

# What encoders log (at warning level) for an option they did not take while opening anyway.
REJECTED_OPTION = re.compile(r"Error parsing option|Unknown option|Invalid value for|bad value for", re.I)


@contextmanager
def captured_ffmpeg_log() -> Iterator[list[tuple[int, str, str]]]:
    """FFmpeg's warnings and errors of this thread, as ``(level, name, message)``, instead of nowhere."""
    level, skip = av.logging.get_level(), av.logging.get_skip_repeated()
    av.logging.set_level(av.logging.WARNING)
    av.logging.set_skip_repeated(False)  # the same bad option in a second sink must be seen again
    try:
        with av.logging.Capture() as logs:
            yield logs
    finally:
        av.logging.set_skip_repeated(skip)
        av.logging.set_level(level)


@contextmanager
def quiet_encoder(codec: str, quiet: bool) -> Iterator[None]:
    """SVT-AV1 prints its settings to stderr itself; ``quiet`` lets it print errors only.

    It reads ``SVT_LOG`` once, when its first encoder in the process opens; a user's own ``SVT_LOG`` wins.
    """
    if not quiet or codec != "libsvtav1" or "SVT_LOG" in os.environ:
        yield
        return
    os.environ["SVT_LOG"] = "1"  # SVT_LOG_ERROR
    try:
        yield
    finally:
        del os.environ["SVT_LOG"]


def quiet_options(codec: str, opts: dict[str, str], quiet: bool) -> dict[str, str]:
    """``opts`` with x265's own log cut to errors under ``quiet``: x265 prints its settings and statistics to
    stderr itself, past FFmpeg's log level.  A ``log-level`` the user gave in ``x265-params`` wins."""
    if not quiet or codec != "libx265":
        return opts
    params = opts.get("x265-params", "")
    if re.search(r"(^|:)log-level=", params):
        return opts
    return {**opts, "x265-params": f"{params}:log-level=error" if params else "log-level=error"}


def _first_error(e: Exception, logs: list[tuple[int, str, str]]) -> str:
    """The encoder's own first error message, else the exception's, on one line."""
    errors = [m.strip() for level, _, m in logs if level <= av.logging.ERROR]
    if errors:
        return errors[0]
    if isinstance(e, av.FFmpegError) and e.strerror:
        return e.strerror
    return (str(e).splitlines() or [type(e).__name__])[0][:120]


def open_encoder(oc, vs, choice: EncoderChoice) -> None:
    """Start encoding ``oc`` (its video stream ``vs`` set up with ``choice``'s options); every option the
    encoder did not take, or took with a complaint, is an InputError naming it as the user gave it."""
    codec = vs.codec_context.name
    quiet = choice.settings.quiet
    vs.options = quiet_options(codec, dict(vs.options), quiet)
    with quiet_encoder(codec, quiet), captured_ffmpeg_log() as logs:
        try:
            oc.start_encoding()
            normal_policy()  # SVT-AV1 started its threads at real-time priority where it could
        except (av.FFmpegError, ValueError) as e:
            if isinstance(e, OSError) and e.errno in WRITE_ERRNOS:
                raise  # the header's write: the output's disk, not the options (the sink names the output)
            if any("Picture size" in m for _, _, m in logs):
                check_size(codec, vs.width, vs.height)
            why = _first_error(e, logs)
            who = next((name for level, name, _ in logs if level <= av.logging.ERROR), None)
            audio = {s.codec_context.name for s in oc.streams.audio if s.codec_context is not None}
            if who in audio and who != codec:  # an audio re-encode (vsr.video.passthrough), not the video's
                hint = "" if oc.format.name == "matroska" else " (an .mkv output keeps the source's audio as it is)"
                raise InputError(f"the {who} encoder cannot take the source's audio: {why}{hint}") from None
            shown = " ".join(f"{k}={v}" for k, v in choice.options) or "defaults"
            raise InputError(f"{codec} rejected its options ({shown}): {why}") from None
    unused = {k: v for k, v in vs.options.items() if k not in oc.options}  # (PyAV offers the muxer's to the codec)
    if unused:
        key, value = next(iter(unused.items()))
        raise InputError(f"{codec} has no option {key!r} ({choice.option_name(key, value)})")
    rejected = [m.strip() for _, _, m in logs if REJECTED_OPTION.search(m)]
    if rejected:
        params = [f"-x {k}={v}" for k, v in choice.options if k.endswith(("-params", "opts"))]
        where = params[0] if len(params) == 1 else "an option"
        raise InputError(f"{codec} rejected {where}: {rejected[0]}")
