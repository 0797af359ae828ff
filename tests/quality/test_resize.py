"""MATLAB-style bicubic imresize: matches the official Vid4 BIx4 LR, and behaves like an interpolator."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from tests.data import CALENDAR, needs
from vsr.quality.resize import (bicubic_downscale_x4, bicubic_upscale_x4, imresize, mod_crop, resize_matrix,
                                to_uint8_matlab)

needs_calendar = needs(CALENDAR / "gt", CALENDAR / "lr")  # full-size GT: only in the shared data
FRAMES = ("00000000.png", "00000015.png", "00000030.png")


def read_rgb(path: Path) -> np.ndarray:
    return cv2.cvtColor(cv2.imread(str(path)), cv2.COLOR_BGR2RGB)


def psnr_8bit(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


@needs_calendar
@pytest.mark.parametrize("name", FRAMES)
def test_float_downscale_agrees_with_official_calendar_lr(name):
    gt, lr = read_rgb(CALENDAR / "gt" / name), read_rgb(CALENDAR / "lr" / name)
    ours = imresize(gt.astype(np.float64), 1 / 4)
    assert ours.shape == lr.shape == (144, 180, 3)
    ours8 = to_uint8_matlab(ours)
    assert psnr_8bit(ours8, lr) >= 57.5
    assert np.abs(ours8.astype(int) - lr).max() <= 6


@needs_calendar
@pytest.mark.parametrize("name", FRAMES)
def test_uint8_downscale_reproduces_official_calendar_lr_exactly(name):
    # MATLAB keeps uint8 between the row and column passes; rounding there too gives the LR bit for bit
    gt, lr = read_rgb(CALENDAR / "gt" / name), read_rgb(CALENDAR / "lr" / name)
    ours = bicubic_downscale_x4(gt)
    assert ours.dtype == np.uint8
    np.testing.assert_array_equal(ours, lr)


def test_output_size_is_ceil_of_scaled_size():
    assert imresize(np.zeros((10, 7)), 0.25).shape == (3, 2)
    assert imresize(np.zeros((5, 3, 3)), 4).shape == (20, 12, 3)
    assert imresize(np.zeros((8, 8)), (0.5, 2)).shape == (4, 16)


@pytest.mark.parametrize("scale", [0.25, 0.5, 4, 3])
def test_constant_image_stays_constant(scale):
    out = imresize(np.full((12, 9, 3), 77.25), scale)
    np.testing.assert_allclose(out, 77.25, rtol=0, atol=1e-9)


def test_every_output_sample_is_a_normalised_weighting_of_inputs():
    for n, s in [(576, 0.25), (144, 4), (7, 0.25), (1, 4)]:
        np.testing.assert_allclose(resize_matrix(n, s).sum(axis=1), 1.0, atol=1e-12)


def test_upscale_by_four_keeps_a_linear_ramp_away_from_the_border():
    # cubic convolution reproduces linear functions exactly; the mirrored border bends them
    ramp = np.tile(np.arange(20, dtype=np.float64), (6, 1))
    out = imresize(ramp, 4)
    x = (np.arange(80) + 0.5) / 4 - 0.5  # output sample centres in input coordinates
    np.testing.assert_allclose(out[:, 8:-8], np.tile(x[8:-8], (24, 1)), atol=1e-12)


def test_uint8_in_uint8_out_rounded_and_saturated():
    img = np.zeros((8, 8), np.uint8)
    img[::2, ::2] = 255  # overshoot of the cubic kernel would leave 0..255 without saturation
    up = bicubic_upscale_x4(img)
    assert up.dtype == np.uint8 and up.shape == (32, 32)
    assert bicubic_upscale_x4(img.astype(np.float64)).min() < 0


def test_matlab_rounding_is_half_away_from_zero():
    np.testing.assert_array_equal(to_uint8_matlab(np.array([0.5, 1.5, 2.5, 254.5, -3.0, 300.0])),
                                  [1, 2, 3, 255, 0, 255])


def test_mod_crop_trims_bottom_right():
    assert mod_crop(np.zeros((579, 722, 3)), 4).shape == (576, 720, 3)
