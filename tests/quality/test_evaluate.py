"""Sequence evaluation: which frames feed the model, how outputs are quantised, what input is refused."""

from __future__ import annotations

import math
from pathlib import Path

import cv2
import numpy as np
import pytest

from vsr.errors import InputError
from vsr.quality.evaluate import EvalResult, evaluate, evaluate_sequence, quantize
from vsr.quality.metrics import frame_scores
from vsr.quality.resize import bicubic_downscale_x4, bicubic_upscale_x4


def write_frames(folder: Path, frames: list[np.ndarray]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i, f in enumerate(frames):
        cv2.imwrite(str(folder / f"{i:08d}.png"), cv2.cvtColor(f, cv2.COLOR_RGB2BGR))
    return folder


def textured(seed: int, h: int = 48, w: int = 64) -> np.ndarray:
    rng = np.random.default_rng(seed)
    base = cv2.resize(rng.uniform(0, 255, (h // 8, w // 8, 3)), (w, h), interpolation=cv2.INTER_CUBIC)
    return np.clip(base + rng.normal(0, 6, base.shape), 0, 255).round().astype(np.uint8)


class NearestX4:
    """A fake backend: repeats each pixel of the window's centre frame 4x4; records what it was fed."""

    name = "nearest"
    scale = 4

    def __init__(self, num_frame: int = 3, padding: str = "reflection_circle"):
        self.num_frame, self.padding = num_frame, padding
        self.fed: list[np.ndarray] = []

    def infer(self, x: np.ndarray) -> np.ndarray:
        assert x.dtype == np.float32 and x.ndim == 5 and x.shape[2] == 3
        self.fed.append(x.copy())
        centre = x[:, self.num_frame // 2]
        return centre.repeat(4, axis=2).repeat(4, axis=3)


@pytest.fixture()
def clip(tmp_path):
    gt = [textured(i) for i in range(5)]
    lr = [bicubic_downscale_x4(g) for g in gt]
    return write_frames(tmp_path / "lr", lr), write_frames(tmp_path / "gt", gt), lr, gt


def test_model_and_bicubic_scores_match_direct_computation(clip):
    lr_dir, gt_dir, lr, gt = clip
    result = evaluate_sequence(lr_dir, gt_dir, NearestX4())
    assert result.count == 5 and result.frame_names[0] == "00000000.png"
    for i in range(5):
        assert result.bicubic[i] == frame_scores(bicubic_upscale_x4(lr[i]), gt[i])
        expected = frame_scores(lr[i].repeat(4, 0).repeat(4, 1), gt[i])
        assert vars(result.model[i]) == pytest.approx(vars(expected), abs=1e-12)
    assert result.mean("model").psnr_y == pytest.approx(np.mean([s.psnr_y for s in result.model]))


def test_without_lr_the_lr_is_made_from_mod_cropped_gt(tmp_path, clip):
    _, gt_dir, lr, _ = clip
    odd = [np.pad(cv2.imread(str(p))[..., ::-1], ((0, 3), (0, 2), (0, 0))) for p in sorted(gt_dir.glob("*.png"))]
    odd_dir = write_frames(tmp_path / "odd_gt", odd)  # 51x66: mod-crop back to 48x64
    made = evaluate_sequence(None, odd_dir, None)
    given = evaluate_sequence(clip[0], gt_dir, None)
    assert made.lr_source != given.lr_source
    assert made.bicubic == given.bicubic


def test_a_frame_selection_keeps_neighbours_from_the_whole_clip(clip):
    lr_dir, gt_dir, lr, _ = clip
    backend = NearestX4(num_frame=3)
    result = evaluate_sequence(lr_dir, gt_dir, backend, frames=slice(4, 5))
    assert result.frame_names == ("00000004.png",)
    fed = np.round(backend.fed[0][0] * 255).astype(np.uint8).transpose(0, 2, 3, 1)
    # window of the last frame, reflection_circle: frames 3, 4 and (circling back) 2
    for t, j in enumerate((3, 4, 2)):
        np.testing.assert_array_equal(fed[t], lr[j])


def test_padding_follows_the_backend(clip):
    lr_dir, gt_dir, lr, _ = clip
    backend = NearestX4(num_frame=3, padding="replicate")
    evaluate_sequence(lr_dir, gt_dir, backend, frames=slice(0, 1))
    fed = np.round(backend.fed[0][0] * 255).astype(np.uint8).transpose(0, 2, 3, 1)
    for t, j in enumerate((0, 0, 1)):
        np.testing.assert_array_equal(fed[t], lr[j])


def test_batches_cover_every_frame_once(clip):
    lr_dir, gt_dir, _, _ = clip
    backend = NearestX4()
    result = evaluate_sequence(lr_dir, gt_dir, backend, batch_size=2)
    assert [f.shape[0] for f in backend.fed] == [2, 2, 1]
    assert result.model == evaluate_sequence(lr_dir, gt_dir, NearestX4(), batch_size=5).model


def test_output_is_clipped_and_rounded_to_8_bits():
    y = np.array([-0.2, 0.0, 0.4 / 255, 1.6 / 255, 0.999, 1.3], np.float32).reshape(1, 1, 2, 3)
    q = quantize(np.repeat(y, 3, axis=1))
    assert q.dtype == np.uint8 and q.shape == (1, 2, 3, 3)
    np.testing.assert_array_equal(q[0, :, :, 0].ravel(), [0, 0, 0, 2, 255, 255])


def test_a_perfect_model_scores_infinite_psnr_and_json_null(clip):
    lr_dir, gt_dir, _, gt = clip

    class Oracle(NearestX4):
        def infer(self, x):
            return np.stack([gt[0].transpose(2, 0, 1) / 255.0] * x.shape[0])

    result = evaluate_sequence(lr_dir, gt_dir, Oracle(), frames=slice(0, 1))
    assert result.model[0].psnr_y == math.inf and result.model[0].ssim_rgb == pytest.approx(1.0)
    assert result.to_dict()["model"]["mean"]["psnr_y"] is None


def test_result_dict_carries_means_and_per_frame_values(clip):
    lr_dir, gt_dir, _, _ = clip
    d = evaluate_sequence(lr_dir, gt_dir, None, frames=slice(1, 3)).to_dict()
    assert d["frames"] == 2 and d["model"] is None and d["lr_source"] == "given"
    assert [f["frame"] for f in d["bicubic"]["per_frame"]] == ["00000001.png", "00000002.png"]
    assert set(d["bicubic"]["mean"]) == {"psnr_y", "ssim_y", "psnr_rgb", "ssim_rgb"}


@pytest.mark.parametrize("case, message", [
    ("missing", "not found"),
    ("empty", r"no frames \(PNG, JPEG, TIFF, BMP or WebP\) in LR folder"),
    ("count", "frame counts differ"),
    ("size", "exactly 4x the LR size"),
    ("selection", "selection is empty"),
])
def test_bad_input_raises_input_error(tmp_path, clip, case, message):
    lr_dir, gt_dir, lr, gt = clip
    if case == "missing":
        lr_dir = tmp_path / "nope"
    elif case == "empty":
        lr_dir = tmp_path / "empty"
        lr_dir.mkdir()
    elif case == "count":
        lr_dir = write_frames(tmp_path / "short", lr[:4])
    elif case == "size":
        lr_dir = write_frames(tmp_path / "big", [g[:44] for g in gt])
    kwargs = {"frames": slice(9, 12)} if case == "selection" else {}
    with pytest.raises(InputError, match=message):
        evaluate_sequence(lr_dir, gt_dir, None, **kwargs)


def test_input_is_checked_before_the_model_is_loaded(tmp_path):
    # 'default' weights may not exist; the input error must win
    with pytest.raises(InputError, match="GT folder not found"):
        evaluate(tmp_path / "nope", weights="default")


def test_eval_result_requires_a_model_for_model_means(clip):
    result: EvalResult = evaluate_sequence(clip[0], clip[1], None)
    with pytest.raises(ValueError):
        result.mean("model")
