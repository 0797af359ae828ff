"""Training checkpoints that resume exactly, in BasicSR's layout.

A checkpoint holds the model (``params``) and its EMA copy (``params_ema``) -- BasicSR's keys, so it loads
wherever EDVR weights do -- plus the optimiser and fp16 grad-scaler state, the torch RNG state (as a tensor),
the :class:`TrainState` (iteration, which is also the data position, see :mod:`vsr.train.data`; validation
history; best score) and the options.  Only tensors and plain containers, so ``torch.load(weights_only=True)``
reads it.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch import nn

from vsr.files import create_new


@dataclass
class TrainState:
    """What a run knows beyond its tensors: position, history, best validation."""

    iteration: int = 0
    best_psnr: float = -math.inf
    best_iteration: int = -1
    history: list = field(default_factory=list)
    wall_s: float = 0.0
    # losses of the steps since the last log line: a run resumed between two log lines logs the same mean as the
    # run it continues (it averaged only its own steps, a different loss curve)
    pending_losses: list = field(default_factory=list)


@dataclass
class Trainable:
    """The objects whose state a checkpoint holds."""

    model: nn.Module
    ema: nn.Module
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler


def _cpu_copy(module: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}


def make_checkpoint(parts: Trainable, state: TrainState, *, config: str, options: dict) -> dict:
    """The checkpoint of ``parts`` at ``state`` (config name and options under ``vsr``)."""
    return {
        "params": _cpu_copy(parts.model),
        "params_ema": _cpu_copy(parts.ema),
        "optimizer": parts.optimizer.state_dict(),
        "scaler": parts.scaler.state_dict(),
        "rng": {"torch": torch.get_rng_state()},
        "train": asdict(state),
        "vsr": {"config": config, "options": options},
    }


def restore(ck: dict, parts: Trainable) -> TrainState:
    """Load ``ck`` into ``parts`` and the torch RNG; returns the run's state at that point."""
    parts.model.load_state_dict(ck["params"])
    parts.ema.load_state_dict(ck["params_ema"])
    parts.optimizer.load_state_dict(ck["optimizer"])
    if "scaler" in ck:
        parts.scaler.load_state_dict(ck["scaler"])
    torch.set_rng_state(ck["rng"]["torch"])
    t = ck["train"]
    return TrainState(iteration=int(t["iteration"]), best_psnr=float(t["best_psnr"]),
                      best_iteration=int(t["best_iteration"]), history=list(t["history"]),
                      wall_s=float(t["wall_s"]), pending_losses=[float(v) for v in t.get("pending_losses", [])])


def save_checkpoint(ck: dict, path: Path) -> None:
    """Write ``ck`` to ``path`` atomically: a reader sees the old file or the new one, never half of one."""
    tmp = path.with_suffix(".tmp")
    try:
        with open(create_new(tmp), "wb") as f:  # (a link planted at the name is replaced, never written through)
            torch.save(ck, f)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
