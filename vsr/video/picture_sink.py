"""``PictureSink``: the upscale of one picture as one picture file (``vsr upscale photo.jpg big.jpg``), of the
kind its suffix names: PNG, JPEG, TIFF or WebP (:data:`PICTURE_OUT`).

JPEG is written at quality 95 with full-resolution colour (4:4:4: OpenCV's default 4:2:0 halves the colour the
model made); TIFF lossless (LZW) at the source's depth, 16 bits kept; WebP lossless.  JPEG and WebP hold 8 bits a
sample and JPEG no alpha: a deeper source, or its alpha, is dropped with one line naming what keeps it, as a video
codec without alpha does.  The picture is upright (its source's EXIF orientation applied), with no orientation
tag of its own.

An HDR or wide-gamut source's colour (a PNG's ``cICP``: :mod:`vsr.video.png_colour`) goes into a PNG alone: JPEG,
TIFF and WebP have no such tag, only an ICC profile, and none that viewers read describes PQ or HLG; written
untagged it would be shown as sRGB, its colours wrong, so that is said in one line naming what keeps it.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from vsr.errors import InputError
from vsr.video.encoder_choice import EncoderSettings
from vsr.video.hdr import HDR_TRANSFERS
from vsr.video.output import PICTURE_OUT, video_partial
from vsr.video.png_sink import PNG_PIX_FMTS, PngFolderSink
from vsr.video.source import VideoInfo

# the --pix-fmt each kind of picture can write (None: the source's own)
_PIX_FMTS = {"PNG": PNG_PIX_FMTS, "TIFF": PNG_PIX_FMTS, "JPEG": (None, "rgb24"), "WebP": (None, "rgb24", "rgba")}
_KEEPS = {"alpha": "a .png, .tif or .webp picture keeps it", "deep": "a .png or .tif picture keeps them"}


class PictureSink(PngFolderSink):
    """One picture's upscale, written under a hidden temporary name beside ``dst`` and renamed on :meth:`commit`,
    as a video file is."""

    what = "one picture"

    def __init__(self, dst: Path, info: VideoInfo, settings: EncoderSettings):
        self.kind = PICTURE_OUT[Path(dst).suffix.lower()]
        super().__init__(dst, info, settings)
        if self._chunks and self.kind != "PNG":  # (HDR or wide gamut: vsr.video.png_colour)
            hdr = HDR_TRANSFERS.get(self.colour.transfer)
            what = f"{hdr} HDR" if hdr else "wide-gamut"
            warnings.warn(f"{self.dst}: the source's {what} colour (its cICP tag) cannot be written into a {self.kind} "
                          "picture: viewers will show it as sRGB, its colours wrong (a .png picture keeps it)",
                          stacklevel=2)

    @property
    def codec(self) -> str:
        """What the run's encoder line and report name: the kind written (a JPEG was said 'png')."""
        return self.kind.lower()

    def _pix_fmt(self, info: VideoInfo, requested: str | None) -> str:
        """The PNG folder's choice (:meth:`PngFolderSink._pix_fmt`) within what :attr:`kind` holds."""
        if requested not in _PIX_FMTS[self.kind]:
            fmts = ", ".join(f for f in _PIX_FMTS[self.kind] if f is not None and f[-2:] not in ("be", "le"))
            raise InputError(f"a {self.kind} picture is {fmts}, not --pix-fmt {requested}")
        pix_fmt = super()._pix_fmt(info, requested)
        if self.kind in ("JPEG", "WebP") and pix_fmt.startswith(("rgb48", "rgba64")):
            warnings.warn(f"{self.dst}: the source's {info.bits} bits a sample are written as 8: {self.kind} holds "
                          f"8 ({_KEEPS['deep']})", stacklevel=3)
            pix_fmt = "rgba" if pix_fmt.startswith("rgba") else "rgb24"
        if self.kind == "JPEG" and pix_fmt == "rgba":
            warnings.warn(f"{self.dst}: the source's alpha channel is dropped: JPEG has none ({_KEEPS['alpha']})",
                          stacklevel=3)
            pix_fmt = "rgb24"
        return pix_fmt

    def _partial(self) -> Path:
        return video_partial(self.dst)  # (made by the frame's own write)

    def _frame_name(self) -> Path:
        if self.count:
            raise InputError(f"{self.dst} is one picture: its source has more than one frame")
        return self.tmp

    def _encoded(self, bgr: np.ndarray) -> bytes:
        import cv2

        if self.kind == "PNG":
            return super()._encoded(bgr)
        suffix, params = {"JPEG": (".jpg", [cv2.IMWRITE_JPEG_QUALITY, 95, cv2.IMWRITE_JPEG_SAMPLING_FACTOR,
                                            cv2.IMWRITE_JPEG_SAMPLING_FACTOR_444]),
                          "TIFF": (".tif", [cv2.IMWRITE_TIFF_COMPRESSION, cv2.IMWRITE_TIFF_COMPRESSION_LZW]),
                          "WebP": (".webp", [cv2.IMWRITE_WEBP_QUALITY, 101])}[self.kind]  # (101: lossless)
        ok, data = cv2.imencode(suffix, bgr, params)
        if not ok:
            raise InputError(f"could not encode {self.dst} as {self.kind}")
        return data.tobytes()

    def abort(self) -> None:
        self.tmp.unlink(missing_ok=True)
