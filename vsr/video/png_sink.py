"""``PngFolderSink``: output frames as ``%08d.png`` files in a folder; ``PictureSink``: one picture as one PNG file."""

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
from vsr.video.output import commit_output, frames_partial, make_frames_folder, output_path, video_partial, writes
from vsr.video.planes import PlaneFormat
from vsr.video.resize import MODEL_SCALE, factor_of, resized_planes, scaled_size
from vsr.video.source import VideoInfo

PNG_PIX_FMTS = (None, "rgb24", "rgb48be", "rgb48le", "rgb48", "rgba", "rgba64be", "rgba64le", "rgba64")


class PngFolderSink:
    """``%08d.png`` frames (8-bit RGB, or 16-bit where the source or ``pix_fmt`` is deeper than 8 bits; RGBA
    where the source has alpha, :mod:`vsr.video.alpha`, or ``pix_fmt`` asks for it), written into a hidden
    temporary folder (with vsr's marker, :data:`vsr.video.output.MARKER`) that replaces
    the output folder on :meth:`commit`."""

    def __init__(self, dst: Path, info: VideoInfo, settings: EncoderSettings):
        if settings.pix_fmt not in PNG_PIX_FMTS:
            raise InputError(f"PNG frames are rgb24, rgb48be, rgba or rgba64be, not --pix-fmt {settings.pix_fmt}")
        given = [name for name, v in (("--codec", settings.codec), ("--crf", settings.crf),
                                      ("--preset", settings.preset), ("-x", settings.options)) if v]
        if given:
            raise InputError(f"{', '.join(given)} set(s) a video encoder, but {dst} is a folder of PNG frames "
                             "(give the output a video suffix such as .mp4 or .mkv)")
        self.dst = output_path(Path(dst))
        self.src = info.path
        deep = (settings.pix_fmt or "").startswith(("rgb48", "rgba64")) or (settings.pix_fmt is None and info.bits > 8)
        alpha = (settings.pix_fmt or "").startswith("rgba") or (settings.pix_fmt is None and info.has_alpha)
        self.pix_fmt = ("rgba64be" if deep else "rgba") if alpha else ("rgb48be" if deep else "rgb24")
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
        import cv2

        bgr = np.ascontiguousarray(planes[[2, 1, 0, 3][:len(planes)]].transpose(1, 2, 0))  # (BGR or BGRA)
        # encoded here and written by Python: a full disk is an OSError with its reason (libpng's own write
        # would print "libpng error: Write Error" and only say it failed)
        ok, png = cv2.imencode(".png", bgr, [cv2.IMWRITE_PNG_COMPRESSION, 1])
        if not ok:
            raise InputError(f"could not encode frame {self.count} of {self.dst} as PNG")
        with open(self._frame_name(), "xb") as f:
            f.write(with_chunks(png.tobytes(), self._chunks))
        self.count += 1
        self._captions.frame(pts, pts)

    def end(self) -> None:
        """Nothing to flush: each frame is its own file, written whole by :meth:`write`."""

    @writes
    def commit(self) -> None:
        commit_output(self.tmp, self.dst, self.src)

    def abort(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)


class PictureSink(PngFolderSink):
    """The upscale of one picture as one PNG file (``vsr upscale photo.jpg big.png``), written under a hidden
    temporary name beside it and renamed on :meth:`commit`, as a video file is."""

    def _partial(self) -> Path:
        return video_partial(self.dst)  # (made by the frame's own write)

    def _frame_name(self) -> Path:
        if self.count:
            raise InputError(f"{self.dst} is one picture: its source has more than one frame")
        return self.tmp

    def abort(self) -> None:
        self.tmp.unlink(missing_ok=True)
