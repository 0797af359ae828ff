"""Helpers the video tests share."""

from __future__ import annotations

import shutil

import pytest


def ffmpeg() -> str:
    """The system's ffmpeg command (the tests' independent maker and reader of files), or the test skips."""
    path = shutil.which("ffmpeg")
    if path is None:
        pytest.skip("needs ffmpeg")
    return path
