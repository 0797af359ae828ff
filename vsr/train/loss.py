"""Training losses: ``loss(pred, target) -> scalar``, both ``(N, 3, H, W)``.  Chosen by name from :data:`LOSSES`."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F


def charbonnier(pred: torch.Tensor, target: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Mean of ``sqrt((pred - target)^2 + eps^2)``: L1 with a smooth minimum."""
    return torch.sqrt((pred - target) ** 2 + eps * eps).mean()


LOSSES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "charbonnier": charbonnier,
    "l1": F.l1_loss,
}
