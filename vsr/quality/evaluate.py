"""Evaluate x4 super-resolution of a PNG sequence against its ground truth: model vs bicubic.

Conventions follow BasicSR's video tests, so figures compare with published EDVR results: frames are the pictures
(PNG, JPEG, ...: one kind) of a folder in frame order (LR and GT paired by name, suffix aside); without an LR
folder the LR is made from the GT by the BI degradation (GT mod-cropped to a multiple of 4, then MATLAB bicubic
x1/4); model output is clipped to [0, 1] and rounded to 8 bits (BasicSR's ``tensor2img``) before PSNR/SSIM;
each output frame ``i`` is predicted from the window :func:`vsr.pipeline.windows.window_indices` of the *whole*
sequence, so a ``frames`` selection scores exactly as in a full run.  A :class:`ClipDegradation` makes the LR
from the whole GT clip instead (e.g. BI then x264, :mod:`vsr.train.degrade`), so that codec artefacts are real.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from itertools import count
from pathlib import Path

import cv2
import numpy as np

from vsr.backends.base import FrameKeys
from vsr.errors import BackendError, InputError
from vsr.pipeline.windows import window_indices
from vsr.quality.metrics import FrameScores, frame_scores
from vsr.quality.resize import bicubic_downscale_x4, bicubic_upscale_x4, mod_crop
from vsr.video.png_frames import KIND_NAMES, frame_files

SCALE = 4
LR_GIVEN = "given"
LR_FROM_GT = "bicubic x1/4 of GT"
SSIM_MIN_SIZE = 11

_STREAMS = count(1)  # one stream of frame keys per sequence scored


def list_frames(folder: str | Path, what: str) -> list[Path]:
    """The frames of ``folder`` (PNG, JPEG, ...: one kind) in frame order (:func:`vsr.video.png_frames.frame_files`);
    :class:`InputError` if it is missing or has none."""
    p = Path(folder)
    if not p.exists():
        raise InputError(f"{what} folder not found: {p}")
    if not p.is_dir():
        raise InputError(f"{what} path is not a folder: {p}")
    files = [f for f in frame_files(p, gaps=True) if f.is_file()]  # paired by name: a gap is the pairing's to say
    if not files:
        raise InputError(f"no frames ({KIND_NAMES}) in {what} folder {p}")
    return files


def read_rgb(path: Path) -> np.ndarray:
    """An image file as 8-bit RGB ``(H, W, 3)``; :class:`InputError` if it cannot be decoded."""
    img = cv2.imread(os.fsencode(path), cv2.IMREAD_COLOR)  # (bytes: OpenCV crashes on a name that is not UTF-8)
    if img is None:
        raise InputError(f"cannot read image {path}")
    return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)


def quantize(frames: np.ndarray) -> np.ndarray:
    """Model output ``(N, 3, H, W)`` float in [0, 1] -> ``(N, H, W, 3)`` uint8: clipped, x255, rounded."""
    x = np.clip(np.asarray(frames, dtype=np.float32), 0.0, 1.0) * np.float32(255.0)
    return np.round(x).astype(np.uint8).transpose(0, 2, 3, 1)


@dataclass(frozen=True)
class ClipDegradation:
    """How to make LR from the whole GT clip: ``make((N, H, W, 3) uint8) -> (N, H/4, W/4, 3) uint8``;
    ``name`` is recorded as the LR source."""

    name: str
    make: Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class EvalResult:
    """Per-frame and mean scores of one sequence.  ``model`` is ``None`` when only bicubic was run."""

    gt_dir: str
    lr_dir: str | None
    lr_source: str
    frame_names: tuple[str, ...]
    bicubic: tuple[FrameScores, ...]
    model: tuple[FrameScores, ...] | None
    model_name: str | None
    crop_border: int

    @property
    def count(self) -> int:
        return len(self.frame_names)

    def mean(self, method: str = "model") -> FrameScores:
        """Mean scores of ``"model"`` or ``"bicubic"`` over the evaluated frames (BasicSR's: a PSNR is infinite
        where one frame is identical to its ground truth)."""
        return FrameScores.mean(self._scores(method))

    def identical(self, method: str = "model") -> int:
        """How many of ``method``'s frames are identical to their ground truth (an infinite PSNR)."""
        return sum(1 for s in self._scores(method) if not _finite(s))

    def finite_mean(self, method: str = "model") -> FrameScores | None:
        """Mean scores over ``method``'s frames that are not identical to their ground truth: the figures an
        infinite :meth:`mean` hides; None where every frame is identical."""
        differ = [s for s in self._scores(method) if _finite(s)]
        return FrameScores.mean(differ) if differ else None

    def _scores(self, method: str) -> tuple[FrameScores, ...]:
        scores = {"model": self.model, "bicubic": self.bicubic}[method]
        if scores is None:
            raise ValueError("no model was evaluated")
        return scores

    def to_dict(self) -> dict:
        """JSON-ready summary; an infinite PSNR (identical frames) becomes ``None``, and ``finite_mean`` with
        ``identical_frames`` say what the other frames score."""

        def fig(s: FrameScores) -> dict:
            return {k: (v if math.isfinite(v) else None) for k, v in vars(s).items()}

        def method(name: str, scores) -> dict | None:
            if scores is None:
                return None
            finite = self.finite_mean(name)
            return {"mean": fig(FrameScores.mean(scores)), "finite_mean": None if finite is None else fig(finite),
                    "identical_frames": self.identical(name),
                    "per_frame": [dict(frame=f, **fig(s)) for f, s in zip(self.frame_names, scores)]}

        model = method("model", self.model)
        if model is not None:
            model = {"name": self.model_name, **model}
        return {"gt": self.gt_dir, "lr": self.lr_dir, "lr_source": self.lr_source, "frames": self.count,
                "crop_border": self.crop_border, "model": model, "bicubic": method("bicubic", self.bicubic)}


def _finite(s: FrameScores) -> bool:
    """Whether a frame differs from its ground truth: both PSNRs finite."""
    return math.isfinite(s.psnr_y) and math.isfinite(s.psnr_rgb)


class _Sequence:
    """GT frames and their LR counterparts (given or made), read on demand; LR frames are kept for reuse."""

    def __init__(self, lr_dir: str | Path | None, gt_dir: str | Path, degrade: ClipDegradation | None = None):
        if degrade is not None and lr_dir is not None:
            raise InputError("give LR frames or a degradation to make them from the GT, not both")
        self.lr_dir, self.gt_dir, self.degrade = lr_dir, gt_dir, degrade
        self._made: np.ndarray | None = None
        self.gt_files = list_frames(gt_dir, "GT")
        self.lr_files = list_frames(lr_dir, "LR") if lr_dir is not None else None
        if self.lr_files is not None and len(self.lr_files) != len(self.gt_files):
            raise InputError(f"LR and GT frame counts differ: {len(self.lr_files)} in {lr_dir}, "
                             f"{len(self.gt_files)} in {gt_dir}")
        if self.lr_files is not None:
            self.lr_files = _paired(self.lr_files, self.gt_files)
        self._lr: dict[int, np.ndarray] = {}
        self._gt_size: tuple[int, int] | None = None
        self._lr_size: tuple[int, int] | None = None

    def __len__(self) -> int:
        return len(self.gt_files)

    def gt(self, i: int) -> np.ndarray:
        img = read_rgb(self.gt_files[i])
        if self.lr_files is None:
            img = mod_crop(img, SCALE)
            if min(img.shape[:2]) == 0:
                raise InputError(f"GT frame {self.gt_files[i]} is smaller than {SCALE}x{SCALE}")
        size = img.shape[:2]
        if self._gt_size is None:
            self._gt_size = size
        elif size != self._gt_size:
            raise InputError(f"GT frame {self.gt_files[i].name} is {size[1]}x{size[0]}, earlier frames "
                             f"{self._gt_size[1]}x{self._gt_size[0]}: all frames must have one size")
        return img

    def lr(self, i: int) -> np.ndarray:
        if self.degrade is not None:
            return self._degraded()[i]
        if i not in self._lr:
            if self.lr_files is None:
                self._lr[i] = bicubic_downscale_x4(self.gt(i))
            else:
                img = read_rgb(self.lr_files[i])
                size = img.shape[:2]
                if self._lr_size is None:
                    self._lr_size = size
                elif size != self._lr_size:
                    raise InputError(f"LR frame {self.lr_files[i].name} is {size[1]}x{size[0]}, earlier frames "
                                     f"{self._lr_size[1]}x{self._lr_size[0]}: all frames must have one size")
                self._lr[i] = img
        return self._lr[i]

    def _degraded(self) -> np.ndarray:
        if self._made is None:
            clip = np.stack([self.gt(j) for j in range(len(self))])
            made = np.asarray(self.degrade.make(clip))
            n, h, w = clip.shape[:3]
            if made.shape != (n, h // SCALE, w // SCALE, 3) or made.dtype != np.uint8:
                raise ValueError(f"degradation {self.degrade.name!r} returned {made.shape} {made.dtype}, "
                                 f"expected {(n, h // SCALE, w // SCALE, 3)} uint8")
            self._made = made
        return self._made

    def forget_lr_before(self, i: int) -> None:
        for k in [k for k in self._lr if k < i]:
            del self._lr[k]

    def check_pair(self, i: int, lr: np.ndarray, gt: np.ndarray) -> None:
        (h, w), (gh, gw) = lr.shape[:2], gt.shape[:2]
        if (gh, gw) != (SCALE * h, SCALE * w):
            raise InputError(f"GT frame {self.gt_files[i].name} is {gw}x{gh} but its LR is {w}x{h}: GT must be "
                             f"exactly {SCALE}x the LR size ({SCALE * w}x{SCALE * h})")


def _paired(lr_files: list[Path], gt_files: list[Path]) -> list[Path]:
    """The LR frames in the GT's order, paired by file name without its suffix (``0001.jpg`` is the LR of GT
    ``0001.png``: a PNG ground truth beside JPEG inputs); names that differ are refused: pairing them by sort
    order would score wrong pairs silently (``1.png, 10.png, 2.png`` beside ``01.png, 02.png, 10.png``)."""
    lr_stems, gt_stems = _stems(lr_files, "LR"), _stems(gt_files, "GT")
    missing = [f.name for f in gt_files if f.stem not in lr_stems]
    if missing:
        extra = next(f.name for f in lr_files if f.stem not in gt_stems)
        raise InputError(f"LR and GT frames pair by file name, suffix aside: GT {missing[0]} has no LR of that "
                         f"name in {lr_files[0].parent} ({len(missing)} unpaired, e.g. LR {extra}); give both "
                         "folders the same frame names")
    return [lr_stems[f.stem] for f in gt_files]


def _stems(files: list[Path], what: str) -> dict[str, Path]:
    """``files`` by their names without suffix; two of one (``1.jpg`` and ``1.jpeg``) are one line: which pairs
    is not for vsr to guess."""
    stems: dict[str, Path] = {}
    for f in files:
        if (other := stems.setdefault(f.stem, f)) is not f:
            raise InputError(f"{what} frames {other.name} and {f.name} in {f.parent} have one name: frames pair by "
                             "file name, suffix aside; move one of them out")
    return stems


def _backend_padding(backend, padding: str | None) -> str:
    if padding is not None:
        return padding
    for owner in (backend, getattr(backend, "config", None)):
        value = getattr(owner, "padding", None)
        if isinstance(value, str):
            return value
    return "reflection_circle"


def evaluate_sequence(lr_dir: str | Path | None, gt_dir: str | Path, backend=None, *,
                      frames: slice | None = None, crop_border: int = 0, batch_size: int = 2,
                      padding: str | None = None, degrade: ClipDegradation | None = None,
                      progress: Callable[[int, int], None] | None = None) -> EvalResult:
    """Score ``backend`` (a :class:`vsr.backends.base.Backend`, or ``None``) and bicubic x4 on a sequence.

    ``lr_dir=None`` makes the LR from the GT.  ``frames`` selects output frames by index (a slice of
    ``range(n)``); neighbours outside the selection still feed the temporal windows.  ``padding`` (clip
    ends) defaults to the backend's configuration, else ``"reflection_circle"``.  ``progress(done, total)``
    is called after each scored frame.  ``degrade`` makes the LR from the whole GT clip instead of BI x1/4.
    """
    seq, selected = _open_sequence(lr_dir, gt_dir, frames, crop_border, batch_size, degrade)
    return _score(seq, selected, backend, crop_border, batch_size, padding, progress)


def evaluate(gt_dir: str | Path, lr_dir: str | Path | None = None, *, weights: str | None = "default",
             config: str | None = None, backend: str = "auto", frames: slice | None = None,
             crop_border: int = 0, batch_size: int = 2, degrade: ClipDegradation | None = None,
             progress: Callable[[int, int], None] | None = None,
             backend_options: dict | None = None) -> EvalResult:
    """:func:`evaluate_sequence` with the model given by name (``weights=None``: bicubic only);
    ``backend_options``: more keyword arguments of :func:`vsr.backends.backend_options` (e.g. precision).

    The sequence is checked before the model is loaded, so bad input fails fast.
    """
    seq, selected = _open_sequence(lr_dir, gt_dir, frames, crop_border, batch_size, degrade)
    model = None if weights is None else open_model_backend(weights, config, backend, **(backend_options or {}))
    return _score(seq, selected, model, crop_border, batch_size, None, progress)


def _open_sequence(lr_dir, gt_dir, frames, crop_border, batch_size, degrade=None) -> tuple[_Sequence, list[int]]:
    if batch_size < 1:
        raise InputError(f"batch size must be at least 1, got {batch_size}")
    if crop_border < 0:
        raise InputError(f"crop border must be >= 0, got {crop_border}")
    seq = _Sequence(lr_dir, gt_dir, degrade)
    n = len(seq)
    selected = list(range(n))[frames] if frames is not None else list(range(n))
    if not selected:
        raise InputError(f"the frame selection is empty (the sequence has {n} frames)")
    first = selected[0]
    gt = seq.gt(first)
    seq.check_pair(first, seq.lr(first), gt)
    if min(gt.shape[:2]) - 2 * crop_border < SSIM_MIN_SIZE:
        raise InputError(f"crop border {crop_border} leaves less than {SSIM_MIN_SIZE}x{SSIM_MIN_SIZE} pixels of "
                         f"the {gt.shape[1]}x{gt.shape[0]} GT frames (SSIM needs an 11x11 window)")
    return seq, selected


def _score(seq: _Sequence, selected: list[int], backend, crop_border: int, batch_size: int,
           padding: str | None, progress) -> EvalResult:
    n = len(seq)
    num_frame = int(getattr(backend, "num_frame", 1)) if backend is not None else 1
    pad = _backend_padding(backend, padding)
    bicubic: list[FrameScores] = []
    model: list[FrameScores] | None = [] if backend is not None else None
    stream = next(_STREAMS)
    for start in range(0, len(selected), batch_size):
        batch = selected[start:start + batch_size]
        outputs = None
        if backend is not None:
            windows = [window_indices(i, n, num_frame, pad) for i in batch]
            x = np.stack([np.stack([seq.lr(j) for j in win]) for win in windows])  # (N, T, H, W, 3) uint8
            x = np.ascontiguousarray(x.transpose(0, 1, 4, 2, 3), dtype=np.float32) / np.float32(255.0)
            after = selected[start + batch_size] if start + batch_size < len(selected) else n
            # as vsr upscale runs it: each frame's features computed once where the backend keeps them
            keys = FrameKeys(stream, tuple(tuple(w) for w in windows), (0,) * len(batch),
                             keep_from=after - 2 * (num_frame // 2))
            outputs = _infer(backend, x, keys)
        for k, i in enumerate(batch):
            lr, gt = seq.lr(i), seq.gt(i)
            seq.check_pair(i, lr, gt)
            bicubic.append(frame_scores(bicubic_upscale_x4(lr), gt, crop_border))
            if outputs is not None:
                model.append(frame_scores(outputs[k], gt, crop_border))
            if progress is not None:
                progress(len(bicubic), len(selected))
        if start + batch_size < len(selected):
            seq.forget_lr_before(selected[start + batch_size] - num_frame)

    return EvalResult(gt_dir=str(seq.gt_dir), lr_dir=None if seq.lr_dir is None else str(seq.lr_dir),
                      lr_source=_lr_source(seq),
                      frame_names=tuple(seq.gt_files[i].name for i in selected),
                      bicubic=tuple(bicubic), model=None if model is None else tuple(model),
                      model_name=None if backend is None else str(getattr(backend, "name", type(backend).__name__)),
                      crop_border=crop_border)


def _lr_source(seq: _Sequence) -> str:
    if seq.degrade is not None:
        return seq.degrade.name
    return LR_FROM_GT if seq.lr_dir is None else LR_GIVEN


def _infer(backend, x: np.ndarray, keys: FrameKeys) -> np.ndarray:
    n, _, _, h, w = x.shape
    y = np.asarray(backend.infer_stream(x, keys) if getattr(backend, "keeps_features", False) else backend.infer(x))
    if y.shape != (n, 3, SCALE * h, SCALE * w):
        raise BackendError(f"backend {getattr(backend, 'name', backend)!r} returned shape {y.shape}, "
                           f"expected {(n, 3, SCALE * h, SCALE * w)}")
    return quantize(y)


def open_model_backend(weights: str = "default", config: str | None = None, backend: str = "auto", **options):
    """The inference backend for ``weights``/``config``; ``backend`` names it as ``vsr upscale --backend`` does,
    ``options``: more keyword arguments of :func:`vsr.backends.backend_options` (precision, int8_scales, ...)."""
    from vsr.backends import backend_options, open_backend

    return open_backend(weights=weights, config=config, options=backend_options(backend, **options))
