"""Side-by-side x4 of one real frame: bicubic | weights A | weights B ... (docs/degrade-compare.png).

    python scripts/degrade_compare.py OUT.png CLIP:FRAME:Y:X:H:W [CLIP:FRAME:Y:X:H:W ...] --weights default real

Each CLIP:FRAME:Y:X:H:W is one row: an LR crop (native pixels of the clip, decoded from the top) upscaled x4
by MATLAB bicubic and by each model (PyTorch, the window of 5 frames around FRAME, cropped the same way).
"""

from __future__ import annotations

import argparse

import av
import cv2
import numpy as np
import torch

from vsr.model.weights import load_model
from vsr.pipeline.windows import window_indices
from vsr.quality.evaluate import quantize
from vsr.quality.resize import bicubic_upscale_x4


def frames_of(path: str, last: int) -> list[np.ndarray]:
    out = []
    with av.open(path) as c:
        for i, f in enumerate(c.decode(video=0)):
            if i > last:
                break
            out.append(f.to_ndarray(format="rgb24"))
    return out


def row(spec: str, models: list) -> list[np.ndarray]:
    clip, frame, y, x, h, w = spec.rsplit(":", 5)
    frame, y, x, h, w = map(int, (frame, y, x, h, w))
    frames = frames_of(clip, frame + 2)
    n = len(frames)
    tiles = [bicubic_upscale_x4(frames[frame][y:y + h, x:x + w])]
    for model, cfg in models:
        win = np.stack([frames[j][y:y + h, x:x + w] for j in window_indices(frame, n, cfg.num_frame, cfg.padding)])
        t = torch.from_numpy(np.ascontiguousarray(win.transpose(0, 3, 1, 2), dtype=np.float32) / 255.0)[None]
        with torch.no_grad():
            tiles.append(quantize(model(t).numpy())[0])
    return tiles


def label(img: np.ndarray, text: str) -> np.ndarray:
    img = img.copy()
    cv2.rectangle(img, (0, 0), (12 + 11 * len(text), 26), (0, 0, 0), -1)
    cv2.putText(img, text, (6, 19), cv2.FONT_HERSHEY_SIMPLEX, 0.55, (255, 255, 255), 1, cv2.LINE_AA)
    return img


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("rows", nargs="+", help="CLIP:FRAME:Y:X:H:W")
    p.add_argument("--weights", nargs="+", default=["default", "real"])
    p.add_argument("--names", nargs="+", help="panel titles of the weights (default: the weights)")
    a = p.parse_args()
    torch.set_num_threads(2)
    models = [load_model(w) for w in a.weights]
    names = ["bicubic", *(a.names or a.weights)]
    grid = []
    for spec in a.rows:
        tiles = [label(t, n) for t, n in zip(row(spec, models), names)]
        sep = np.full((tiles[0].shape[0], 4, 3), 255, np.uint8)
        grid.append(np.concatenate([x for t in tiles for x in (t, sep)][:-1], axis=1))
    cv2.imwrite(a.out, cv2.cvtColor(np.concatenate(grid, axis=0), cv2.COLOR_RGB2BGR))


if __name__ == "__main__":
    main()
