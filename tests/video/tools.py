"""Helpers the video tests share."""

from __future__ import annotations

import functools
import shutil
import subprocess

import pytest


def ffmpeg() -> str:
    """The system's ffmpeg command (the tests' independent maker and reader of files), or the test skips."""
    path = shutil.which("ffmpeg")
    if path is None:
        pytest.skip("needs ffmpeg")
    return path


@functools.cache
def _encoders(path: str) -> str:
    return subprocess.run([path, "-hide_banner", "-encoders"], capture_output=True, text=True).stdout


def ffmpeg_with(*encoders: str) -> str:
    """:func:`ffmpeg`, or the test skips where that ffmpeg was built without one of ``encoders``."""
    path = ffmpeg()
    missing = [e for e in encoders if f" {e} " not in _encoders(path)]
    if missing:
        pytest.skip(f"needs ffmpeg with {', '.join(missing)}")
    return path


def flat_through_sink(src, out, settings=None, scale: int = 1) -> None:
    """``src`` through vsr's sink into ``out``: a flat grey frame at each of the source's frame times (the encoder,
    muxer and passthrough of extras under test, without a model)."""
    import numpy as np

    from vsr.video import EncoderSettings, open_sink, open_source

    source = open_source(src)
    try:
        sink = open_sink(out, source.info, settings or EncoderSettings(), scale=scale)
        flat = np.full((3, source.info.height * scale, source.info.width * scale), 100, sink.plane_dtype())
        for f in source.frames():
            sink.write(flat, f.pts, f.duration)
        sink.commit()
    finally:
        source.close()


def upscale_piped(src, out, *extra: str) -> subprocess.CompletedProcess:
    """``vsr upscale - OUT`` (a tiny random model, the fastest x264/x265 preset, ``extra`` options) with the file
    ``src`` on standard input: a stream is decoded in a pass of its own (vsr.video.pipe_source).  Its standard
    output as bytes (``OUT`` may be ``-``), its standard error as text."""
    import sys
    from pathlib import Path

    with open(src, "rb") as f:
        done = subprocess.run([sys.executable, "-m", "vsr", "upscale", "-", str(out), "--weights", "random", "--config",
                               "edvr-tiny", "--backend", "torch", "--threads", "1", "--preset", "ultrafast", "--quiet",
                               *extra], stdin=f, capture_output=True, cwd=Path(__file__).resolve().parents[2])
    done.stderr = done.stderr.decode("utf-8", "replace")
    return done
