"""``PngFolderSink``: output frames as ``%08d.png`` files in a folder (and the base of
:class:`~vsr.video.picture_sink.PictureSink`: one picture as one file)."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import numpy as np
from av.video.reformatter import VideoReformatter

from vsr.errors import InputError
from vsr.video.captions import PictureMessages
from vsr.video.dovi import carried_into
from vsr.video.png_colour import colour_chunks, with_chunks
from vsr.video.encoder_choice import EncoderSettings
from vsr.video.alpha import upscale_into
from vsr.video.formats import has_alpha
from vsr.video.orientation import not_kept
from vsr.video.output import commit_output, frames_partial, make_frames_folder, output_path, writes
from vsr.video.planes import PlaneFormat
from vsr.video.resize import MODEL_SCALE, factor_of, resized_planes, scaled_size
from vsr.video.source import VideoInfo

PNG_PIX_FMTS = (None, "rgb24", "rgb48be", "rgb48le", "rgb48", "rgba", "rgba64be", "rgba64le", "rgba64")


class PngFolderSink:
    """``%08d.png`` frames (8-bit RGB, or 16-bit where the source or ``pix_fmt`` is deeper than 8 bits; RGBA
    where the source has alpha, :mod:`vsr.video.alpha`, or ``pix_fmt`` asks for it), written into a hidden
    temporary folder (with vsr's marker, :data:`vsr.video.output.MARKER`) that replaces
    the output folder on :meth:`commit`."""

    what = "a folder of PNG frames"  # (what the output is, as its refusals say it)

    def __init__(self, dst: Path, info: VideoInfo, settings: EncoderSettings):
        # a video's options before --pix-fmt, as a Y4M stream says its --crf before its --pix-fmt
        # (vsr.video.encoder_choice): the output's kind first, then what it holds
        given = [name for name, v in (("--codec", settings.codec), ("--crf", settings.crf),
                                      ("--preset", settings.preset), ("-x", settings.options)) if v]
        if given:
            raise InputError(f"{', '.join(given)} set(s) a video encoder, but {dst} is {self.what} "
                             "(give the output a video suffix such as .mp4 or .mkv)")
        self.dst = output_path(Path(dst))
        self.src = info.path
        self.pix_fmt = self._pix_fmt(info, settings.pix_fmt)
        deep = self.pix_fmt.startswith(("rgb48", "rgba64"))
        self._alpha = info.alpha  # (taken frame by frame, also where the output has none)
        self.colour = info.colour.for_output(self.pix_fmt)
        self._chunks = colour_chunks(self.colour, info.hdr)  # (an HDR or wide-gamut picture's: vsr.video.png_colour)
        self.planes = PlaneFormat.of("rgb48le" if deep else "rgb24", self.colour)  # what the post stage fills
        self.width, self.height = scaled_size(info.width, info.height, settings.scale, MODEL_SCALE, None)
        self._reformatter = VideoReformatter()  # (--scale's downscale, set up once)
        said = (factor_of(settings.scale, info.width, info.height)[1],
                carried_into(info, "png", self.pix_fmt, (self.width, self.height))[1],  # (Dolby Vision's RPUs)
                not_kept(info.rotation, info.display_matrix, "PNG frames"))
        for line in filter(None, said):
            warnings.warn(line, stacklevel=2)
        self.tmp = self._partial()
        self.count = 0
        # (none follow into pictures: said once)
        self._captions = PictureMessages(info.captions, info.hdr10plus, "png", dovi=info.dovi)

    def _pix_fmt(self, info: VideoInfo, requested: str | None) -> str:
        """The frames' format: ``requested`` (``--pix-fmt``), else the source's depth (8 or 16 bits) and alpha."""
        if requested not in PNG_PIX_FMTS:
            raise InputError(f"PNG frames are rgb24, rgb48be, rgba or rgba64be, not --pix-fmt {requested}")
        deep = (requested or "").startswith(("rgb48", "rgba64")) or (requested is None and info.bits > 8)
        alpha = (requested or "").startswith("rgba") or (requested is None and info.has_alpha)
        return ("rgba64be" if deep else "rgba") if alpha else ("rgb48be" if deep else "rgb24")

    @writes
    def _partial(self) -> Path:
        """The temporary folder the frames go into, made."""
        tmp = frames_partial(self.dst)
        make_frames_folder(tmp)
        return tmp

    def _frame_name(self) -> Path:
        return self.tmp / f"{self.count:08d}.png"

    def plane_dtype(self) -> np.dtype:
        return self.planes.dtype

    def memory_estimate_mb(self) -> float:
        return 0.0  # one frame at a time, written and gone

    def new_planes(self, height: int, width: int) -> np.ndarray:
        return np.empty((3, height, width), self.plane_dtype())

    def finish(self, planes: np.ndarray, pts: int | None = None) -> np.ndarray:
        """R, G, B planes -> those (at ``--scale``'s size) and, where the output has alpha, the source's frame at
        ``pts``'s upscaled."""
        alpha = self._alpha.take(pts) if self._alpha is not None and pts is not None else None
        planes = resized_planes(planes, self.width, self.height, self._reformatter)  # (--scale)
        if not has_alpha(self.pix_fmt):
            return planes
        out = np.empty((4,) + planes.shape[1:], planes.dtype)
        out[:3] = planes
        upscale_into(alpha, out[3], int(np.iinfo(planes.dtype).max))
        return out

    @writes
    def write(self, planes: np.ndarray, pts: int, duration: int) -> None:
        bgr = np.ascontiguousarray(planes[[2, 1, 0, 3][:len(planes)]].transpose(1, 2, 0))  # (BGR or BGRA)
        # encoded here and written by Python: a full disk is an OSError with its reason (libpng's own write
        # would print "libpng error: Write Error" and only say it failed)
        data = self._encoded(bgr)
        with open(self._frame_name(), "xb") as f:
            f.write(data)
        self.count += 1
        self._captions.frame(pts, pts)

    def _encoded(self, bgr: np.ndarray) -> bytes:
        """A frame (BGR or BGRA, 8 or 16 bits) as the file's bytes."""
        import cv2

        ok, png = cv2.imencode(".png", bgr, [cv2.IMWRITE_PNG_COMPRESSION, 1])
        if not ok:
            raise InputError(f"could not encode frame {self.count} of {self.dst} as PNG")
        return with_chunks(png.tobytes(), self._chunks)

    def end(self) -> None:
        """Nothing to flush: each frame is its own file, written whole by :meth:`write`."""

    @writes
    def commit(self) -> None:
        commit_output(self.tmp, self.dst, self.src)

    def abort(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

