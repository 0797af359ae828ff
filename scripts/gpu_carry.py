"""What a GPU session must carry (the device machine reaches no network; at most 64 MiB travel per call), packed
into ``.gpu/`` (git-ignored), and the device commands that use it.

    python scripts/gpu_carry.py [--check] [--train] [--window] [--shared ../shared/data]

``--check`` (scripts/gpu_check.py): ``.gpu/wheels`` -- the one wheel vsr needs that the GPU image lacks, PyAV
(cp312 manylinux, as installed here; torch, torchvision, cupy, numba, onnx, onnxruntime, onnxscript, opencv and
tqdm are on the image: /work/.library/device/KINDS.md) -- and ``.gpu/data``: real LR frames (Vid4 calendar, for
evaluation only), a short real clip and the 960x540 clip of the end-to-end check.

``--train`` (scripts/gpu_train.sh): ``.gpu/train``, the training videos and images packed by ``gpu_train.py pack``
into what is left of the 64 MiB once the repository and the largest checkpoint a slice carries back in are counted
(at most 40 MiB); no wheel (the device reads the videos with OpenCV).

``--window`` (scripts/gpu_window.sh, a whole lent window in one call): the two above in one call, the training
images cut to what fits beside the wheel and the inputs (at most 12 MiB).

Prints each call's size and its ``run`` arguments (carry, command).  Sizes are checked: a call over 64 MiB is
refused here, not on the device.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

LIMIT = 64 << 20
GPU = REPO / ".gpu"
WHEEL_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
                   "manylinux2014_x86_64", "manylinux1_x86_64")
CLIP = "videos/h264_aac_320x240_29.97fps_1.2s_realshort.mp4"
E2E_CLIP = "train/videos/sam2_bedroom_960x540.mp4"  # gpu_check's e2e: 540p -> 4K, 2.3 MiB
FRAMES = "sequences/vid4/calendar/lr"
# One window: 40 s of issue 31's speed probe, 360 s of training, the start and the checkpoint's parts around them.
TRAIN_COMMAND = ("export PYTHONPATH=$PWD PYTHONUNBUFFERED=1; df -h /dev/shm; nproc; "
                 "bash scripts/gpu_train.sh --out $OUT --config {config} --continue training/{config}.pth "
                 "--probe-s 40 --slice-s 360")
INSTALL = ("python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "
           ".gpu/wheels/*.whl && export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 || exit 1; ")


def tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def repo_bytes() -> int:
    """What travels with every call: tracked files and untracked ones git does not ignore."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                         capture_output=True, check=True).stdout
    return sum((REPO / f).stat().st_size for f in out.decode().split("\0") if f and (REPO / f).is_file())


def checkpoint_bytes(config: str) -> int:
    """A training checkpoint of ``config``: weights, their EMA and Adam's two moments (float32), plus 1 MiB."""
    import warnings

    from vsr.model.config import load_config
    from vsr.model.weights import build_model

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        params = sum(p.numel() for p in build_model(load_config(config)).parameters())
    return 4 * 4 * params + (1 << 20)


def train_budget(repo: int, checkpoint: int, limit: int = LIMIT, cap: int = 40 << 20) -> int:
    """Bytes of training images a slice may carry: the rest of ``limit`` after the repository, the checkpoint
    and 1 MiB for the log and the curve, at most ``cap``."""
    return max(0, min(cap, limit - repo - checkpoint - (1 << 20)))


def fetch_wheels(dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    if any(dest.glob("av-*.whl")):
        return
    platforms = [a for p in WHEEL_PLATFORMS for a in ("--platform", p)]
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version", "3.12", "--implementation", "cp", *platforms, "-d", str(dest),
                    f"av=={importlib.metadata.version('av')}"], check=True)


def copy_data(shared: Path, dest: Path) -> None:
    frames = dest / "frames"
    frames.mkdir(parents=True, exist_ok=True)
    for p in sorted((shared / FRAMES).glob("*.png")):
        shutil.copy(p, frames / p.name)
    shutil.copy(shared / CLIP, dest / "clip.mp4")
    shutil.copy(shared / E2E_CLIP, dest / "e2e.mp4")


def train_pack(shared: Path, budget: int) -> None:
    """``.gpu/train`` for ``budget`` bytes: training videos and images (``gpu_train.py pack``); a pack made before
    is kept when it was made for about this budget and holds videos, else made again (a ``--train`` pack is too
    large for a ``--window`` call, a ``--window`` pack too small for a ``--train`` one, and a pack of images alone
    predates the videos)."""
    import json

    from scripts.gpu_train import PACK_RECORD, pack

    out = GPU / "train"
    if out.exists():
        try:
            record = json.loads((out / PACK_RECORD).read_text())
        except (OSError, ValueError):
            record = {}
        if tree_bytes(out) <= budget and record.get("videos") and record.get("limit_mib", 0) >= 0.9 * budget / 2**20:
            return
        shutil.rmtree(out)
    print("packed", pack(shared / "train" / "images", out, budget / 2**20, videos=shared / "train" / "videos"))


def report(name: str, repo: int, carry: list[str], command: str, extra: int = 0) -> int:
    """Print a call's size and ``run`` arguments; 1 when it is over the limit.  ``extra``: bytes a later call
    carries beyond what is there now (a slice's checkpoint)."""
    size = repo + extra + sum(tree_bytes(REPO / c) for c in carry)
    print(f"\n{name}: {size / 2**20:.1f} MiB of {LIMIT >> 20} (repository {repo / 2**20:.1f} MiB, "
          f"to come {extra / 2**20:.1f} MiB)")
    print(f"  run(carry={carry}, command={command!r})")
    if size > LIMIT:
        print(f"gpu_carry: error: {name} would carry {size / 2**20:.1f} MiB, over {LIMIT >> 20}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="wheels and real inputs for scripts/gpu_check.py")
    p.add_argument("--train", action="store_true", help="training images for scripts/gpu_train.sh")
    p.add_argument("--window", action="store_true",
                   help="both in one call (scripts/gpu_window.sh): wheels, real inputs and a smaller image pack")
    p.add_argument("--shared", default=str(REPO.parent / "shared" / "data"), help="the shared data folder")
    p.add_argument("--config", default="edvr-s-wide", help="the model gpu_train.sh trains (checkpoint size)")
    args = p.parse_args(argv)
    shared, repo, rc = Path(args.shared), repo_bytes(), 0
    if args.check or not args.train:
        fetch_wheels(GPU / "wheels")
        copy_data(shared, GPU / "data")
        rc |= report("gpu_check", repo, [".gpu/wheels", ".gpu/data"],
                     INSTALL + "python3 scripts/gpu_check.py --out $OUT --data .gpu/data")
    if args.window:
        fetch_wheels(GPU / "wheels")
        copy_data(shared, GPU / "data")
        carry = [".gpu/wheels", ".gpu/data"]
        budget = min(12 << 20, LIMIT - repo - sum(tree_bytes(REPO / c) for c in carry) - (2 << 20))
        train_pack(shared, budget)
        return report("gpu_window", repo, [*carry, ".gpu/train"], "bash scripts/gpu_window.sh")
    if args.train:
        train_pack(shared, train_budget(repo, checkpoint_bytes(args.config)))
        rc |= report("gpu_train (a window's first slice; a later one carries .gpu/run too)", repo,
                     [".gpu/train", ".gpu/run"], TRAIN_COMMAND.format(config=args.config),
                     extra=0 if (GPU / "run").exists() else checkpoint_bytes(args.config))
    return rc


if __name__ == "__main__":
    sys.exit(main())
