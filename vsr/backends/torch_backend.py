"""PyTorch eager backend (the reference; also the GPU path where torchvision's CUDA DCN exists)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from vsr.backends.base import FrameKeys, ModelBackend
from vsr.backends.buckets import BucketPolicy
from vsr.backends.features import FeatureSlots
from vsr.backends.registry import BackendKind, needs, register
from vsr.machine import usable_cores


@dataclass(frozen=True)
class TorchOptions:
    """PyTorch eager (the reference).  device: "cpu", "cuda", ... (None: CUDA when available); threads: torch's
    intra-op threads (None: torch's default); stream_features: in a run, each frame's features computed once
    (``EDVR.features``) and kept for the windows that share the frame."""

    device: str | None = None
    threads: int | None = None
    buckets: BucketPolicy | None = None
    stream_features: bool = True

    @property
    def on_gpu(self) -> bool:
        """Whether the model runs on a GPU: a ``cuda`` device named (None is decided when the backend opens)."""
        return (self.device or "").startswith("cuda")


class TorchBackend(ModelBackend):
    """``infer((N,T,3,H,W) float32) -> (N,3,4H,4W) float32`` with the PyTorch model.

    With ``stream_features``, ``infer_stream`` computes each (frame, tile)'s pyramid once per stream with the
    model's own :meth:`~vsr.model.edvr.EDVR.features` (``batch`` frames per call, padded with zero frames: one
    shape, so a frame's features do not depend on its neighbours in the call) and runs
    :meth:`~vsr.model.edvr.EDVR.from_features` on the windows.
    """

    name = "torch"
    scale = 4

    def __init__(self, model, config, options: TorchOptions = TorchOptions()):
        import torch

        super().__init__(config, options.buckets)
        self.options = options
        self.keeps_features = options.stream_features
        self.device = options.device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.model = model.to(self.device).eval()
        if options.threads or torch.get_num_threads() > usable_cores():  # torch's count ignores CPU quotas
            torch.set_num_threads(options.threads or usable_cores())
        self._times = {"run": 0.0}
        if self.keeps_features:
            self._times.update({"features": 0.0, "windows": 0.0})
        self.slots = FeatureSlots()
        self._store: list[list[torch.Tensor]] = [[], [], []]  # L1, L2, L3: one tensor per slot
        self._frames = 1  # frames per features call

    def prepare(self, height: int, width: int, batch: int, phase=None, planes=None) -> None:
        """Nothing to build: the model is ready once loaded; the features calls take ``batch`` frames."""
        self._frames = batch

    def infer(self, x: np.ndarray) -> np.ndarray:
        import torch

        x = self.check_input(x)
        h, w = x.shape[-2:]
        xp, _ = self.buckets.pad(x)
        t0 = time.perf_counter()
        with torch.inference_mode():
            y = self.model(torch.from_numpy(xp).to(self.device))
            out = y[:, :, : 4 * h, : 4 * w].float().cpu().numpy()
        self._times["run"] += time.perf_counter() - t0
        return out

    def infer_stream(self, x: np.ndarray, keys: FrameKeys) -> np.ndarray:
        import torch

        if not self.keeps_features:
            return self.infer(x)
        x = self.check_input(x)
        self.check_keys(x, keys)
        h, w = x.shape[-2:]
        xp, bucket = self.buckets.pad(x)
        call = self.slots.begin(keys, bucket)
        try:
            with torch.inference_mode():
                t0 = time.perf_counter()
                self._compute(xp, call.new)
                t1 = time.perf_counter()
                nbr = [torch.stack([kept[s] for s in call.slots.reshape(-1)]) for kept in self._store]
                centre = torch.from_numpy(np.ascontiguousarray(xp[:, self.model.center_frame_idx])).to(self.device)
                y = self.model.from_features(nbr, centre)
                out = y[:, :, : 4 * h, : 4 * w].float().cpu().numpy()
                t2 = time.perf_counter()
        except BaseException:
            self.slots.forget()
            raise
        finally:
            self.slots.end(keys)
        self._times["features"] += t1 - t0
        self._times["windows"] += t2 - t1
        self._times["run"] += t2 - t0
        return out

    def _compute(self, xp: np.ndarray, new: list[tuple[int, int, int]]) -> None:
        """``EDVR.features`` on the frames ``new`` names, ``batch`` per call; each pyramid into its slot."""
        import torch

        m = self._frames
        for kept in self._store:
            kept.extend([None] * (self.slots.size - len(kept)))
        for i in range(0, len(new), m):
            rows = new[i:i + m]
            frames = np.zeros((m,) + xp.shape[2:], np.float32)
            for r, (_, n, t) in enumerate(rows):
                frames[r] = xp[n, t]
            pyramid = self.model.features(torch.from_numpy(frames).to(self.device))
            for r, (slot, _, _) in enumerate(rows):
                for kept, level in zip(self._store, pyramid):
                    if kept[slot] is None or kept[slot].shape != level[r].shape:
                        kept[slot] = torch.empty_like(level[r])  # once per slot (and size)
                    kept[slot].copy_(level[r])


def _make(threads: int | None = None, stream_features: bool = True, **_precision) -> TorchOptions:
    return TorchOptions(threads=threads, stream_features=stream_features)


register(BackendKind("torch", "torch", None, TorchOptions, TorchBackend, _make, available=needs("torch")))
