"""The training loop: Charbonnier loss, Adam with warm-up + cosine decay, gradient clipping, EMA weights.

Checkpoints resume exactly: they hold the model, its EMA copy, the optimiser (and fp16 grad scaler) state,
the iteration (which is also the data position, see :mod:`vsr.train.data`), the torch RNG state (as a tensor),
the options and the validation history -- only tensors and plain containers, so ``torch.load(weights_only=True)``
reads them.  They use BasicSR's keys (``params``, ``params_ema``), so they load wherever EDVR weights do.

Files in the run folder: ``latest.pth`` (resume point), ``best.pth`` (best validation PSNR, same layout),
``log.jsonl`` (one JSON object per logged training step or validation).
"""

from __future__ import annotations

import copy
import json
import logging
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from vsr.errors import InputError
from vsr.model.config import ModelConfig, load_config
from vsr.model.weights import build_model, extract_state_dict, load_state, read_checkpoint, resolve_config

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainOptions:
    """Every knob of a training run; stored in its checkpoints (a resumed run must use the same values)."""

    config: str
    data: tuple[str, ...]
    out: str
    iters: int
    init: str | None = None  # weights to start from: a path or "default"
    batch_size: int = 8
    lr_patch: int = 32  # LR patch side; HR is 4x
    lr: float = 4e-4
    min_lr: float = 1e-6
    warmup: int = 100
    offset_lr_mult: float = 0.25  # DCN offset/mask convolutions learn slower (keeps offsets stable)
    betas: tuple[float, float] = (0.9, 0.99)
    grad_clip: float = 1.0  # max gradient norm; 0 = off
    loss: str = "charbonnier"  # or "l1"
    ema_decay: float = 0.999
    seed: int = 0
    video_fraction: float = 0.5  # share of windows from videos (the rest from still images)
    refresh_every: int = 500  # iterations between re-decodes of the video segment pool
    segments_per_video: int = 12
    holdout: float = 0.0  # last fraction of every video kept out of training, for validation
    val: tuple[str, ...] = ("calendar", "city")  # Vid4 sets; "holdout" for held-out video tails
    val_weights: tuple[str, ...] = ("ema",)  # which weights to validate: "ema" and/or "model"
    val_every: int = 250
    ckpt_every: int = 50
    log_every: int = 10
    threads: int = 0  # torch CPU threads; 0 = leave torch's default
    amp: str = "auto"  # "auto" (bf16 or fp16 on CUDA, off on CPU), "bf16", "fp16", "off"
    device: str = "auto"
    exclude: tuple[str, ...] = ("vid4",)  # never train on these paths (validation sequences)
    weight_init: str = "identity"  # from scratch: "identity", "he" (see :func:`identity_init`, :func:`he_init`) or "torch"

    def to_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items()}


# Options that may differ between a run and its resumption without breaking exactness.
_RESUME_FREE = {"out", "iters", "val_every", "val_weights", "ckpt_every", "log_every", "threads", "device", "init", "val"}


def lr_at(it: int, o: TrainOptions) -> float:
    """Learning rate of iteration ``it`` (0-based): linear warm-up, then cosine decay to ``min_lr``."""
    if it < o.warmup:
        return o.lr * (it + 1) / o.warmup
    span = max(o.iters - o.warmup, 1)
    p = min((it - o.warmup) / span, 1.0)
    return o.min_lr + 0.5 * (o.lr - o.min_lr) * (1 + math.cos(math.pi * p))


def charbonnier(pred: torch.Tensor, target: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return torch.sqrt((pred - target) ** 2 + eps * eps).mean()


LAST_SCALE = 0.1


@torch.no_grad()
def he_init(model: torch.nn.Module) -> None:
    """Variance-preserving init so that a short run learns from the first iterations.

    With PyTorch's default init the signal shrinks by about 3x per layer; through EDVR's ~15 layers the
    residual output starts near zero, gradients carry almost nothing, and training sits at the bilinear
    baseline for hundreds of iterations.  Here: He-normal (leaky ReLU 0.1) for every convolution, residual
    branches scaled by 0.1 (BasicSR's ``default_init_weights``), the DCN weights doubled (the sigmoid mask
    starts at 0.5), offset convolutions zero (samples start on the regular grid) and ``conv_last`` zero
    (the output starts as the bilinear upsampling; the first steps learn a read-out of rich features).
    """
    from vsr.model.dcn import DCNv2Pack
    from vsr.model.edvr import ResidualBlockNoBN

    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Conv2d):
            if "conv_offset" in name:
                torch.nn.init.zeros_(mod.weight)
            else:
                torch.nn.init.kaiming_normal_(mod.weight, a=0.1, mode="fan_in", nonlinearity="leaky_relu")
                if name == "conv_last":
                    mod.weight.mul_(LAST_SCALE)
            if mod.bias is not None:
                torch.nn.init.zeros_(mod.bias)
        elif isinstance(mod, DCNv2Pack):
            torch.nn.init.kaiming_normal_(mod.weight, a=0.1, mode="fan_in", nonlinearity="leaky_relu")
            mod.weight.mul_(2.0)
            torch.nn.init.zeros_(mod.bias)
    for mod in model.modules():
        if isinstance(mod, ResidualBlockNoBN):
            mod.conv1.weight.mul_(0.1)
            mod.conv2.weight.mul_(0.1)


@torch.no_grad()
def identity_init(model: torch.nn.Module, noise: float = 0.1) -> None:
    """Start EDVR as a pass-through of the centre frame, plus small random weights to break symmetry.

    Every convolution on the main path copies its input channels to the same output channels (Dirac
    kernels; the DCN doubled, its sigmoid mask starts at 0.5), the fusion picks the centre frame's
    channels, and the two PixelShuffle convolutions repeat each channel on all four sub-pixels (ICNR).
    So the input's colours reach ``conv_last`` (nearest-neighbour upsampled) through near-linear paths and
    gradients reach every layer from the first step -- a deep plain network at random init instead sits at
    the bilinear baseline for hundreds of iterations.  ``noise`` scales a He-normal perturbation.
    Exact pass-through (``noise=0``) holds for configurations without TSA (its attention is not made
    neutral; its convolutions get the same Dirac kernels).
    """
    from vsr.model.dcn import DCNv2Pack
    from vsr.model.edvr import ResidualBlockNoBN

    def he(w: torch.Tensor, scale: float) -> torch.Tensor:
        return torch.nn.init.kaiming_normal_(torch.empty_like(w), a=0.1, nonlinearity="leaky_relu") * scale

    def dirac(w: torch.Tensor, groups_in: int = 1, pick: int = 0, repeat: int = 1) -> None:
        co, ci, kh, kw = w.shape
        n = min(co // repeat, ci // groups_in)
        for c in range(n):
            for r in range(repeat):
                w[c * repeat + r, pick * (ci // groups_in) + c, kh // 2, kw // 2] += 1.0

    centre = model.center_frame_idx
    for name, mod in model.named_modules():
        if isinstance(mod, DCNv2Pack):
            mod.weight.copy_(he(mod.weight, noise))
            dirac(mod.weight)
            mod.weight.mul_(2.0)
            mod.bias.zero_()
        elif isinstance(mod, torch.nn.Conv2d):
            if mod.bias is not None:
                mod.bias.zero_()
            if "conv_offset" in name:
                mod.weight.zero_()
                continue
            mod.weight.copy_(he(mod.weight, noise))
            if name.startswith("feature_extraction") or name.startswith("reconstruction"):
                continue  # residual branches: small random (the block is ~identity)
            if name == "fusion":
                dirac(mod.weight, groups_in=model.num_frame, pick=centre)
            elif name in ("upconv1", "upconv2"):
                dirac(mod.weight, repeat=4)
            elif name == "conv_last":
                continue
            else:
                dirac(mod.weight)


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def _amp_dtype(amp: str, device: torch.device) -> torch.dtype | None:
    if device.type != "cuda" or amp == "off":
        return None
    if amp == "auto":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return {"bf16": torch.bfloat16, "fp16": torch.float16}[amp]


def _save(obj: dict, path: Path) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


@dataclass
class TrainState:
    """What a run knows beyond its tensors: position, history, best validation."""

    iteration: int = 0
    best_psnr: float = -math.inf
    best_iteration: int = -1
    history: list = field(default_factory=list)
    wall_s: float = 0.0


class Trainer:
    """One training run in ``options.out``; resumes from ``latest.pth`` there when it exists."""

    def __init__(self, options: TrainOptions):
        from vsr.train.data import FramePool, PairSampler, find_sources
        from vsr.train.validate import holdout_sets, vid4_sets

        self.o = o = options
        self.dir = Path(o.out)
        self.dir.mkdir(parents=True, exist_ok=True)
        if o.threads:
            torch.set_num_threads(o.threads)
        self.device = _device(o.device)
        self.amp = _amp_dtype(o.amp, self.device)
        self.cfg: ModelConfig = self._config()
        torch.manual_seed(o.seed)
        self.model = build_model(self.cfg).to(self.device)
        if o.init:
            self._load_init(o.init)
        elif o.weight_init == "he":
            he_init(self.model)
        elif o.weight_init == "identity":
            identity_init(self.model)
        self.ema = copy.deepcopy(self.model).eval()
        for p in self.ema.parameters():
            p.requires_grad_(False)
        offset = [p for n, p in self.model.named_parameters() if "conv_offset" in n]
        rest = [p for n, p in self.model.named_parameters() if "conv_offset" not in n]
        self.opt = torch.optim.Adam([{"params": rest, "lr_mult": 1.0},
                                     {"params": offset, "lr_mult": o.offset_lr_mult}], lr=o.lr, betas=o.betas)
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.amp == torch.float16)
        self.state = TrainState()

        self.sources = find_sources(list(o.data), holdout=o.holdout, exclude=o.exclude)
        self.pool = FramePool(self.sources, segments_per_video=o.segments_per_video,
                              segment_length=2 * self.cfg.num_frame - 1, region=max(256, 4 * o.lr_patch))
        self.sampler = PairSampler(self.pool, num_frame=self.cfg.num_frame, lr_patch=o.lr_patch,
                                   batch_size=o.batch_size, seed=o.seed, video_fraction=o.video_fraction,
                                   refresh_every=o.refresh_every)
        vid4 = [v for v in o.val if v != "holdout"]
        self.val_sets = vid4_sets(vid4) if vid4 else []
        if "holdout" in o.val:
            self.val_sets += holdout_sets(self.sources.videos, self.dir / "holdout")
        self._val_cache: dict = {}
        self.resumed = self._maybe_resume()

    # -- setup ---------------------------------------------------------------------------------------------
    def _config(self) -> ModelConfig:
        o = self.o
        if o.config:
            return load_config(o.config)
        if o.init:
            cfg, _ = resolve_config(o.init, None)
            return cfg
        raise InputError("give a model config (--config NAME) or weights to start from (--init)")

    def _load_init(self, init: str) -> None:
        from vsr.model.weights import DEFAULT_WEIGHTS

        path = DEFAULT_WEIGHTS if init == "default" else Path(init)
        if init == "default" and not path.is_file():
            raise InputError("no bundled default weights in this build to start from (--init default)")
        sd, _ = extract_state_dict(read_checkpoint(path))
        load_state(self.model, sd, self.cfg, str(path))

    def _maybe_resume(self) -> bool:
        path = self.dir / "latest.pth"
        if not path.is_file():
            return False
        ck = read_checkpoint(path)
        saved = ck.get("vsr", {}).get("options", {})
        mine = self.o.to_dict()
        diff = [k for k in mine if k not in _RESUME_FREE and saved.get(k) != mine[k]]
        if diff:
            raise InputError(f"{path} was written with other options ({', '.join(diff)}); "
                             "use another --out folder or the same options")
        self.model.load_state_dict(ck["params"])
        self.ema.load_state_dict(ck["params_ema"])
        self.opt.load_state_dict(ck["optimizer"])
        if "scaler" in ck:
            self.scaler.load_state_dict(ck["scaler"])
        torch.set_rng_state(ck["rng"]["torch"])
        t = ck["train"]
        self.state = TrainState(iteration=int(t["iteration"]), best_psnr=float(t["best_psnr"]),
                                best_iteration=int(t["best_iteration"]), history=list(t["history"]),
                                wall_s=float(t["wall_s"]))
        log.info("resumed %s at iteration %d", path, self.state.iteration)
        return True

    # -- checkpoints ---------------------------------------------------------------------------------------
    def checkpoint(self) -> dict:
        s = self.state
        return {
            "params": {k: v.detach().cpu().clone() for k, v in self.model.state_dict().items()},
            "params_ema": {k: v.detach().cpu().clone() for k, v in self.ema.state_dict().items()},
            "optimizer": self.opt.state_dict(),
            "scaler": self.scaler.state_dict(),
            "rng": {"torch": torch.get_rng_state()},
            "train": {"iteration": s.iteration, "best_psnr": s.best_psnr, "best_iteration": s.best_iteration,
                      "history": s.history, "wall_s": s.wall_s},
            "vsr": {"config": self.cfg.name, "options": self.o.to_dict()},
        }

    # -- one step ------------------------------------------------------------------------------------------
    def step(self) -> float:
        o, it = self.o, self.state.iteration
        lr_np, hr_np = self.sampler.batch(it)
        lr = torch.from_numpy(lr_np).to(self.device, non_blocking=True)
        hr = torch.from_numpy(hr_np).to(self.device, non_blocking=True)
        base = lr_at(it, o)
        for g in self.opt.param_groups:
            g["lr"] = base * g["lr_mult"]
        self.model.train()
        with torch.autocast(self.device.type, dtype=self.amp or torch.float32, enabled=self.amp is not None):
            out = self.model(lr)
        out = out.float()
        loss = charbonnier(out, hr) if o.loss == "charbonnier" else torch.nn.functional.l1_loss(out, hr)
        self.opt.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        if o.grad_clip > 0:
            self.scaler.unscale_(self.opt)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), o.grad_clip)
        self.scaler.step(self.opt)
        self.scaler.update()
        self._update_ema(it)
        self.state.iteration = it + 1
        return float(loss.detach())

    @torch.no_grad()
    def _update_ema(self, it: int) -> None:
        # Short runs: the warm-up form of the decay lets the EMA follow the model early on.
        d = min(self.o.ema_decay, (1 + it) / (10 + it))
        ema_p = list(self.ema.parameters())
        cur_p = list(self.model.parameters())
        torch._foreach_lerp_(ema_p, cur_p, 1.0 - d)

    # -- validation ----------------------------------------------------------------------------------------
    def validate(self) -> dict:
        from vsr.train.validate import validate

        res = {}
        for tag in self.o.val_weights:
            m = self.ema if tag == "ema" else self.model
            res[tag] = validate(m, self.val_sets, padding=self.cfg.padding, device=self.device,
                                cache=self._val_cache)
        return res

    @staticmethod
    def score(sets: dict) -> float:
        """The single validation figure: mean Y-PSNR gain over bicubic across the sets."""
        return float(np.mean([v["psnr_y"] - v["bicubic_y"] for v in sets.values()]))

    def _record_validation(self) -> dict:
        res = self.validate()
        it = self.state.iteration
        entry = {"iteration": it, "wall_s": round(self.state.wall_s, 1), "val": res}
        self.state.history.append(entry)
        best_tag = max(res, key=lambda t: self.score(res[t]))
        gain = self.score(res[best_tag])
        if gain > self.state.best_psnr:
            self.state.best_psnr, self.state.best_iteration = gain, it
            ck = self.checkpoint()
            ck["vsr"]["best_of"] = best_tag  # which weights scored best: "ema" or "model"
            _save(ck, self.dir / "best.pth")
        self._log({"event": "val", **entry, "best_gain_db": self.state.best_psnr,
                   "best_iteration": self.state.best_iteration})
        return res

    def _log(self, rec: dict) -> None:
        with open(self.dir / "log.jsonl", "a") as f:
            f.write(json.dumps(rec) + "\n")

    # -- the loop ------------------------------------------------------------------------------------------
    def run(self, *, stop_after: int | None = None, progress: bool = True) -> TrainState:
        """Train up to ``options.iters`` (or ``stop_after`` more iterations); checkpoint on the way out."""
        from tqdm import tqdm

        o = self.o
        start = self.state.iteration
        end = o.iters if stop_after is None else min(o.iters, start + stop_after)
        if not self.resumed:
            self._log({"event": "start", "options": o.to_dict(), "config": self.cfg.name,
                       "data": self.sources.describe(), "params": sum(p.numel() for p in self.model.parameters())})
        else:
            self._log({"event": "resume", "iteration": start})
        bar = tqdm(total=o.iters, initial=start, disable=not progress, dynamic_ncols=True, unit="it",
                   mininterval=5.0)
        t_last, losses = time.time(), []
        if start == 0 and self.val_sets and o.val_every:
            self._record_validation()  # the starting point: random init (near bilinear) or the --init weights
        try:
            while self.state.iteration < end:
                t0 = time.time()
                loss = self.step()
                self.state.wall_s += time.time() - t0
                losses.append(loss)
                it = self.state.iteration
                bar.update(1)
                bar.set_postfix(loss=f"{loss:.4f}", lr=f"{lr_at(it - 1, o):.2e}", refresh=False)
                if it % o.log_every == 0:
                    now = time.time()
                    self._log({"event": "train", "iteration": it, "loss": float(np.mean(losses)),
                               "lr": lr_at(it - 1, o), "it_per_s": len(losses) / max(now - t_last, 1e-9),
                               "wall_s": round(self.state.wall_s, 1)})
                    t_last, losses = now, []
                if self.val_sets and o.val_every and (it % o.val_every == 0 or it == o.iters):
                    t0 = time.time()
                    res = self._record_validation()
                    self.state.wall_s += time.time() - t0
                    bar.write(f"iter {it}: " + "; ".join(
                        f"{tag} " + ", ".join(f"{k} {v['psnr_y']:.2f} dB (bicubic {v['bicubic_y']:.2f})"
                                              for k, v in sets.items()) for tag, sets in res.items()))
                if it % o.ckpt_every == 0 or it == end:
                    _save(self.checkpoint(), self.dir / "latest.pth")
        finally:
            # An interrupted step is not saved: the last checkpoint stays an exact resume point.
            bar.close()
        return self.state


def train(options: TrainOptions, *, stop_after: int | None = None, progress: bool = True) -> TrainState:
    """Run (or resume) the training described by ``options``; see :class:`Trainer`."""
    return Trainer(options).run(stop_after=stop_after, progress=progress)
