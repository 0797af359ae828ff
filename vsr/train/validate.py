"""Validation during training: Y-PSNR of the model and of bicubic on a few frames of held-out sequences.

Sets: ``calendar`` (Vid4, official LR), ``city`` (Vid4, LR made from GT with the BI degradation),
``city-x264`` (city through the ``eval-x264-crf28`` recipe of :mod:`vsr.train.degrade`: BI then x264 CRF 28)
-- all only ever *validated* on -- and held-out tails of training videos (fine-tuning on one video).
Scoring goes through :func:`vsr.quality.evaluate.evaluate_sequence`, the same code as ``vsr eval``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import torch

from vsr.errors import InputError, did_you_mean
from vsr.files import shared_data, write_new
from vsr.train.data import VideoSource


def data_root() -> Path:
    """:func:`vsr.files.shared_data`: where the Vid4 validation sets are (``$VSR_DATA``, else ``../shared/data``
    beside a source checkout)."""
    return shared_data()


@dataclass(frozen=True)
class ValSet:
    """A PNG sequence to validate on: GT folder, LR folder (``None``: made from GT), output frames to score
    and an optional LR crop ``(y, x, h, w)`` (scored region; the model sees a margin of context around it)."""

    name: str
    gt_dir: Path
    lr_dir: Path | None
    frames: tuple[int, ...]
    crop: tuple[int, int, int, int] | None = None
    degrade: str | None = None  # LR made from the whole GT clip by this recipe of vsr.train.degrade


# Validation names that are a Vid4 sequence under a degradation recipe.
DEGRADED_SETS = {"city-x264": ("city", "eval-x264-crf28")}


DEFAULT_SETS = ("calendar", "city")  # validated on when no --val is given and the Vid4 set is at hand


def default_sets() -> tuple[tuple[str, ...], str | None]:
    """The sets a run validates on when it names none: :data:`DEFAULT_SETS` where the Vid4 set is at hand, else
    none, with the one line that says so (``None`` when they are there)."""
    root = data_root() / "sequences" / "vid4"
    if all((root / name / "gt").is_dir() for name in DEFAULT_SETS):
        return DEFAULT_SETS, None
    return (), (f"no validation: the Vid4 sets ({', '.join(DEFAULT_SETS)}) are not under {root} (set VSR_DATA to "
                "the folder holding sequences/vid4, or --val holdout with --holdout)")


def vid4_sets(names: list[str], frames: tuple[int, ...] = (10, 20),
              crop: tuple[int, int, int, int] | None = (32, 48, 64, 64)) -> list[ValSet]:
    root = data_root() / "sequences" / "vid4"
    out = []
    for name in names:
        seq, recipe = DEGRADED_SETS.get(name, (name, None))
        d = root / seq
        if not (d / "gt").is_dir():
            raise InputError(_not_found(name, root))
        lr = d / "lr" if (d / "lr").is_dir() and recipe is None else None
        out.append(ValSet(name, d / "gt", lr, frames, crop, recipe))
    return out


def known_sets(root: Path) -> list[str]:
    """The validation sets a run can name here: each Vid4 sequence under ``root`` (a folder with ``gt/``), the
    degraded ones of those (:data:`DEGRADED_SETS`), and ``holdout``."""
    try:
        seqs = sorted(d.name for d in root.iterdir() if (d / "gt").is_dir())
    except OSError:
        seqs = []
    return sorted(seqs + [n for n, (seq, _) in DEGRADED_SETS.items() if seq in seqs]) + ["holdout"]


def _not_found(name: str, root: Path) -> str:
    vid4 = known_sets(root)[:-1]
    names = {*vid4, *DEFAULT_SETS, *DEGRADED_SETS, "holdout"}
    hint = "" if name in names else did_you_mean(name, sorted(names))
    if not vid4:
        return (f"validation set {name!r} not found: no Vid4 sequence under {root} (set VSR_DATA to the folder "
                f"holding sequences/vid4); the sets are {', '.join(DEFAULT_SETS)}, {', '.join(DEGRADED_SETS)} "
                f"(Vid4) and holdout (held-out video tails, with --holdout){hint}")
    return (f"validation set {name!r} not found under {root}: the sets are {', '.join(vid4)} (Vid4) and holdout "
            f"(held-out video tails, with --holdout){hint}")


def holdout_sets(videos: tuple[VideoSource, ...], folder: Path, count: int = 3) -> list[ValSet]:
    """Write the held-out tail frames of each video as PNG (GT) and return them as validation sets.

    The windows of the scored frames stay inside the held-out tail (the sequence *is* the tail), so no
    training frame is ever scored.
    """
    from vsr.train.data import decode_frames, video_size

    sets = []
    for k, v in enumerate(videos):
        tail = range(v.usable.stop, v.frames)
        if len(tail) < 1:
            continue
        h, w = video_size(v.path)
        frames = decode_frames(v.path, {i: [(0, 0, h - h % 4, w - w % 4)] for i in tail})
        d = folder / f"holdout{k}_{v.path.stem}"
        for link in (folder, d):  # (the frames are written into the run's own folder, never where a link points)
            if link.is_symlink():
                raise InputError(f"{link} is a symbolic link: the held-out frames go into a folder of the run's own")
        d.mkdir(parents=True, exist_ok=True)
        for j, i in enumerate(tail):
            img = frames[(i, 0, 0, h - h % 4, w - w % 4)]
            _, png = cv2.imencode(".png", cv2.cvtColor(img, cv2.COLOR_RGB2BGR))
            write_new(d / f"{j:08d}.png", png.tobytes())  # (a link planted at the name replaced, not followed)
        n = len(tail)
        picks = tuple(sorted({int(round(x)) for x in np.linspace(0, n - 1, min(count, n))}))
        mid = frames[(tail[picks[len(picks) // 2]], 0, 0, h - h % 4, w - w % 4)]
        sets.append(ValSet(f"holdout:{v.path.name}", d, None, picks, textured_crop(mid)))
    return sets


def textured_crop(gt: np.ndarray, size: int = 96) -> tuple[int, int, int, int]:
    """The LR crop ``(y, x, h, w)`` of side ``size`` with the most gradient energy (flat regions say little)."""
    g = cv2.cvtColor(gt, cv2.COLOR_RGB2GRAY).astype(np.float32)
    energy = np.abs(np.diff(g, axis=0))[:, :-1] + np.abs(np.diff(g, axis=1))[:-1]
    lh, lw = gt.shape[0] // 4, gt.shape[1] // 4
    ch, cw = min(size, lh), min(size, lw)
    best, where = -1.0, (0, 0)
    for y in range(0, lh - ch + 1, 8):
        for x in range(0, lw - cw + 1, 8):
            e = float(energy[4 * y:4 * (y + ch), 4 * x:4 * (x + cw)].sum())
            if e > best:
                best, where = e, (y, x)
    return (*where, ch, cw)


@dataclass
class _Prepared:
    """One scored frame, read once: LR window (cropped with margin), GT crop, bicubic Y-PSNR of the crop."""

    window: np.ndarray  # (T, 3, h, w) float32
    inner: tuple[int, int, int, int]  # HR region of the model output that is scored
    gt: np.ndarray  # (H, W, 3) uint8
    bicubic_y: float


MARGIN = 8  # LR pixels of context around a validation crop


def prepare(s: ValSet, num_frame: int, padding: str) -> list[_Prepared]:
    from vsr.pipeline.windows import window_indices
    from vsr.quality.evaluate import list_frames, read_rgb
    from vsr.quality.metrics import psnr, rgb_to_y
    from vsr.quality.resize import bicubic_downscale_x4, bicubic_upscale_x4, mod_crop

    gt_files = list_frames(s.gt_dir, "GT")
    lr_files = list_frames(s.lr_dir, "LR") if s.lr_dir is not None else None
    lr_cache: dict[int, np.ndarray] = {}
    if s.degrade is not None:
        from vsr.train.degrade import degrade_clip, load_degrade

        clip = np.stack([mod_crop(read_rgb(f), 4) for f in gt_files])
        lr_cache = dict(enumerate(degrade_clip(clip, load_degrade(s.degrade), np.random.default_rng(0))))

    def lr(i: int) -> np.ndarray:
        if i not in lr_cache:
            lr_cache[i] = (read_rgb(lr_files[i]) if lr_files is not None
                           else bicubic_downscale_x4(mod_crop(read_rgb(gt_files[i]), 4)))
        return lr_cache[i]

    out = []
    n = len(gt_files)
    for i in s.frames:
        gt = mod_crop(read_rgb(gt_files[i]), 4)
        h, w = lr(i).shape[:2]
        y, x, ch, cw = s.crop if s.crop is not None else (0, 0, h, w)
        y0, x0 = max(y - MARGIN, 0) // 4 * 4, max(x - MARGIN, 0) // 4 * 4
        y1, x1 = min(y + ch + MARGIN, h), min(x + cw + MARGIN, w)
        y1, x1 = y0 + (y1 - y0) // 4 * 4, x0 + (x1 - x0) // 4 * 4
        win = np.stack([lr(j)[y0:y1, x0:x1] for j in window_indices(i, n, num_frame, padding)])
        window = np.ascontiguousarray(win.transpose(0, 3, 1, 2), dtype=np.float32) / np.float32(255.0)
        g = gt[4 * y:4 * (y + ch), 4 * x:4 * (x + cw)]
        bic = bicubic_upscale_x4(lr(i))[4 * y:4 * (y + ch), 4 * x:4 * (x + cw)]
        out.append(_Prepared(window, (4 * (y - y0), 4 * (x - x0), 4 * ch, 4 * cw), g,
                             psnr(rgb_to_y(bic), rgb_to_y(g))))
    return out


@torch.no_grad()
def validate(model: torch.nn.Module, sets: list[ValSet], *, padding: str, device: torch.device,
             cache: dict | None = None) -> dict[str, dict[str, float]]:
    """``{set name: {"psnr_y": model, "bicubic_y": bicubic}}``: mean frame Y-PSNR over each set's frames.

    Scores like :mod:`vsr.quality.evaluate` (output clipped and rounded to 8 bits, BT.601 Y, no border crop),
    on the set's crop.  ``cache`` keeps prepared frames between calls.
    """
    from vsr.quality.evaluate import quantize
    from vsr.quality.metrics import psnr, rgb_to_y

    cache = {} if cache is None else cache
    was_training = model.training
    model.eval()
    out = {}
    try:
        for s in sets:
            if s.name not in cache:
                cache[s.name] = prepare(s, model.num_frame, padding)
            scores, bic = [], []
            for f in cache[s.name]:
                y = model(torch.from_numpy(f.window[None]).to(device)).float().cpu().numpy()
                iy, ix, ih, iw = f.inner
                img = quantize(y)[0][iy:iy + ih, ix:ix + iw]
                scores.append(psnr(rgb_to_y(img), rgb_to_y(f.gt)))
                bic.append(f.bicubic_y)
            out[s.name] = {"psnr_y": float(np.mean(scores)), "bicubic_y": float(np.mean(bic))}
    finally:
        model.train(was_training)
    return out
