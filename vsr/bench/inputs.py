"""The LR frames every ``vsr bench`` case runs on: a real clip's first frames, or seeded random ones.

Every case gets the very same windows, so their times differ only by the backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vsr.errors import InputError
from vsr.files import shared_data

# The real clip used when none is named: Big Buck Bunny, 320x180 (the benchmark's default LR size), in the
# project's shared reference data (vsr.files.shared_data: $VSR_DATA, or beside a source checkout); where it is
# absent, the input is random.
DEFAULT_CLIP = Path("videos") / "vp9_320x180_30fps_10s_bbb.webm"


@dataclass(frozen=True)
class BenchInput:
    """``frames``: float32 ``(F, 3, H, W)`` in [0, 1]; window ``i`` is ``frames[i:i + T]``.  ``source``: what they
    are (a clip path and frame range, or ``random (seed S)``)."""

    frames: np.ndarray
    source: str

    def window(self, i: int, num_frame: int) -> np.ndarray:
        """Window ``i`` as the ``(1, T, 3, H, W)`` batch a backend takes."""
        return self.frames[i:i + num_frame][None]


def bench_input(source: str | Path | None, size: tuple[int, int], windows: int, num_frame: int,
                seed: int = 0) -> BenchInput:
    """Frames for ``windows`` windows of ``num_frame`` frames at ``size`` (H, W).

    ``source``: a video file or folder of frames (PNG, JPEG, ...), ``"random"``, or None (:data:`DEFAULT_CLIP`
    where it exists, else random).  A clip's frames are centre-cropped to ``size``, or mirrored out to it where
    they are smaller; a clip shorter than needed is played forwards and back.
    """
    count = windows + num_frame - 1
    _check_fits(count, size)
    if source is None:
        clip = shared_data() / DEFAULT_CLIP
        source = clip if clip.is_file() else "random"
    if str(source) == "random":
        rng = np.random.default_rng(seed)
        return BenchInput(rng.random((count, 3, *size), dtype=np.float32), f"random (seed {seed})")
    frames = _read_frames(Path(source), count)
    got = len(frames)
    while len(frames) < count:
        frames += frames[::-1]
    frames = np.stack([_fit(f, size) for f in frames[:count]])
    return BenchInput(np.ascontiguousarray(frames), f"{source} frames 0-{min(got, count) - 1}"
                      + (f" (played back and forth to {count})" if got < count else ""))


def _check_fits(count: int, size: tuple[int, int]) -> None:
    """The frames are held in memory (float32): more than half the machine's memory is one line, not a run that
    the kernel's OOM killer stops with the rest of the machine's work (``--frames 99999999999`` did)."""
    from vsr.machine import total_memory_mb

    need = count * 3 * size[0] * size[1] * 4
    machine = total_memory_mb()
    if machine is not None and need > machine * (1 << 20) / 2:
        raise InputError(f"{count} frames of {size[0]}x{size[1]} are {need / (1 << 30):.1f} GiB of input frames in "
                         f"memory, more than half of this machine's {machine / 1024:.1f} GiB: give fewer --frames or "
                         "a smaller --size")


def _read_frames(path: Path, count: int) -> list[np.ndarray]:
    from vsr.video import open_source

    if not path.exists():
        raise InputError(f"bench input {path} does not exist")
    source = open_source(path)
    try:
        frames = []
        for f in source.frames():
            frames.append(f.rgb)
            if len(frames) == count:
                break
    finally:
        source.close()
    if not frames:
        raise InputError(f"bench input {path} has no frames")
    return frames


def _fit(rgb: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """``(3, h, w)`` -> ``(3, H, W)``: centre crop where larger, mirror padding where smaller."""
    out = rgb
    for axis, want in ((1, size[0]), (2, size[1])):
        have = out.shape[axis]
        if have > want:
            start = (have - want) // 2
            out = out.take(range(start, start + want), axis=axis)
        elif have < want:
            pad = [(0, 0)] * 3
            pad[axis] = ((want - have) // 2, want - have - (want - have) // 2)
            out = np.pad(out, pad, mode="symmetric")
    return out.astype(np.float32, copy=False)
