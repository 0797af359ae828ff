"""Training pairs made on the fly: HR windows of T frames and their bicubic x1/4 LR.

Data flow: files (images, videos) -> :class:`FramePool` (decoded HR material in memory) ->
:class:`PairSampler` (one batch per iteration) -> ``lr (N, T, 3, h, w)``, ``hr (N, 3, 4h, 4w)`` uint8
(:meth:`PairSampler.batch_uint8`, what :mod:`vsr.train.stream`'s workers send) or in [0, 1] (``UNIT[uint8]``).

Every random choice is a pure function of ``(seed, iteration)`` (the pool of video segments is a function of
``(seed, iteration // refresh_every)``), so a resumed run sees exactly the batches a run that never stopped
would have seen: the data position *is* the iteration number.

* Videos: segments of consecutive frames are decoded with PyAV and kept as HR crops (true HR pixels); a window
  is T consecutive frames (temporal stride 1 or 2, forwards or backwards) of a segment, randomly cropped.
* Still images: a window is synthesised by a smooth random camera motion (translation with acceleration, small
  rotation and zoom, consistent across the window) about a random point; the centre frame is an exact crop.
* Both: random flips and transposition of the whole window; LR = MATLAB bicubic x1/4 on uint8
  (:func:`vsr.quality.resize.bicubic_downscale_x4`, the degradation ``vsr eval`` uses), or a degradation of
  :mod:`vsr.train.degrade` (blur, noise, JPEG, x264 ...) drawn from its own stream ``(seed, 3, iteration, k)``,
  so the HR windows are the same whatever the degradation.  A degradation with a ``[context]`` degrades a larger,
  longer clip (as a codec sees a whole video) and the window is cut from it afterwards.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from vsr.errors import InputError
from vsr.quality.resize import bicubic_downscale_x4
from vsr.train.degrade import CLEAN, Degradation, degrade_clip
from vsr.train.exclude import Excluded, say_left_out
from vsr.video.reading import check_video_file, open_error, open_input
from vsr.video.streams import main_video

log = logging.getLogger(__name__)

SCALE = 4
# uint8 -> float32 in [0, 1]: one table, so that a batch is the same numbers wherever it is converted (numpy here,
# torch on the training device, whose division by a scalar may be a multiplication by its reciprocal).
UNIT = np.arange(256, dtype=np.float32) / np.float32(255.0)
UNIT.setflags(write=False)
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp")
VIDEO_SUFFIXES = (".mp4", ".mkv", ".mov", ".webm", ".avi", ".m4v", ".y4m")


@dataclass(frozen=True)
class VideoSource:
    """A video file and the frame range ``[first, stop)`` that training may use."""

    path: Path
    frames: int  # decodable frames in the file
    first: int = 0
    stop: int | None = None  # None: to the end

    @property
    def usable(self) -> range:
        return range(self.first, self.frames if self.stop is None else min(self.stop, self.frames))


@dataclass(frozen=True)
class DataSources:
    """Everything training reads: still images and video frame ranges."""

    images: tuple[Path, ...]
    videos: tuple[VideoSource, ...]

    def describe(self) -> str:
        n = sum(len(v.usable) for v in self.videos)
        return f"{len(self.images)} images, {len(self.videos)} videos ({n} usable frames)"


def _rgb_frames(path: Path, rgb: bool = True):
    """Every frame of ``path``'s first video stream, RGB uint8 ``(h, w, 3)``, in decode order: PyAV's where it is
    installed, else OpenCV's FFmpeg reader (the GPU image has OpenCV and no PyAV, and PyAV's wheel does not fit
    beside a training slice's checkpoint; both decode the training clips here to the same pixels).  ``rgb=False``:
    ``None`` for each frame, decoded but not converted (a count)."""
    check_video_file(path)  # an empty file, a pipe: the source opener's words (vsr bench, vsr preview)
    try:
        import av

        container = open_input(str(path))
    except ImportError:  # no PyAV, or scripts/gpu_train.py's stand-in for it (whose every call raises this)
        yield from _opencv_frames(path, rgb)
        return
    except av.error.FFmpegError as e:
        raise open_error(path, e) from None
    with container as c:
        try:
            stream = main_video(c)
            stream.thread_type = "AUTO"
            for frame in c.decode(stream):
                yield frame.to_ndarray(format="rgb24") if rgb else None
        except (av.error.FFmpegError, IndexError) as e:
            raise InputError(f"cannot decode video {path}: {e}") from None


def _opencv_frames(path: Path, rgb: bool):
    cap = cv2.VideoCapture(os.fsencode(path))
    try:
        if not cap.isOpened():
            raise InputError(f"not a video file: {path} (OpenCV's reader cannot open it; PyAV is not installed here)")
        while True:
            ok, bgr = cap.read()
            if not ok:
                return
            yield cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB) if rgb else None
    finally:
        cap.release()


def count_frames(path: Path) -> int:
    """Decodable frames of a video (decodes the stream once: container frame counts are unreliable)."""
    n = sum(1 for _ in _rgb_frames(path, rgb=False))
    if n == 0:
        raise InputError(f"cannot decode video {path}: no frame")
    return n


def list_files(paths: list[str | Path], exclude: tuple[str, ...] = ()) -> tuple[list[Path], list[Path]]:
    """The images and the videos under ``paths`` (files or folders, searched recursively), sorted, less those an
    ``exclude`` leaves out (:mod:`vsr.train.exclude`; e.g. ``"vid4"``): a run's files, their frames uncounted."""
    excluded, left_out = Excluded(exclude), []  # (left_out: the ``exclude`` that left each image or video out)
    images: list[Path] = []
    videos: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if not p.exists():
            raise InputError(f"training data not found: {p}")
        files = sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
        for f in (f for f in files if f.suffix.lower() in IMAGE_SUFFIXES + VIDEO_SUFFIXES):
            if (hit := excluded(f)) is not None:
                left_out.append(hit)
            else:
                (images if f.suffix.lower() in IMAGE_SUFFIXES else videos).append(f)
    say_left_out(paths, exclude, left_out, bool(images or videos))
    return images, videos


def find_sources(paths: list[str | Path], *, holdout: float = 0.0, exclude: tuple[str, ...] = ()) -> DataSources:
    """:func:`list_files`, and the frames of each video; ``holdout``: the last fraction of every video's frames is
    left out (kept for validation, see :func:`vsr.train.validate.holdout_sets`)."""
    images, videos = list_files(paths, exclude)
    srcs = [VideoSource(v, n, 0, n - int(round(n * holdout))) for v, n in ((v, count_frames(v)) for v in videos)]
    if not images and not srcs:
        raise InputError(f"no images or videos found in {', '.join(map(str, paths))}")
    return DataSources(tuple(images), tuple(srcs))


def read_image(path: Path) -> np.ndarray:
    img = cv2.imread(os.fsencode(path), cv2.IMREAD_COLOR)  # (bytes: OpenCV crashes on a name that is not UTF-8)
    if img is None:
        raise InputError(f"cannot read image {path}")
    return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)


def decode_frames(path: Path, wanted: dict[int, list[tuple[int, int, int, int]]]) -> dict[tuple, np.ndarray]:
    """Decode ``path`` once; for frame ``i`` in ``wanted`` return the crops ``(y, x, h, w)`` listed for it."""
    out: dict[tuple, np.ndarray] = {}
    last = max(wanted) if wanted else -1
    with contextlib.closing(_rgb_frames(path)) as frames:  # the decoder (and its threads) closed on leaving
        for i, rgb in enumerate(frames):
            if i > last:
                break
            for (y, x, h, w) in wanted.get(i, ()):
                out[(i, y, x, h, w)] = np.ascontiguousarray(rgb[y:y + h, x:x + w])
    return out


def video_size(path: Path) -> tuple[int, int]:
    """``(height, width)`` of the video's frames (its first decoded frame's)."""
    with contextlib.closing(_rgb_frames(path)) as frames:
        for rgb in frames:
            return rgb.shape[0], rgb.shape[1]
    raise InputError(f"cannot decode video {path}: no frame")


class FramePool:
    """Decoded HR material for a stretch of iterations: all still images and random video segments.

    ``segments[k]`` is a uint8 array ``(L, h, w, 3)``: ``L`` consecutive frames of one video, cropped to one
    region of up to ``region`` x ``region`` pixels.  Rebuilt by :meth:`build` for each pool epoch.
    """

    def __init__(self, sources: DataSources, *, segments_per_video: int = 12, segment_length: int = 9,
                 region: int = 256):
        self.sources = sources
        self.segments_per_video = segments_per_video
        self.segment_length = segment_length
        self.region = region
        self.images = [read_image(p) for p in sources.images]
        self.sizes = [video_size(v.path) for v in sources.videos]  # (height, width) of each video
        self.segments: list[np.ndarray] = []
        self.epoch: int | None = None

    def __getstate__(self) -> dict:
        # Sent to a worker process without its video segments: they are the big part, and a function of the seed
        # and the epoch, which the worker rebuilds when it needs them.
        return {**self.__dict__, "segments": [], "epoch": None}

    def build(self, seed: int, epoch: int) -> None:
        if self.epoch == epoch:
            return
        rng = np.random.default_rng([seed, 1, epoch])
        segments = []
        for v, (h, w) in zip(self.sources.videos, self.sizes):
            usable = v.usable
            n = len(usable)
            if n < 1:
                continue
            length = min(self.segment_length, n)
            rh, rw = min(self.region, h), min(self.region, w)
            wanted: dict[int, list] = {}
            plans = []
            for _ in range(self.segments_per_video):
                start = usable.start + int(rng.integers(0, n - length + 1))
                y, x = int(rng.integers(0, h - rh + 1)), int(rng.integers(0, w - rw + 1))
                plans.append((start, y, x))
                for i in range(start, start + length):
                    wanted.setdefault(i, []).append((y, x, rh, rw))
            frames = decode_frames(v.path, wanted)
            for start, y, x in plans:
                segments.append(np.stack([frames[(i, y, x, rh, rw)] for i in range(start, start + length)]))
        self.segments = segments
        self.epoch = epoch
        log.info("frame pool epoch %d: %d images, %d video segments", epoch, len(self.images), len(segments))


@dataclass(frozen=True)
class MotionRange:
    """Per-frame limits of the synthetic camera motion for still images (HR pixels, degrees, relative zoom)."""

    shift: float = 4.0
    accel: float = 0.6
    rotate_deg: float = 0.8
    zoom: float = 0.01


def synth_window(img: np.ndarray, num_frame: int, size: int, rng: np.random.Generator,
                 motion: MotionRange = MotionRange()) -> np.ndarray:
    """``num_frame`` HR frames ``(T, size, size, 3)`` uint8 of a smooth camera motion over a still image.

    Frame ``t`` shows the patch around ``c + v*d + a*d^2/2`` rotated by ``w*d`` and zoomed by ``(1+z)^d``,
    with ``d = t - centre``; the centre frame is an exact crop (no resampling).
    """
    h, w = img.shape[:2]
    r = num_frame // 2
    v = rng.uniform(-motion.shift, motion.shift, 2)
    a = rng.uniform(-motion.accel, motion.accel, 2)
    wdeg = rng.uniform(-motion.rotate_deg, motion.rotate_deg)
    z = rng.uniform(-motion.zoom, motion.zoom)
    # Room needed around the centre for the farthest frame: shift plus the rotated/zoomed half-diagonal.
    reach = np.abs(v) * r + np.abs(a) * r * r / 2 + size / 2 * math.sqrt(2) * (1 + abs(z)) ** r + 2
    lo_y, hi_y = reach[1], h - reach[1]
    lo_x, hi_x = reach[0], w - reach[0]
    if hi_y <= lo_y or hi_x <= lo_x:  # too small for this motion: a static window from a plain crop
        y, x = int(rng.integers(0, h - size + 1)), int(rng.integers(0, w - size + 1))
        return np.repeat(img[None, y:y + size, x:x + size], num_frame, axis=0)
    # Integer patch corner, so that the centre frame is an exact crop.
    cy = int(rng.integers(math.ceil(lo_y), math.floor(hi_y) + 1)) - size // 2
    cx = int(rng.integers(math.ceil(lo_x), math.floor(hi_x) + 1)) - size // 2
    half = (size - 1) / 2
    frames = []
    for t in range(num_frame):
        d = t - r
        if d == 0:
            frames.append(img[cy:cy + size, cx:cx + size])
            continue
        th = math.radians(wdeg * d)
        s = (1 + z) ** d
        cos, sin = math.cos(th) * s, math.sin(th) * s
        off = v * d + a * d * d / 2
        # Output (u, v) -> source: centre + R*s*((u, v) - half) + offset.
        src_cx, src_cy = cx + half + off[0], cy + half + off[1]
        m = np.array([[cos, -sin, src_cx - cos * half + sin * half],
                      [sin, cos, src_cy - sin * half - cos * half]], dtype=np.float64)
        frames.append(cv2.warpAffine(img, m, (size, size), flags=cv2.INTER_CUBIC | cv2.WARP_INVERSE_MAP,
                                     borderMode=cv2.BORDER_REFLECT_101))
    return np.stack(frames)


def augment(window: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Random horizontal flip, vertical flip and transposition of a ``(T, H, W, 3)`` window."""
    if rng.random() < 0.5:
        window = window[:, :, ::-1]
    if rng.random() < 0.5:
        window = window[:, ::-1]
    if rng.random() < 0.5:
        window = window.transpose(0, 2, 1, 3)
    return np.ascontiguousarray(window)


class PairSampler:
    """Batches of training pairs; ``batch(iteration)`` depends only on ``(seed, iteration)``.

    Returns ``lr (N, T, 3, h, w)`` and ``hr (N, 3, 4h, 4w)`` float32 in [0, 1] (numpy), or uint8
    (:meth:`batch_uint8`).
    """

    def __init__(self, pool: FramePool, *, num_frame: int, lr_patch: int, batch_size: int, seed: int,
                 video_fraction: float = 0.5, refresh_every: int = 500, motion: MotionRange = MotionRange(),
                 degradation: Degradation = CLEAN):
        if lr_patch % 4:
            raise InputError(f"LR patch size must be a multiple of 4 (EDVR's pyramid), got {lr_patch}")
        self.pool = pool
        self.num_frame = num_frame
        self.lr_patch = lr_patch
        self.batch_size = batch_size
        self.seed = seed
        self.video_fraction = video_fraction
        self.refresh_every = refresh_every
        self.motion = motion
        self.degradation = degradation

    def window(self, rng: np.random.Generator, lr_size: int = 0, frames: int = 0) -> np.ndarray:
        """One HR window ``(T, P, P, 3)`` uint8: ``P = 4 * lr_size`` and ``T = frames`` (defaults: the
        training patch and ``num_frame``)."""
        size = (lr_size or self.lr_patch) * SCALE
        t = frames or self.num_frame
        segs = [s for s in self.pool.segments if s.shape[1] >= size and s.shape[2] >= size and len(s) >= t]
        imgs = self.pool.images
        use_video = bool(segs) and (not imgs or rng.random() < self.video_fraction)
        if use_video:
            seg = segs[int(rng.integers(len(segs)))]
            stride = 2 if len(seg) >= 2 * t - 1 and rng.random() < 0.3 else 1
            span = (t - 1) * stride + 1
            start = int(rng.integers(0, len(seg) - span + 1))
            idx = list(range(start, start + span, stride))
            if rng.random() < 0.5:
                idx.reverse()
            y = int(rng.integers(0, seg.shape[1] - size + 1))
            x = int(rng.integers(0, seg.shape[2] - size + 1))
            win = seg[idx, y:y + size, x:x + size]
        else:
            ok = [im for im in imgs if min(im.shape[:2]) >= size]
            if not ok:
                raise InputError(self._nothing_fits(size, t))
            win = synth_window(ok[int(rng.integers(len(ok)))], t, size, rng, self.motion)
        return augment(win, rng)

    def check(self) -> None:
        """An :class:`InputError` before training starts when no window can ever be cut from the data."""
        size, t = self.lr_patch * SCALE, self.num_frame
        videos = [len(v.usable) for v, (h, w) in zip(self.pool.sources.videos, self.pool.sizes) if min(h, w) >= size]
        if not any(n >= t for n in videos) and not any(min(im.shape[:2]) >= size for im in self.pool.images):
            raise InputError(self._nothing_fits(size, t))

    def _nothing_fits(self, size: int, t: int) -> str:
        """Why no window of ``t`` frames of ``size`` x ``size`` can be cut: the videos too short, or too small."""
        big = [len(v.usable) for v, (h, w) in zip(self.pool.sources.videos, self.pool.sizes) if min(h, w) >= size]
        if big:
            return (f"no training video has the {t} consecutive frames a window needs (the longest usable one "
                    f"has {max(big)}), and no image is at least {size}x{size} pixels")
        return f"no training image or video is at least {size}x{size} pixels"

    def batch(self, iteration: int) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`batch_uint8` as float32 in [0, 1]."""
        lr, hr = self.batch_uint8(iteration)
        return UNIT[lr], UNIT[hr]

    def batch_uint8(self, iteration: int) -> tuple[np.ndarray, np.ndarray]:
        """The pairs of ``iteration``: ``lr (N, T, 3, h, w)`` and ``hr (N, 3, 4h, 4w)`` uint8, C-contiguous."""
        self.pool.build(self.seed, iteration // self.refresh_every)
        rng = np.random.default_rng([self.seed, 2, iteration])
        lrs, hrs = [], []
        for k in range(self.batch_size):
            if self.degradation is CLEAN:
                win = self.window(rng)
                lrs.append(np.stack([bicubic_downscale_x4(f) for f in win]))
                hrs.append(win[self.num_frame // 2])
            else:
                lr, hr = self._degraded_pair(rng, np.random.default_rng([self.seed, 3, iteration, k]))
                lrs.append(lr)
                hrs.append(hr)
        lr = np.stack(lrs).transpose(0, 1, 4, 2, 3)
        hr = np.stack(hrs).transpose(0, 3, 1, 2)
        return np.ascontiguousarray(lr), np.ascontiguousarray(hr)

    def _degraded_pair(self, rng: np.random.Generator, drng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """LR window ``(T, p, p, 3)`` and HR centre frame ``(4p, 4p, 3)`` under the degradation: the clip of its
        :class:`~vsr.train.degrade.Context` is degraded whole, then the window is cut from it (LR at ``(y, x)``,
        HR at ``(4y, 4x)``, the middle ``T`` frames)."""
        ctx, p, t = self.degradation.context, self.lr_patch, self.num_frame
        side, frames = max(ctx.lr_size, p), max(ctx.frames, t)
        win = self.window(rng, side, frames)
        lr = degrade_clip(win, self.degradation, drng)
        # No draw without a context: the HR windows stay those of the clean degradation.
        y, x = (int(rng.integers(0, side - p + 1)) for _ in range(2)) if side > p else (0, 0)
        t0 = (frames - t) // 2
        hr = win[t0 + t // 2, SCALE * y:SCALE * (y + p), SCALE * x:SCALE * (x + p)]
        return lr[t0:t0 + t, y:y + p, x:x + p], hr
