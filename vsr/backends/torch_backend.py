"""PyTorch eager backend (the reference; also the GPU path where torchvision's CUDA DCN exists)."""

from __future__ import annotations

import time

import numpy as np
import torch

from vsr.backends.base import ModelBackend
from vsr.backends.options import TorchOptions


class TorchBackend(ModelBackend):
    """``infer((N,T,3,H,W) float32) -> (N,3,4H,4W) float32`` with the PyTorch model."""

    name = "torch"
    scale = 4

    def __init__(self, model, config, options: TorchOptions = TorchOptions()):
        super().__init__(config, options.buckets)
        self.options = options
        self.device = options.device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.model = model.to(self.device).eval()
        if options.threads:
            torch.set_num_threads(options.threads)
        self._times = {"run": 0.0}

    def prepare(self, height: int, width: int, batch: int) -> None:
        """Nothing to build: the model is ready once loaded."""

    @torch.inference_mode()
    def infer(self, x: np.ndarray) -> np.ndarray:
        x = self.check_input(x)
        h, w = x.shape[-2:]
        xp, _ = self.buckets.pad(x)
        t0 = time.perf_counter()
        y = self.model(torch.from_numpy(xp).to(self.device))
        out = y[:, :, : 4 * h, : 4 * w].float().cpu().numpy()
        self._times["run"] += time.perf_counter() - t0
        return out
