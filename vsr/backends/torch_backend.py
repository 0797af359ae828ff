"""PyTorch eager backend (the reference; also the GPU path where torchvision's CUDA DCN exists)."""

from __future__ import annotations

import time

import numpy as np
import torch

from vsr.backends.base import ModelBackend
from vsr.backends.buckets import pad_to_bucket


class TorchBackend(ModelBackend):
    """``infer((N,T,3,H,W) float32) -> (N,3,4H,4W) float32`` with the PyTorch model."""

    name = "torch"
    scale = 4

    def __init__(self, model, config, device: str = "cpu", threads: int | None = None):
        super().__init__(config)
        self.model = model.to(device).eval()
        self.device = device
        if threads:
            torch.set_num_threads(threads)
        self._times = {"run": 0.0}

    @torch.inference_mode()
    def infer(self, x: np.ndarray) -> np.ndarray:
        h, w = x.shape[-2:]
        xp, _ = pad_to_bucket(np.asarray(x, np.float32), 4)
        t0 = time.perf_counter()
        y = self.model(torch.from_numpy(xp).to(self.device))
        out = y[:, :, : 4 * h, : 4 * w].float().cpu().numpy()
        self._times["run"] += time.perf_counter() - t0
        return out
