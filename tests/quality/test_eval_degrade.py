"""`vsr eval --degrade`: LR made from the whole GT clip by a recipe (BI then x264 ...), seeded and repeatable."""

from __future__ import annotations

import json
import subprocess
import sys

import cv2
import numpy as np
import pytest

from tests.conftest import pattern
from vsr.errors import InputError
from vsr.quality.evaluate import ClipDegradation, evaluate
from vsr.quality.resize import bicubic_downscale_x4


@pytest.fixture
def gt_dir(tmp_path):
    d = tmp_path / "gt"
    d.mkdir()
    for i in range(4):
        cv2.imwrite(str(d / f"{i:08d}.png"), cv2.cvtColor(pattern(i, 64, 48), cv2.COLOR_RGB2BGR))
    return d


def vsr_eval(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vsr", "eval", *map(str, args)], capture_output=True, text=True,
                          timeout=300)


def test_degradation_sees_the_whole_clip_once(gt_dir):
    calls = []

    def make(clip):
        calls.append(clip.shape)
        return np.stack([bicubic_downscale_x4(f) for f in clip])

    made = evaluate(gt_dir, weights=None, degrade=ClipDegradation("bi", make), frames=slice(1, 3))
    plain = evaluate(gt_dir, weights=None, frames=slice(1, 3))
    assert calls == [(4, 48, 64, 3)]
    assert made.lr_source == "bi" and made.mean("bicubic") == plain.mean("bicubic")
    with pytest.raises(InputError, match="not both"):
        evaluate(gt_dir, gt_dir, weights=None, degrade=ClipDegradation("bi", make))


def test_cli_x264_recipe_is_repeatable_and_lowers_psnr(gt_dir):
    runs = [vsr_eval("--gt", gt_dir, "--weights", "bicubic", "--degrade", "eval-x264-crf28", "--json")
            for _ in range(2)]
    clean = vsr_eval("--gt", gt_dir, "--weights", "bicubic", "--json")
    assert all(r.returncode == 0 for r in (*runs, clean)), runs[0].stderr
    a, b, c = (json.loads(r.stdout) for r in (*runs, clean))
    assert a == b and a["lr_source"] == "eval-x264-crf28 seed 0"
    assert a["bicubic"]["mean"]["psnr_y"] < c["bicubic"]["mean"]["psnr_y"]


def test_cli_seed_changes_a_random_recipe_and_table_names_it(gt_dir):
    out = [vsr_eval("--gt", gt_dir, "--weights", "random", "--config", "edvr-tiny", "--degrade", "real",
                    "--seed", s) for s in (1, 2)]
    assert all(r.returncode == 0 for r in out), out[0].stderr
    assert "LR made from GT by real seed 1" in out[0].stdout and "model (" in out[0].stdout
    assert out[0].stdout.splitlines()[2:] != out[1].stdout.splitlines()[2:]


@pytest.mark.parametrize("extra, words", [(["--degrade", "reel"], "unknown degradation 'reel'"),
                                          (["--degrade", "real", "--seed", "-1"], "--seed -1"),
                                          (["--degrade", "real", "--lr", "LR"], "not both"),
                                          # a recipe file the user names: what is wrong with it, not "unknown"
                                          (["--degrade", "MISSING"], "no such file: "),
                                          (["--degrade", "FOLDER"], "is a folder, not a TOML file")])
def test_cli_bad_degrade_is_one_line(gt_dir, tmp_path, extra, words):
    (tmp_path / "recipes.toml").mkdir()
    where = {"LR": str(gt_dir), "MISSING": str(tmp_path / "typo.toml"), "FOLDER": str(tmp_path / "recipes.toml")}
    extra = [where.get(e, e) for e in extra]
    proc = vsr_eval("--gt", gt_dir, "--weights", "bicubic", *extra)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and words in proc.stderr, proc.stderr
