"""What an int8 plan is made from: :class:`QuantConfig` (part of the plan's cache key) and its calibration data."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from vsr.errors import InputError
from vsr.files import sha256_file
from vsr.video.png_frames import KIND_NAMES, frame_paths, natural_key
from vsr.quant.isa import int8_isa, weight_qmax

QUANT_FORMAT = 3  # bump when the int8 rewrite or the calibration changes what a plan holds (2: hard edges; 3: u8
# from conv to conv, scale groups, QLinearAdd)


@dataclass(frozen=True)
class QuantConfig:
    """calibration: folder of PNG frames (None: vsr's synthetic frames); windows: calibration windows;
    keep_fp32: fraction of convs kept in fp32, those of lowest measured SQNR (see :mod:`vsr.quant.calibrate`);
    none by default: with every conv int8 EDVR-S stayed within 0.1 dB of fp32 and the per-frame features segment
    ran 1.65x fp32 instead of 1.17x (docs/benchmarks.md, issue 33);
    isa: the int8 instructions the plan is for (None: this CPU's, :func:`vsr.quant.isa.int8_isa`), which set the
    weights' bits (:attr:`weight_qmax`);
    int8_adds, fixed_zero: options of the rewrite (:func:`vsr.quant.rewrite.quantize_segment`): residual adds in
    u8, and zero points fixed in the graph with the bias added after the conv (ONNX Runtime's fast int8 convs)."""

    calibration: str | None = None
    windows: int = 2
    keep_fp32: float = 0.0
    isa: str | None = None
    int8_adds: bool = True
    fixed_zero: bool = True

    def __post_init__(self):
        if self.isa is None:
            object.__setattr__(self, "isa", int8_isa())
        weight_qmax(self.isa)

    @property
    def weight_qmax(self) -> int:
        return weight_qmax(self.isa)

    def fields(self) -> dict:
        d = asdict(self) | {"format": QUANT_FORMAT, "weight_qmax": self.weight_qmax}
        if self.calibration is not None:
            files = _pngs(self.calibration)
            h = hashlib.sha256()
            for f in files:
                h.update(sha256_file(f).encode())
            d["calibration"] = {"frames": len(files), "sha256": h.hexdigest()}
        return d

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.fields(), sort_keys=True).encode()).hexdigest()[:24]


def calibration_frames(folder: str | os.PathLike) -> list[Path]:
    """The frames of ``folder`` (PNG, JPEG, TIFF, BMP or WebP, one kind: :func:`~vsr.video.png_frames.frame_paths`) in
    natural order (``2.png`` before ``10.png``: consecutive frames make the calibration's windows), their suffix in
    any case (a camera's or Windows tool's ``.PNG``: they were "no PNG frames")."""
    return sorted(frame_paths(Path(folder)), key=lambda p: natural_key(p.name))


def _pngs(folder: str) -> list[Path]:
    files = calibration_frames(folder)
    if not files:
        raise InputError(f"int8 calibration: no frames ({KIND_NAMES}) in {folder}")
    return files


def synthetic_frames(n: int, height: int, width: int, seed: int = 0) -> np.ndarray:
    """``(n, 3, H, W)`` float32 in [0, 1]: smooth colour fields, texture, and hard edges (flat rectangles, thin
    lines, blocks of black-and-white glyph-like detail), drifting 1 px per frame.

    The hard edges are what real video has and smooth fields lack: calibrated without them, EDVR-S's activations
    on REDS frames reached up to 4.7x the calibration ranges (with them: 1.5x), so a run's first window started
    from ranges far too narrow (docs/benchmarks.md, issue 33)."""
    rng = np.random.default_rng(seed)
    import cv2

    h, w = height + n, width + n
    base = np.zeros((h, w, 3), np.float32)
    for k, amp in ((8, 0.5), (32, 0.25), (max(h, w), 0.15)):
        small = rng.random((max(2, h // k), max(2, w // k), 3), dtype=np.float32)
        base += amp * cv2.resize(small, (w, h), interpolation=cv2.INTER_CUBIC)
    base += 0.1 * (rng.random((h, w, 3), dtype=np.float32) - 0.5)
    base = np.clip(base / 0.9, 0.0, 1.0)
    _hard_edges(base, rng)
    return np.stack([base[i:i + height, i:i + width].transpose(2, 0, 1) for i in range(n)])


def _hard_edges(img: np.ndarray, rng: np.random.Generator) -> None:
    """Draw flat rectangles of random colour, black or white lines 1-2 px thick, and 16x32 blocks of glyph-like
    black-on-white (or white-on-black) detail into ``img (H, W, 3)``, their number in proportion to its area."""
    h, w, _ = img.shape
    area = h * w
    for _ in range(max(4, area // 4000)):
        y, x = rng.integers(0, h), rng.integers(0, w)
        img[y:y + rng.integers(3, max(4, h // 4)), x:x + rng.integers(3, max(4, w // 4))] = rng.random(3)
    for _ in range(max(4, area // 8000)):
        y, x = rng.integers(0, h), rng.integers(0, w)
        long, thin = rng.integers(8, max(9, max(h, w) // 3)), rng.integers(1, 3)
        if rng.random() < 0.5:
            img[y:y + thin, x:x + long] = rng.integers(0, 2)
        else:
            img[y:y + long, x:x + thin] = rng.integers(0, 2)
    for _ in range(max(2, area // 20000)):
        y, x = rng.integers(0, max(1, h - 16)), rng.integers(0, max(1, w - 32))
        glyphs = np.repeat(np.repeat(rng.random((8, 16)) < 0.45, 2, axis=0), 2, axis=1)[:h - y, :w - x]
        fg, bg = (0.0, 1.0) if rng.random() < 0.5 else (1.0, 0.0)
        img[y:y + glyphs.shape[0], x:x + glyphs.shape[1]] = np.where(glyphs[..., None], fg, bg)


def calibration_windows(cfg: QuantConfig, num_frame: int | None, height: int, width: int) -> np.ndarray:
    """``(K, 1, T, 3, H, W)`` float32 calibration windows of consecutive frames resized to ``H x W``
    (``num_frame=None``: single frames, ``(K, 1, 3, H, W)``)."""
    if num_frame is None:
        return calibration_windows(cfg, 1, height, width)[:, :, 0]
    n = cfg.windows + num_frame - 1
    if cfg.calibration is None:
        frames = synthetic_frames(n, height, width)
    else:
        import cv2

        files = _pngs(cfg.calibration)
        frames = []
        for f in files[:n]:
            img = cv2.imread(os.fsencode(f), cv2.IMREAD_COLOR)
            if img is None:
                raise InputError(f"int8 calibration: cannot read {f}")
            img = cv2.resize(cv2.cvtColor(img, cv2.COLOR_BGR2RGB), (width, height), interpolation=cv2.INTER_AREA)
            frames.append(img.transpose(2, 0, 1).astype(np.float32) / 255.0)
        frames = np.stack(frames)
        n = len(frames)
    k = max(1, n - num_frame + 1)
    return np.stack([frames[i:i + num_frame][None] for i in range(min(k, cfg.windows))]).astype(np.float32)
