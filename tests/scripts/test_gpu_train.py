"""The GPU training slices rehearsed on the CPU with EDVR-tiny (CI has no GPU): the data pack, then two slices
through ``scripts/gpu_train.sh`` -- the first with a batch worker process, the second resuming from the files the
first returned -- end bit-exactly where one uninterrupted run of the same schedule ends; a window's weights kept in
the repository start the next window, whose schedule is sized to its time."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import pattern
from tests.data import TRAIN_IMAGES

REPO = Path(__file__).resolve().parents[2]


def _images(folder: Path) -> Path:
    """Two real training images when the shared data is there, else two synthetic ones: textured gradients that
    a PNG compresses about as well as a photograph (white noise would not fit the pack's limit)."""
    import cv2

    folder.mkdir(parents=True)
    real = sorted(TRAIN_IMAGES.glob("Kodak24*/*.png"))[:2] if TRAIN_IMAGES.is_dir() else []
    for i in range(2):
        img = cv2.imread(str(real[i])) if real else pattern(i, 300, 300, seed=i)
        cv2.imwrite(str(folder / f"{i}.png"), img)
    return folder


def _slice(data: Path, carried: Path, out: Path, work: Path, *extra: str) -> dict:
    cmd = ["bash", str(REPO / "scripts" / "gpu_train.sh"), "--out", str(out), "--work", str(work),
           "--config", "edvr-tiny", "--iters", "4", "--batch-size", "2", "--patch", "16", "--warmup", "1",
           "--log-every", "1", "--threads", "1", "--workers", "0", "--device", "cpu", *extra]
    # as on the GPU image: no PyAV (its stand-in in gpu_train.py must be enough for training on still images)
    env = dict(os.environ, PYTHON=sys.executable, VSR_TRAIN_DATA=str(data), VSR_TRAIN_CARRIED=str(carried),
               VSR_TRAIN_NO_PYAV="1")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.splitlines()[-1])


def _checkpoint(out: Path) -> dict:
    data = b"".join(p.read_bytes() for p in sorted(out.glob("latest.pth.part*")))
    assert hashlib.sha256(data).hexdigest() == (out / "latest.sha256").read_text().split()[0]
    path = out / "joined.pth"
    path.write_bytes(data)
    return torch.load(path, weights_only=True)


def _tensors(tree, prefix=""):
    if isinstance(tree, torch.Tensor):
        yield prefix, tree
    elif isinstance(tree, dict):
        for k, v in tree.items():
            yield from _tensors(v, f"{prefix}/{k}")
    elif isinstance(tree, (list, tuple)):
        for i, v in enumerate(tree):
            yield from _tensors(v, f"{prefix}/{i}")


def test_pack_refuses_validation_sequences_and_keeps_to_its_limit(tmp_path):
    src = _images(tmp_path / "train")
    r = subprocess.run([sys.executable, "scripts/gpu_train.py", "pack", "--src", str(src), "--out",
                        str(tmp_path / "pack"), "--limit-mib", "0.15", "--crop", "256"], capture_output=True, text=True,
                       cwd=REPO)
    assert r.returncode == 0, r.stderr
    packed = list((tmp_path / "pack").glob("*.png"))
    assert 1 <= len(packed) <= 2 and sum(p.stat().st_size for p in packed) <= 0.15 * 2**20
    (tmp_path / "vid4").mkdir()
    shutil.copy(packed[0], tmp_path / "vid4" / "calendar.png")
    r = subprocess.run([sys.executable, "scripts/gpu_train.py", "pack", "--src", str(tmp_path), "--out",
                        str(tmp_path / "pack2")], capture_output=True, text=True, cwd=REPO)
    assert r.returncode != 0 and "Vid4" in r.stderr


def test_two_slices_resume_bit_exactly_where_one_run_ends(tmp_path):
    data = _images(tmp_path / "data")
    first, second, whole = tmp_path / "slice1", tmp_path / "slice2", tmp_path / "whole"
    # a worker process makes the batches, forked from a server that imported this script (and its PyAV stand-in)
    assert _slice(data, tmp_path / "none", first, tmp_path / "w1", "--stop-after", "2", "--workers", "1")["to"] == 2
    carried = tmp_path / "carried"
    shutil.copytree(first, carried)
    resumed = _slice(data, carried, second, tmp_path / "w2")
    assert resumed["resumed"] and (resumed["from"], resumed["to"]) == (2, 4)
    _slice(data, tmp_path / "none", whole, tmp_path / "w3")
    a, b = dict(_tensors(_checkpoint(second))), dict(_tensors(_checkpoint(whole)))
    assert a.keys() == b.keys() and len(a) > 10
    different = [k for k in a if not torch.equal(a[k], b[k])]
    assert not different, different[:5]
    curve = (second / "curve.json").read_text()
    assert '"iteration": 4' in curve and '"iteration": 3' in curve  # the curve spans both slices

    # the window's end kept in the repository: the EMA weights in fp16 and the record of the windows
    sys.path.insert(0, str(REPO))
    from scripts.gpu_train import keep

    carry = tmp_path / "repo" / "training" / "edvr-tiny.pth"
    carry.parent.mkdir(parents=True)
    assert keep(whole, carry)["total_iterations"] == 4
    kept = torch.load(carry, weights_only=True)
    assert all(torch.equal(v, b[f"/params_ema/{k}"].half()) for k, v in kept["params"].items())
    # the next window starts from them with a seed of its own, its schedule sized to end with its time
    nxt = _slice(data, tmp_path / "none", tmp_path / "window2", tmp_path / "w4", "--continue", str(carry),
                 "--iters", "auto", "--warmup", "2", "--slice-s", "3")
    assert (nxt["init"], nxt["seed"], nxt["from"]) == (str(carry), 1, 0) and 1 <= nxt["to"] <= nxt["of"]
    assert nxt["of"] >= 2
    record = keep(tmp_path / "window2", carry)
    assert record["windows"] == 2 and record["total_iterations"] == 4 + nxt["to"]


def test_the_training_pack_fits_a_session_beside_the_repository_and_the_checkpoint():
    sys.path.insert(0, str(REPO))
    from scripts.gpu_carry import LIMIT, checkpoint_bytes, train_budget

    ckpt = checkpoint_bytes("edvr-s-wide")
    assert 23 << 20 < ckpt < 25 << 20  # 1.47 M parameters, four float32 copies
    assert train_budget(8 << 20, ckpt) == LIMIT - (8 << 20) - ckpt - (1 << 20)
    assert train_budget(1 << 20, 1 << 20) == 40 << 20  # at most 40 MiB of images
    assert train_budget(8 << 20, checkpoint_bytes("edvr-m")) < 4 << 20  # EDVR-M's 53 MB leave no room for data


def test_the_speed_probe_runs_at_batch_16_patch_32_and_its_log_comes_back_in_out(tmp_path):
    data = _images(tmp_path / "data")
    out = tmp_path / "out"
    done = _slice(data, tmp_path / "none", out, tmp_path / "w", "--probe-s", "1", "--stop-after", "1")
    probe = json.loads((out / "probe.json").read_text())
    assert (probe["batch"], probe["patch"], probe["device"]) == (16, 32, "cpu") and probe["iterations"] >= 1
    assert done["probe"] == probe and {"probe.json", "probe-log.jsonl"} <= set(done["files"])
    log = [json.loads(line) for line in (out / "probe-log.jsonl").read_text().splitlines()]
    assert log[0]["event"] == "start" and log[0]["options"]["batch_size"] == 16
    assert log[0]["options"]["lr_patch"] == 32


def test_a_compiled_probe_beside_the_plain_one_comes_back_in_out(tmp_path, monkeypatch):
    """``--probe-compile``: a second probe with the forward through torch.compile (here TorchDynamo is switched
    off, so torch.compile hands the model back: the plumbing is what is checked, not the compiler)."""
    monkeypatch.setenv("TORCHDYNAMO_DISABLE", "1")
    data = _images(tmp_path / "data")
    out = tmp_path / "out"
    done = _slice(data, tmp_path / "none", out, tmp_path / "w", "--probe-s", "1", "--probe-compile",
                  "--stop-after", "1")
    compiled = json.loads((out / "probe-compile.json").read_text())
    assert compiled["compiled"] is True and compiled["iterations"] >= 2 and compiled["first_step_s"] >= 0
    assert done["probe"]["compiled"] == compiled and "probe-compile-log.jsonl" in done["files"]
    log = [json.loads(line) for line in (out / "probe-compile-log.jsonl").read_text().splitlines()]
    assert log[0]["options"]["compile"] is True and log[0]["options"]["batch_size"] == 16


def test_the_gate_ships_only_on_a_mean_gain_that_loses_on_no_set():
    """The weights of the first two windows gained 0.24 and 0.32 dB on Vid4 calendar and city and lost 0.14 on
    REDS and 1.6 on the cockatoo clip (docs/weights.md): Vid4's mean alone said `ship`; the gate now says keep."""
    from scripts.gpu_train import verdict

    def scores(**gains):
        return {k: {"candidate": 30.0 + g, "reference": 30.0, "bicubic": 29.0} for k, g in gains.items()}

    windows_1_2 = verdict(scores(calendar=0.236, city=0.320, reds000=-0.138, cockatoo=-1.621))
    assert windows_1_2["verdict"] == "keep the reference" and windows_1_2["gain_db"] < 0
    assert verdict(scores(calendar=0.236, city=0.320))["verdict"] == "ship"  # what Vid4 alone said
    one_loss = verdict(scores(calendar=0.3, city=0.3, reds000=0.3, cockatoo=-0.06))
    assert one_loss["verdict"] == "keep the reference" and "cockatoo loses 0.060 dB" in one_loss["why"]
    assert verdict(scores(calendar=0.3, city=0.3, reds000=0.1, cockatoo=-0.05))["verdict"] == "ship"
    assert verdict(scores(calendar=0.0, city=0.0, reds000=0.0, cockatoo=0.0))["verdict"] == "keep the reference"


def test_the_gate_scores_vid4_reds_and_a_real_clip_none_of_them_trained_on(tmp_path):
    """Its four sets are there, as PNG frames, with the LR vsr eval makes where none is given; the real clip's
    frames are decoded whole (1280x720); and the pack refuses all of them as training data."""
    import cv2

    from scripts.gpu_train import GATE_CLIP, GATE_CLIP_FRAMES, REFUSED, gate_sets
    from tests.data import SHARED

    if not (SHARED / "sequences" / "vid4" / "city" / "gt").is_dir() or not (SHARED / GATE_CLIP).is_file():
        pytest.skip("needs ../shared/data (or VSR_DATA): the Vid4 and training sets; see docs/install.md")
    sets = gate_sets(SHARED, tmp_path)
    assert list(sets) == ["calendar", "city", "reds000", "cockatoo"]
    assert sets["calendar"][1] is not None and all(lr is None for _gt, lr in list(sets.values())[1:])
    frames = sorted(sets["cockatoo"][0].glob("*.png"))
    assert len(frames) == GATE_CLIP_FRAMES and cv2.imread(str(frames[0])).shape == (720, 1280, 3)
    assert all(any(word in str(gt).lower() for word in REFUSED) for gt, _lr in sets.values())


def test_a_pack_with_videos_trains_on_them_without_pyav(tmp_path, make_clip):
    """The pack holds whole videos first (byte for byte, within their share of the limit), then image crops; a
    slice on it -- PyAV blocked, as on the GPU image -- reads the video through OpenCV and draws half its windows
    from it.  A clip of the gate's sets is refused."""
    import cv2

    src, videos = _images(tmp_path / "images"), tmp_path / "videos"
    videos.mkdir()
    clip = make_clip("videos/walkabout.mp4", width=96, height=80, frames=12)  # "walk": a Vid4 name, refused
    r = subprocess.run([sys.executable, "scripts/gpu_train.py", "pack", "--src", str(src), "--videos", str(videos),
                        "--out", str(tmp_path / "refused")], capture_output=True, text=True, cwd=REPO)
    assert r.returncode != 0 and "gate's sets" in r.stderr
    clip = clip.rename(videos / "street.mp4")
    big = make_clip("videos/zz_big.mp4", width=320, height=256, frames=40)  # over its share: left out
    r = subprocess.run([sys.executable, "scripts/gpu_train.py", "pack", "--src", str(src), "--videos", str(videos),
                        "--out", str(tmp_path / "pack"), "--limit-mib", "0.5", "--crop", "256"],
                       capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    record = json.loads((tmp_path / "pack" / "pack.json").read_text())
    assert big.stat().st_size > 0.25 * 2**20 and record["videos"] == ["street.mp4"] and record["of_videos"] == 2
    assert (tmp_path / "pack" / "video_street.mp4").read_bytes() == clip.read_bytes() and record["images"] >= 1
    assert all(cv2.imread(str(p)).shape == (256, 256, 3) for p in (tmp_path / "pack").glob("*.png"))
    result = _slice(tmp_path / "pack", tmp_path / "none", tmp_path / "out", tmp_path / "w")
    assert result["to"] == 4
    ck = _checkpoint(tmp_path / "out")
    assert ck["vsr"]["options"]["video_fraction"] == 0.5
    start = next(json.loads(line) for line in (tmp_path / "out" / "log.jsonl").read_text().splitlines()
                 if json.loads(line).get("event") == "start")
    assert "1 videos (12 usable frames)" in start["data"], start["data"]


def test_a_log_line_a_kill_left_half_written_is_skipped_not_a_traceback(tmp_path):
    """A slice killed at its limit leaves a torn last line; the window's returns (curve, rate) must still come back."""
    from scripts.gpu_train import steady_rate

    lines = [{"event": "start", "iteration": 0}] + [
        {"event": "train", "iteration": i, "loss": 0.1, "it_per_s": 10.0, "data_wait_s": 0.0, "wall_s": i / 10}
        for i in (10, 20, 30)]
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in lines) + '{"event": "train", "itera')
    assert steady_rate(log) == {"it_per_s": 10.0, "data_wait_share": 0.0}  # the two stretches after the first
