"""A folder of picture frames (PNG, JPEG, TIFF, BMP or WebP) as a source: its frames in the order their names number
them (:func:`~vsr.video.png_frames.frame_files`), read as float32 RGB, frame i at i / rate."""

from __future__ import annotations

import os
from fractions import Fraction
from pathlib import Path
from typing import Iterator

import numpy as np

from vsr.errors import InputError
from vsr.video.alpha import Alpha
from vsr.video.captions import FrameStore
from vsr.video.exif_orientation import orientation_of, png_orientation, upright
from vsr.video.png_colour import read_colour
from vsr.video.png_frames import KIND_NAMES, frame_files, frame_kind
from vsr.video.source import SourceFrame, VideoInfo

FOLDER_RATE = Fraction(25)  # (a folder's rate where none is given: --frame-rate's default)
MAX_RATE = 1000


def parse_frame_rate(value) -> Fraction:
    """``--frame-rate R`` -> frames a second, exactly: ``24``, ``30000/1001``, ``12.5``; NTSC's decimals (``23.976``,
    ``29.97``, ``59.94``: N/1.001 to two or three places) are their N * 1000/1001, the rate they stand for.  Above 0,
    at most :data:`MAX_RATE`; else one line."""
    text = str(value).strip()
    try:
        rate = Fraction(text)
    except (ValueError, ZeroDivisionError):
        rate = None
    if rate is None or not 0 < rate <= MAX_RATE:
        raise InputError(f"--frame-rate must be frames a second above 0 and at most {MAX_RATE} (24, 23.976, "
                         f"30000/1001), not {text!r}")
    ntsc = round(rate * Fraction(1001, 1000))
    if "." in text and rate.denominator != 1 and abs(rate - Fraction(ntsc * 1000, 1001)) < Fraction(5, 1000):
        return Fraction(ntsc * 1000, 1001)
    if rate.denominator > 1_000_000:  # (a time base 1/R that containers' 32-bit fields hold)
        raise InputError(f"--frame-rate {text}: give it as N/D with D at most 1000000 (e.g. 30000/1001)")
    return rate


class FrameFolderSource:
    """The frames of a folder (:func:`~vsr.video.png_frames.frame_files`: ``9.png`` before ``10.png``, a gap an
    error; one kind of picture) at ``rate`` frames a second: timestamps ``0, 1, 2, ...`` in a ``1 / rate`` time
    base."""

    def __init__(self, path: Path, rate: Fraction = FOLDER_RATE):
        self.path = Path(path)
        self.files = [self.path] if self.path.is_file() else frame_files(self.path)  # (one picture: one frame)
        if not self.files:
            raise InputError(f"zero frames: no {KIND_NAMES} files in folder {self.path}")
        first = decode(self.files[0])
        h, w = first.shape[:2]
        bits = 16 if first.dtype == np.uint16 else 8
        alpha = first.ndim == 3 and first.shape[2] == 4  # (the first frame decides, as a video's does)
        pix_fmt = ("rgba64le" if alpha else "rgb48le") if bits == 16 else ("rgba" if alpha else "rgb24")
        colour, hdr = read_colour(self.files[0])  # (sRGB, or what a PNG's cICP says: vsr.video.png_colour)
        self.info = VideoInfo(path=self.path, kind="png", width=w, height=h, pix_fmt=pix_fmt, bits=bits,
                              colour=colour, time_base=1 / Fraction(rate), rate=Fraction(rate),
                              frames=len(self.files), alpha=FrameStore() if alpha else None, hdr=hdr)

    def frames(self, start: int = 0) -> Iterator[SourceFrame]:
        for i in range(start, len(self.files)):
            rgb, alpha = read_frame(self.files[i], (self.info.height, self.info.width), with_alpha=True)
            if self.info.alpha is not None:
                self.info.alpha.put(i, i, alpha)
            yield SourceFrame(i, i, 1, rgb)

    def close(self) -> None:
        pass


def decode(path: Path) -> np.ndarray:
    """The picture at ``path`` as OpenCV reads it: BGR or BGRA (PNG, TIFF and WebP keep their alpha), grey, 8 or
    16 bits; a JPEG, TIFF, WebP or PNG turned upright by its EXIF orientation, as viewers show it.  One line where
    it cannot be read."""
    import cv2

    kind = frame_kind(path) or "PNG"
    data = None
    if kind in ("JPEG", "TIFF", "WebP"):  # (read once: the checks below and OpenCV's decode take the same bytes)
        with open(path, "rb") as f:
            data = bytearray(f.read())
    if kind == "JPEG" and not _whole_jpeg(data):
        raise InputError(f"not a whole JPEG image: {path} (its data ends before the picture does)")
    # JPEG: IMREAD_COLOR applies the EXIF orientation, which IMREAD_UNCHANGED leaves out; BMP: no alpha (a 32-bit
    # BMP's fourth byte is most often padding, 0: a picture wholly transparent)
    flags = cv2.IMREAD_COLOR if kind in ("JPEG", "BMP") else cv2.IMREAD_UNCHANGED
    orientation = png_orientation(path) if kind == "PNG" else 1  # (IMREAD_UNCHANGED leaves a PNG's eXIf unapplied)
    if kind in ("TIFF", "WebP"):  # (their EXIF orientation: vsr.video.exif_orientation)
        orientation = orientation_of(data, kind)
    try:
        if data is not None:
            img = cv2.imdecode(np.frombuffer(data, np.uint8), flags) if data else None  # (empty: OpenCV asserts)
        else:
            img = cv2.imread(os.fsencode(path), flags)  # (bytes: OpenCV crashes on a name that is not UTF-8)
    except cv2.error as e:  # (its checks assert: a header's size past its limit was a traceback)
        if "validateInputImageSize" in str(e):
            raise InputError(f"{path}: its header says a picture larger than OpenCV reads (2^30 pixels, or "
                             "OPENCV_IO_MAX_IMAGE_PIXELS where set)") from None
        raise InputError(f"not a {kind} image: {path}") from None
    if img is None:
        raise InputError(f"not a {kind} image: {path}")
    img = upright(img, orientation)
    if img.dtype not in (np.uint8, np.uint16):
        raise InputError(f"{path}: its samples are {img.dtype}; vsr reads frames of 8 or 16 bits per sample")
    return img


def _whole_jpeg(data: bytearray) -> bool:
    """Whether the JPEG file's bytes ``data`` have its end marker after its last scan: libjpeg decodes a cut file
    without an error, its missing rows grey.  (0xFFD9 cannot occur inside a scan's data: 0xFF there is followed by
    0 or a restart marker.)"""
    scan = data.rfind(b"\xff\xda")
    return not data.startswith(b"\xff\xd8") or scan >= 0 and data.find(b"\xff\xd9", scan) >= 0  # (else: OpenCV's)


def read_frame(path: Path, size: tuple[int, int] | None = None, with_alpha: bool = False):
    """A frame file (:func:`decode`) -> float32 RGB ``(3, H, W)`` in [0, 1] (grey handled; 8 or 16 bit);
    ``with_alpha``: and its :class:`~vsr.video.alpha.Alpha` (None where it has none)."""
    img = decode(path)
    if img.ndim == 2:
        img = np.repeat(img[:, :, None], 3, axis=2)
    alpha = None
    if img.ndim == 3 and img.shape[2] == 4:  # (OpenCV reads grey with alpha as BGRA too)
        alpha = Alpha(np.ascontiguousarray(img[:, :, 3]), 65535 if img.dtype == np.uint16 else 255)
        img = img[:, :, :3]
    if size is not None and img.shape[:2] != size:
        raise InputError(f"{path} is {img.shape[1]}x{img.shape[0]}, the other frames are {size[1]}x{size[0]}")
    top = np.float32(65535.0 if img.dtype == np.uint16 else 255.0)
    rgb = np.ascontiguousarray(img[:, :, ::-1].transpose(2, 0, 1), dtype=np.float32) / top
    return (rgb, alpha) if with_alpha else rgb
