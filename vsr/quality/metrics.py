"""PSNR and SSIM with BasicSR's conventions, so that figures compare with published EDVR results.

* Images are 8-bit RGB ``(H, W, 3)`` (or one channel ``(H, W)``), computed as float64 on the 0..255 scale.
* Y channel: ITU-R BT.601 "limited range" luma, ``Y = 16 + (65.481 R + 128.553 G + 24.966 B)`` with
  R, G, B in [0, 1] (MATLAB's ``rgb2ycbcr``; BasicSR's ``rgb2ycbcr(img, y_only=True)``); not rounded.
* ``crop_border`` pixels are removed on every side first (0 by default, as BasicSR's EDVR tests).
* SSIM: Wang et al. (2004) with an 11x11 Gaussian window, sigma 1.5, 'valid' filtering (no padding),
  ``C1 = (0.01 * 255)^2``, ``C2 = (0.03 * 255)^2``; the mean of the SSIM map, averaged over channels.
* PSNR of identical images is ``inf``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cv2
import numpy as np

_PEAK = 255.0
_Y_WEIGHTS = np.array([65.481, 128.553, 24.966]) / 255.0  # per 0..255 R, G, B
_SSIM_C1 = (0.01 * _PEAK) ** 2
_SSIM_C2 = (0.03 * _PEAK) ** 2
_SSIM_WINDOW = 11
_SSIM_SIGMA = 1.5


def rgb_to_y(img: np.ndarray) -> np.ndarray:
    """BT.601 limited-range luma of an RGB image on the 0..255 scale: ``(H, W, 3)`` -> float64 ``(H, W)``."""
    img = np.asarray(img, dtype=np.float64)
    if img.ndim != 3 or img.shape[2] != 3:
        raise ValueError(f"rgb_to_y expects (H, W, 3), got shape {img.shape}")
    return 16.0 + img @ _Y_WEIGHTS


def _prepare(img: np.ndarray, ref: np.ndarray, crop_border: int) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(img, dtype=np.float64)
    b = np.asarray(ref, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"image shapes differ: {a.shape} vs {b.shape}")
    if crop_border:
        a = a[crop_border:-crop_border, crop_border:-crop_border]
        b = b[crop_border:-crop_border, crop_border:-crop_border]
    return a, b


def psnr(img: np.ndarray, ref: np.ndarray, crop_border: int = 0) -> float:
    """PSNR in dB of ``img`` against ``ref`` (same shape, 0..255 scale), over all pixels and channels."""
    a, b = _prepare(img, ref, crop_border)
    mse = float(np.mean((a - b) ** 2))
    return math.inf if mse == 0 else 10.0 * math.log10(_PEAK**2 / mse)


def _ssim_plane(a: np.ndarray, b: np.ndarray) -> float:
    g = cv2.getGaussianKernel(_SSIM_WINDOW, _SSIM_SIGMA, ktype=cv2.CV_64F)
    r = _SSIM_WINDOW // 2
    if a.shape[0] <= 2 * r or a.shape[1] <= 2 * r:
        raise ValueError(f"SSIM needs images larger than {2 * r}x{2 * r}, got {a.shape[1]}x{a.shape[0]}")

    def blur(x: np.ndarray) -> np.ndarray:
        # separable Gaussian; the border rows/columns, which would need padding, are cut ('valid')
        return cv2.sepFilter2D(x, cv2.CV_64F, g, g)[r:-r, r:-r]

    mu_a, mu_b = blur(a), blur(b)
    mu_aa, mu_bb, mu_ab = mu_a * mu_a, mu_b * mu_b, mu_a * mu_b
    var_sum = blur(a * a) + blur(b * b) - mu_aa - mu_bb  # var_a + var_b
    cov = blur(a * b) - mu_ab
    num = (2 * mu_ab + _SSIM_C1) * (2 * cov + _SSIM_C2)
    den = (mu_aa + mu_bb + _SSIM_C1) * (var_sum + _SSIM_C2)
    return float(np.mean(num / den))


def ssim(img: np.ndarray, ref: np.ndarray, crop_border: int = 0) -> float:
    """SSIM of ``img`` against ``ref``: ``(H, W)`` or ``(H, W, C)`` on the 0..255 scale, mean over channels."""
    a, b = _prepare(img, ref, crop_border)
    if a.ndim == 2:
        return _ssim_plane(a, b)
    return float(np.mean([_ssim_plane(np.ascontiguousarray(a[..., c]), np.ascontiguousarray(b[..., c]))
                          for c in range(a.shape[2])]))


@dataclass(frozen=True)
class FrameScores:
    """PSNR (dB) and SSIM of one frame (or a mean over frames), on Y and on RGB."""

    psnr_y: float
    ssim_y: float
    psnr_rgb: float
    ssim_rgb: float

    @classmethod
    def mean(cls, scores: list[FrameScores] | tuple[FrameScores, ...]) -> FrameScores:
        """The per-frame mean of each figure (BasicSR averages frame PSNRs, not MSEs)."""
        if not scores:
            raise ValueError("no frames to average")
        return cls(*(float(np.mean([getattr(s, f) for s in scores])) for f in cls.__dataclass_fields__))


def frame_scores(img: np.ndarray, ref: np.ndarray, crop_border: int = 0) -> FrameScores:
    """All four figures of an RGB frame ``img`` against ``ref`` (``(H, W, 3)``, 0..255, usually uint8)."""
    y_img, y_ref = rgb_to_y(img), rgb_to_y(ref)
    return FrameScores(
        psnr_y=psnr(y_img, y_ref, crop_border),
        ssim_y=ssim(y_img, y_ref, crop_border),
        psnr_rgb=psnr(img, ref, crop_border),
        ssim_rgb=ssim(img, ref, crop_border),
    )
