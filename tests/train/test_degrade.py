"""Degradations for real footage: seeded and reproducible, each operation does what it says, x264 is real codec
output, recipes come from TOML files whose mistakes are one-line errors."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest

from tests.conftest import pattern
from tests.data import NEEDS_SHARED
from vsr.errors import ConfigError
from vsr.quality.resize import bicubic_downscale_x4
from vsr.train.data import FramePool, PairSampler, find_sources
from vsr.train.degrade import (CLEAN, Blur, Context, Jpeg, Noise, Resize, Video, add_noise, blur, degrade_clip,
                               gaussian_kernel, jpeg, load_degrade, resize, x264)


def hr_clip(frames: int = 5, width: int = 64, height: int = 48) -> np.ndarray:
    return np.stack([pattern(i, width, height) for i in range(frames)])


def blockiness(clip: np.ndarray) -> float:
    """Mean horizontal step across 8-pixel block boundaries over the mean step elsewhere (1 = no blocks)."""
    y = clip.astype(np.float32).mean(-1)
    d = np.abs(np.diff(y, axis=2))
    at_edge = (np.arange(d.shape[2]) % 8) == 7
    return float(d[..., at_edge].mean() / d[..., ~at_edge].mean())


def high_freq(clip: np.ndarray) -> float:
    y = clip.astype(np.float32).mean(-1)
    return float(np.abs(np.diff(y, axis=1)).mean() + np.abs(np.diff(y, axis=2)).mean())


@pytest.mark.parametrize("name", ["real", "mix", "eval-x264-crf28"])
def test_same_seed_same_lr_bytes(name):
    d, hr = load_degrade(name), hr_clip()
    runs = [[degrade_clip(hr, d, np.random.default_rng([7, i])).tobytes() for i in range(6)] for _ in range(2)]
    assert runs[0] == runs[1]
    assert degrade_clip(hr, d, np.random.default_rng([7, 0])).shape == (5, 12, 16, 3)


def test_x264_bytes_do_not_depend_on_memory_it_never_wrote():
    """x264's AVX-512 functions read memory they never wrote (vsr.train.degrade.x264_asm): with glibc filling
    fresh memory with a byte of its own (MALLOC_PERTURB_) in another process, the same clip must give the same
    bytes as here.  (Where x264 picks no AVX-512 functions this holds anyway.)"""
    code = ("import hashlib, numpy as np; from tests.conftest import pattern; from vsr.train.degrade import x264; "
            "clip = np.stack([pattern(i, 48, 48) for i in range(7)]); "
            "print(hashlib.sha256(x264(clip, crf=18, preset='veryfast').tobytes()).hexdigest())")
    there = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, MALLOC_PERTURB_="77"),
                           capture_output=True, text=True, check=True, timeout=300).stdout.strip()
    clip = np.stack([pattern(i, 48, 48) for i in range(7)])
    assert hashlib.sha256(x264(clip, crf=18, preset="veryfast").tobytes()).hexdigest() == there


def test_different_seeds_draw_different_degradations():
    d, hr = load_degrade("real"), hr_clip()
    outs = {degrade_clip(hr, d, np.random.default_rng(s)).tobytes() for s in range(6)}
    assert len(outs) == 6


def test_clean_is_matlab_bicubic():
    hr = hr_clip(3)
    want = np.stack([bicubic_downscale_x4(f) for f in hr])
    assert np.array_equal(degrade_clip(hr, CLEAN, np.random.default_rng(0)), want)
    assert np.array_equal(degrade_clip(hr, load_degrade("clean"), np.random.default_rng(0)), want)


def test_blur_removes_detail_and_anisotropic_kernel_has_a_direction():
    hr = hr_clip(2)
    weak, strong = blur(hr, gaussian_kernel(0.5, 0.5, 0.0)), blur(hr, gaussian_kernel(2.0, 2.0, 0.0))
    assert high_freq(strong) < high_freq(weak) < high_freq(hr)
    k = gaussian_kernel(3.0, 0.5, 0.0)  # long along x
    assert np.isclose(k.sum(), 1.0, atol=1e-5)
    r = k.shape[0] // 2
    assert k[r, r + 2] > 10 * k[r + 2, r]
    turned = gaussian_kernel(3.0, 0.5, np.pi / 2)  # the same kernel turned a quarter: long along y
    assert np.allclose(turned, k.T, atol=1e-6)


@pytest.mark.parametrize("kernel", ["area", "bilinear", "bicubic", "lanczos", "matlab"])
def test_resize_kernels_give_the_lr_size_and_differ(kernel):
    hr = hr_clip(2)
    out = resize(hr, (12, 16), kernel)
    assert out.shape == (2, 12, 16, 3) and out.dtype == np.uint8
    if kernel != "matlab":
        assert not np.array_equal(out, resize(hr, (12, 16), "matlab"))


def test_gaussian_noise_has_the_asked_std_and_poisson_grows_with_brightness():
    rng = np.random.default_rng(0)
    flat = np.full((2, 64, 64, 3), 128, np.uint8)
    noisy = add_noise(flat, rng, gaussian=True, level=5.0, gray=False)
    assert abs(float((noisy.astype(np.float32) - 128).std()) - 5.0) < 0.3
    assert not np.array_equal(noisy[0], noisy[1])  # a fresh draw per frame
    gray = add_noise(flat, rng, gaussian=True, level=5.0, gray=True)
    assert np.array_equal(gray[..., 0], gray[..., 1])
    dark, bright = (np.full((1, 64, 64, 3), v, np.uint8) for v in (30, 220))
    sd = [float(add_noise(x, rng, gaussian=False, level=200.0, gray=False).astype(np.float32).std())
          for x in (dark, bright)]
    assert sd[1] > 2 * sd[0] > 0


def test_jpeg_error_grows_as_quality_falls():
    lr = hr_clip(2)
    err = [float(np.abs(jpeg(lr, q).astype(np.float32) - lr).mean()) for q in (95, 60, 15)]
    assert 0 < err[0] < err[1] < err[2]


def test_x264_is_real_codec_output():
    lr = hr_clip(6)
    low, high = x264(lr, crf=18, preset="medium"), x264(lr, crf=40, preset="medium")
    assert low.shape == high.shape == lr.shape and low.dtype == np.uint8
    # H.264's block transform leaves steps on the block grid, the more the higher the CRF.
    assert blockiness(lr) < blockiness(low) < blockiness(high)
    assert np.abs(high.astype(np.float32) - lr).mean() > np.abs(low.astype(np.float32) - lr).mean() > 0


def test_x264_odd_sizes_round_trip():
    lr = hr_clip(3, 33, 21)
    assert x264(lr, crf=23, preset="ultrafast").shape == lr.shape


def test_each_operation_is_switched_by_its_probability():
    hr, rng = hr_clip(3), np.random.default_rng
    base = replace(CLEAN, name="t", clean=0.0, resize=Resize(kernels=("matlab",)))
    plain = degrade_clip(hr, base, rng(0))
    assert np.array_equal(plain, degrade_clip(hr, CLEAN, rng(0)))
    for part in (dict(blur=Blur(p=1.0)), dict(noise=Noise(p=1.0)), dict(jpeg=Jpeg(p=1.0, quality=(30, 30))),
                 dict(video=Video(p=1.0, crf=(35, 35)))):
        assert not np.array_equal(degrade_clip(hr, replace(base, **part), rng(0)), plain), part


def write(tmp_path, text: str):
    p = tmp_path / "d.toml"
    p.write_text(text)
    return p


@pytest.mark.parametrize("text, words", [
    ("[blur]\nsigmaa = [0.2, 1.0]\n", ["[blur]", "sigmaa", "known"]),
    ("[noise]\np = 1.5\n", ["[noise] p", "probability"]),
    ("[video]\ncrf = [30, 20]\n", ["[video] crf", "range"]),
    ("[video]\npresets = [\"quick\"]\n", ["presets", "quick"]),
    ("[resize]\nkernels = [\"nearest\"]\n", ["kernels", "nearest"]),
    ("clen = 0.5\n", ["clen"]),
    ("[jpeg\n", ["not a TOML"]),
])
def test_config_mistakes_are_one_line(tmp_path, text, words):
    with pytest.raises(ConfigError) as e:
        load_degrade(write(tmp_path, text))
    msg = str(e.value)
    assert "\n" not in msg and all(w in msg for w in words), msg


def test_unknown_recipe_names_the_known_ones():
    with pytest.raises(ConfigError, match="known: clean, eval-x264-crf28, mix, real"):
        load_degrade("reel")


def test_sampler_hr_is_the_same_whatever_the_degradation(make_clip):
    clip = make_clip("train.mp4", width=48, height=40, frames=12)

    def sampler(d):
        pool = FramePool(find_sources([clip]), segments_per_video=3, segment_length=5, region=40)
        return PairSampler(pool, num_frame=3, lr_patch=8, batch_size=3, seed=1, degradation=d)

    real_here = replace(load_degrade("real"), context=Context())  # the window itself is degraded
    clean, real, real2 = sampler(CLEAN).batch(4), sampler(real_here).batch(4), sampler(real_here).batch(4)
    assert np.array_equal(clean[1], real[1])  # same HR windows
    assert not np.array_equal(clean[0], real[0])
    assert np.array_equal(real[0], real2[0]) and real[0].shape == clean[0].shape


def test_context_window_is_cut_from_the_degraded_clip_in_register(make_clip):
    """With a [context], the whole larger, longer clip is degraded and the window cut from it: the LR window's
    centre frame is the BI of the HR centre crop away from the patch edge (exact), and its middle frames."""
    clip = make_clip("train.mp4", width=64, height=48, frames=12)
    bi = replace(CLEAN, name="bi", clean=0.0, resize=Resize(kernels=("matlab",)), context=Context(lr_size=12, frames=5))
    pool = FramePool(find_sources([clip]), segments_per_video=3, segment_length=7, region=48)
    sampler = PairSampler(pool, num_frame=3, lr_patch=8, batch_size=4, seed=2, degradation=bi, video_fraction=1.0)
    offsets = set()
    for it in range(3):
        lr, hr = sampler.batch(it)
        assert lr.shape == (4, 3, 3, 8, 8) and hr.shape == (4, 3, 32, 32)
        for k in range(4):
            want = bicubic_downscale_x4(np.round(hr[k].transpose(1, 2, 0) * 255).astype(np.uint8))
            got = np.round(lr[k, 1].transpose(1, 2, 0) * 255).astype(np.uint8)
            # MATLAB bicubic x1/4 reaches 2 LR pixels: inside that margin both are the same pixels' BI.
            assert np.array_equal(got[2:-2, 2:-2], want[2:-2, 2:-2])
            offsets.add(hr[k].tobytes())
            # A neighbouring frame is another frame (the clip moves), so the check above pins the centre.
            assert not np.array_equal(np.round(lr[k, 0] * 255), np.round(lr[k, 1] * 255))
    assert len(offsets) == 12  # windows differ


@pytest.mark.parametrize("name", ["real", "mix"])
def test_training_recipes_compress_whole_clips(name):
    d = load_degrade(name)
    assert d.context.lr_size >= 2 * 24 and d.context.frames > 5  # more than a 24-pixel, 5-frame window


def test_cli_train_bad_degrade_config_is_one_line(tmp_path, make_clip):
    clip = make_clip("train.mp4", width=48, height=40, frames=6)
    bad = write(tmp_path, "[blur]\nsigmaa = [0.2, 1.0]\n")
    proc = subprocess.run([sys.executable, "-m", "vsr", "train", "--config", "edvr-tiny", "--data", str(clip),
                           "--iters", "1", "--out", str(tmp_path / "run"), "--degrade", "real",
                           "--degrade-config", str(bad)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "sigmaa" in proc.stderr
    assert not (tmp_path / "run").exists()


def test_city_x264_validation_set_is_the_eval_recipe():
    from vsr.train.validate import data_root, prepare, vid4_sets

    if not (data_root() / "sequences" / "vid4" / "city" / "gt").is_dir():
        pytest.skip(NEEDS_SHARED)
    (plain,), (coded,) = vid4_sets(["city"]), vid4_sets(["city-x264"])
    assert coded.gt_dir == plain.gt_dir and coded.lr_dir is None and coded.degrade == "eval-x264-crf28"
    a, b = prepare(plain, 5, "reflection_circle"), prepare(coded, 5, "reflection_circle")
    assert [f.bicubic_y for f in b] == [f.bicubic_y for f in prepare(coded, 5, "reflection_circle")]
    assert all(y < x for x, y in zip((f.bicubic_y for f in a), (f.bicubic_y for f in b)))
