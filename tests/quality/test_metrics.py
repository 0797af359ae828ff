"""PSNR/SSIM follow BasicSR's conventions: checked against closed forms and an independent implementation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vsr.quality.metrics import FrameScores, frame_scores, psnr, rgb_to_y, ssim


# -- an independent implementation: plain numpy, explicit window, shifted-slice 'valid' convolution -------

def ref_y(rgb: np.ndarray) -> np.ndarray:
    r, g, b = (rgb[..., c].astype(np.float64) / 255.0 for c in range(3))
    return 65.481 * r + 128.553 * g + 24.966 * b + 16.0


def ref_psnr(a: np.ndarray, b: np.ndarray) -> float:
    d = a.astype(np.float64).ravel() - b.astype(np.float64).ravel()
    return 20 * math.log10(255.0) - 10 * math.log10(float(d @ d) / d.size)


def ref_valid_filter(x: np.ndarray, g: np.ndarray) -> np.ndarray:
    """``x`` filtered by the window ``outer(g, g)``, only where the window fits: shifted slices, rows then columns."""
    k = g.size
    rows = sum(g[i] * x[i:x.shape[0] - k + 1 + i, :] for i in range(k))
    return sum(g[j] * rows[:, j:x.shape[1] - k + 1 + j] for j in range(k))


def ref_ssim_plane(a: np.ndarray, b: np.ndarray) -> float:
    t = np.arange(11) - 5.0
    g = np.exp(-t**2 / (2 * 1.5**2))
    g /= g.sum()
    a, b = a.astype(np.float64), b.astype(np.float64)
    ma, mb = ref_valid_filter(a, g), ref_valid_filter(b, g)
    va = ref_valid_filter(a * a, g) - ma**2
    vb = ref_valid_filter(b * b, g) - mb**2
    cab = ref_valid_filter(a * b, g) - ma * mb
    c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2
    return float(np.mean((2 * ma * mb + c1) * (2 * cab + c2) / ((ma**2 + mb**2 + c1) * (va + vb + c2))))


def ref_ssim(a: np.ndarray, b: np.ndarray) -> float:
    if a.ndim == 2:
        return ref_ssim_plane(a, b)
    return float(np.mean([ref_ssim_plane(a[..., c], b[..., c]) for c in range(a.shape[2])]))


@pytest.fixture(scope="module")
def pair():
    rng = np.random.default_rng(7)
    smooth = np.cumsum(np.cumsum(rng.normal(size=(48, 64, 3)), axis=0), axis=1)
    ref = np.clip(128 + 4 * smooth, 0, 255).round().astype(np.uint8)
    noisy = np.clip(ref + rng.normal(0, 12, ref.shape), 0, 255).round().astype(np.uint8)
    return noisy, ref


# -- closed forms --------------------------------------------------------------------------------------

def test_psnr_of_a_constant_offset():
    a = np.full((16, 16, 3), 100, np.uint8)
    assert psnr(a + 5, a) == pytest.approx(20 * math.log10(255 / 5), abs=1e-12)


def test_psnr_of_identical_images_is_infinite():
    a = np.arange(300, dtype=np.uint8).reshape(10, 10, 3)
    assert psnr(a, a) == math.inf


def test_ssim_of_an_image_with_itself_is_one(pair):
    assert ssim(pair[1], pair[1]) == pytest.approx(1.0, abs=1e-12)


def test_ssim_of_two_flat_images_is_the_luminance_term():
    x, y = 90.0, 140.0
    c1 = (0.01 * 255) ** 2
    expected = (2 * x * y + c1) / (x * x + y * y + c1)  # no variance: the structure term is 1
    assert ssim(np.full((20, 20), x), np.full((20, 20), y)) == pytest.approx(expected, abs=1e-12)


def test_y_of_black_and_white_is_16_and_235():
    img = np.array([[[0, 0, 0], [255, 255, 255]]], np.uint8)
    np.testing.assert_allclose(rgb_to_y(img), [[16.0, 235.0]], atol=1e-12)


def test_y_weights_are_bt601_in_rgb_order():
    red = np.array([[[255, 0, 0]]], np.uint8)
    assert rgb_to_y(red)[0, 0] == pytest.approx(16 + 65.481, abs=1e-12)


# -- agreement with the independent implementation -------------------------------------------------------

def test_psnr_and_ssim_agree_with_independent_implementation(pair):
    a, b = pair
    assert psnr(a, b) == pytest.approx(ref_psnr(a, b), abs=1e-9)
    assert ssim(a, b) == pytest.approx(ref_ssim(a, b), abs=1e-9)
    assert psnr(rgb_to_y(a), rgb_to_y(b)) == pytest.approx(ref_psnr(ref_y(a), ref_y(b)), abs=1e-9)
    assert ssim(rgb_to_y(a), rgb_to_y(b)) == pytest.approx(ref_ssim(ref_y(a), ref_y(b)), abs=1e-9)


def test_frame_scores_bundle_y_and_rgb(pair):
    a, b = pair
    s = frame_scores(a, b)
    assert s == FrameScores(psnr(rgb_to_y(a), rgb_to_y(b)), ssim(rgb_to_y(a), rgb_to_y(b)), psnr(a, b), ssim(a, b))


def test_crop_border_drops_the_frame_edges(pair):
    a, b = pair
    a2 = a.copy()
    a2[:4] = 0  # damage confined to the border
    assert psnr(a2, b, crop_border=4) == pytest.approx(ref_psnr(a[4:-4, 4:-4], b[4:-4, 4:-4]), abs=1e-9)
    assert ssim(a2, b, crop_border=4) == pytest.approx(ref_ssim(a[4:-4, 4:-4], b[4:-4, 4:-4]), abs=1e-9)


def test_mean_scores_average_per_frame_values():
    m = FrameScores.mean([FrameScores(20, 0.5, 18, 0.4), FrameScores(30, 0.7, 28, 0.6)])
    assert m == FrameScores(25, 0.6, 23, 0.5)


def test_mismatched_shapes_are_refused():
    with pytest.raises(ValueError, match="shapes differ"):
        psnr(np.zeros((4, 4)), np.zeros((4, 5)))
