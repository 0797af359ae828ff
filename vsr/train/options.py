"""The options of a training run, checked when they are made: a bad value raises
:class:`vsr.errors.InputError` with one line naming the option, the value and what it may be."""

from __future__ import annotations

import math
from dataclasses import MISSING, asdict, dataclass, fields

import torch

from vsr.backends.options import MAX_THREADS
from vsr.errors import InputError
from vsr.model.init import INIT_SCHEMES
from vsr.train.degrade import MODES as DEGRADE_MODES
from vsr.train.exclude import ALWAYS
from vsr.train.loss import LOSSES

AMP_MODES = ("auto", "bf16", "fp16", "off")
VAL_WEIGHTS = ("ema", "model")

# Options that may differ between a run and its resumption without breaking exactness.
RESUME_FREE = frozenset({"out", "iters", "val_every", "val_weights", "ckpt_every", "log_every", "threads",
                         "workers", "device", "init", "val"})


@dataclass(frozen=True)
class TrainOptions:
    """Every knob of a training run; stored in its checkpoints (a resumed run must use the same values)."""

    config: str | None
    data: tuple[str, ...]
    out: str
    iters: int
    init: str | None = None  # weights to start from: a path or a bundled name ("default", "real", "clean")
    batch_size: int = 8
    lr_patch: int = 32  # LR patch side; HR is 4x
    lr: float = 4e-4
    min_lr: float = 1e-6
    warmup: int = 100
    offset_lr_mult: float = 0.25  # DCN offset/mask convolutions learn slower (keeps offsets stable)
    betas: tuple[float, float] = (0.9, 0.99)
    grad_clip: float = 1.0  # max gradient norm; 0 = off
    loss: str = "charbonnier"  # a name in vsr.train.loss.LOSSES
    ema_decay: float = 0.999
    seed: int = 0
    video_fraction: float = 0.5  # share of windows from videos (the rest from still images)
    refresh_every: int = 500  # iterations between re-decodes of the video segment pool
    segments_per_video: int = 12
    holdout: float = 0.0  # last fraction of every video kept out of training, for validation
    # Vid4 sets and/or "holdout" (held-out video tails); None: calendar and city where the Vid4 set is at hand
    # (vsr.train.validate.data_root), else no validation -- a clone alone trains, and says so
    val: tuple[str, ...] | None = None
    val_weights: tuple[str, ...] = ("ema",)  # which weights to validate: "ema" and/or "model"
    val_every: int = 250  # 0 = no validation
    ckpt_every: int = 50
    log_every: int = 10
    threads: int = 0  # torch CPU threads; 0 = leave torch's default
    workers: int | None = None  # processes making batches ahead (vsr.train.stream); 0 = in the training process,
    # None = all cores but one
    amp: str = "auto"  # "auto" (bf16 or fp16 on CUDA, off on CPU), "bf16", "fp16", "off"
    device: str = "auto"
    exclude: tuple[str, ...] = ALWAYS  # never train on these paths (validation sequences)
    weight_init: str = "identity"  # from scratch: a name in vsr.model.init.INIT_SCHEMES
    qat: bool = False  # quantization-aware: convs run the deployed int8 arithmetic (vsr.quant.fake)
    degrade: str = "clean"  # LR of the training pairs: clean (BI), real or mix (vsr.train.degrade)
    degrade_config: str | None = None  # a TOML path replacing configs/degrade/<degrade>.toml
    compile: bool = False  # the training forward through torch.compile (GPU speed; the first step compiles)

    def __post_init__(self) -> None:
        for f in fields(self):
            _check(f.name, getattr(self, f.name))
        if not self.config and not self.init:
            raise InputError("give a model config (--config NAME) or weights to start from (--init)")
        if self.min_lr > self.lr:
            raise InputError(f"invalid training option min_lr={self.min_lr!r}: more than lr={self.lr!r}")
        if self.degrade_config and self.degrade == "clean":
            raise InputError("a degradation config needs --degrade real or mix (clean is the plain BI x1/4)")
        if "holdout" in (self.val or ()) and self.holdout == 0:
            raise InputError("invalid training option val=('holdout', ...): holdout is 0, no frames are held out")

    def to_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items()}

    def resume_conflicts(self, saved: dict) -> list[str]:
        """Names of the options that differ from ``saved`` (a checkpoint's) and would break an exact resume."""
        mine = self.to_dict()
        # an option newer than the checkpoint (e.g. qat) counts as its default, the behaviour it was written with
        defaults = {f.name: f.default for f in fields(self) if f.name not in saved and f.default is not MISSING}
        return [k for k in mine if k not in RESUME_FREE and saved.get(k, defaults.get(k)) != mine[k]]


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_real(v) -> bool:
    # finite: --lr inf trained to NaN weights without a word (nan was refused only as it fails every comparison)
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _strings(v) -> bool:
    return isinstance(v, tuple) and all(isinstance(s, str) for s in v)


def _device(v) -> bool:
    if not isinstance(v, str):
        return False
    if v == "auto":
        return True
    try:
        torch.device(v)
    except RuntimeError:
        return False
    return True


def _choice(choices) -> tuple:
    return (lambda v: v in choices), f"one of {', '.join(choices)}"


_POSITIVE_INT = (lambda v: _is_int(v) and v > 0), "an integer > 0"
# a billion iterations: half a year at 60 it/s (a mistyped --iters 1e23 showed an ETA of 4.6e19 hours)
MAX_ITERS = 10**9
_ITERS = (lambda v: _is_int(v) and 0 < v <= MAX_ITERS), f"an integer from 1 to {MAX_ITERS:,}"
_SEED = (lambda v: _is_int(v) and 0 <= v < 2**64), "an integer from 0 to 2**64 - 1 (torch's seed)"
_COUNT = (lambda v: _is_int(v) and v >= 0), "an integer >= 0"
_POSITIVE = (lambda v: _is_real(v) and v > 0), "a finite number > 0"
_NON_NEGATIVE = (lambda v: _is_real(v) and v >= 0), "a finite number >= 0"
_FRACTION = (lambda v: _is_real(v) and 0 <= v <= 1), "a number in [0, 1]"

# Option -> (test, what the value must be).
_RULES = {
    "config": ((lambda v: v is None or isinstance(v, str)), "a config name or path"),
    "data": (_strings, "a tuple of paths"),
    "out": ((lambda v: isinstance(v, str)), "a folder path"),
    "iters": _ITERS,
    "init": ((lambda v: v is None or isinstance(v, str)), "a weights path or a bundled name"),
    "batch_size": _POSITIVE_INT,
    "lr_patch": ((lambda v: _is_int(v) and v > 0 and v % 4 == 0), "a multiple of 4 (EDVR's pyramid), > 0"),
    "lr": _POSITIVE,
    "min_lr": _NON_NEGATIVE,
    "warmup": _COUNT,
    "offset_lr_mult": _NON_NEGATIVE,
    "betas": ((lambda v: isinstance(v, tuple) and len(v) == 2 and all(_is_real(b) and 0 <= b < 1 for b in v)),
              "two numbers in [0, 1)"),
    "grad_clip": _NON_NEGATIVE,
    "loss": _choice(tuple(LOSSES)),
    "ema_decay": _FRACTION,
    "seed": _SEED,
    "video_fraction": _FRACTION,
    "refresh_every": _POSITIVE_INT,
    "segments_per_video": _POSITIVE_INT,
    "holdout": ((lambda v: _is_real(v) and 0 <= v < 1), "a number in [0, 1)"),
    "val": ((lambda v: v is None or _strings(v)), "a tuple of validation set names"),
    "val_weights": ((lambda v: _strings(v) and len(v) > 0 and set(v) <= set(VAL_WEIGHTS)),
                    f"one or more of {', '.join(VAL_WEIGHTS)}"),
    "val_every": _COUNT,
    "ckpt_every": _POSITIVE_INT,
    "log_every": _POSITIVE_INT,
    "threads": ((lambda v: _is_int(v) and 0 <= v <= MAX_THREADS), f"an integer from 0 to {MAX_THREADS}"),
    "workers": ((lambda v: v is None or (_is_int(v) and 0 <= v <= MAX_THREADS)),
                f"an integer from 0 to {MAX_THREADS} (0: batches made in the training process)"),
    "amp": _choice(AMP_MODES),
    "device": (_device, "auto or a torch device (cpu, cuda, cuda:1 ...)"),
    "exclude": (_strings, "a tuple of path fragments"),
    "weight_init": _choice(tuple(INIT_SCHEMES)),
    "qat": ((lambda v: isinstance(v, bool)), "true or false"),
    "degrade": _choice(DEGRADE_MODES),
    "degrade_config": ((lambda v: v is None or isinstance(v, str)), "a TOML path"),
    "compile": ((lambda v: isinstance(v, bool)), "true or false"),
}


def _check(name: str, value) -> None:
    ok, must_be = _RULES[name]
    if not ok(value):
        raise InputError(f"invalid training option {name}={value!r}: must be {must_be}")
