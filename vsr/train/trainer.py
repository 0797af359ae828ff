"""The training loop: a loss from :mod:`vsr.train.loss`, Adam with warm-up + cosine decay, gradient clipping,
EMA weights; validation and checkpoints on the way (:mod:`vsr.train.checkpoint`).

On a GPU the steps queue without waiting for each other: the losses stay on the device and are read (one wait
for the device) every ``log_every`` steps, and Adam is torch's fused one (:func:`adam_options`).

Files in the run folder: ``latest.pth`` (resume point), ``best.pth`` (best validation score, same layout),
``log.jsonl`` (one JSON object per logged training step or validation; a resume cuts it back to the checkpoint's
iteration, :mod:`vsr.train.resume`).
"""

from __future__ import annotations

import copy
import inspect
import json
import logging
import math
import os
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from vsr.errors import InputError
from vsr.files import file_in_the_way, torch_cache_dir, write_new
from vsr.leftovers import remove_unnumbered
from vsr.machine import usable_cores
from vsr.model.config import ModelConfig, load_config
from vsr.model.init import init_weights, offset_convs
from vsr.model.weights import (build_model, bundled_path, extract_state_dict, load_state, read_checkpoint,
                               resolve_config)
from vsr.outfiles import check_writable
from vsr.quant.fake import prepare_qat, qat_parameters
from vsr.report.progress import progress_bar
from vsr.train.checkpoint import Trainable, TrainState, make_checkpoint, restore, save_checkpoint
from vsr.train.data import UNIT, FramePool, PairSampler, find_sources
from vsr.train.degrade import load_degrade
from vsr.train.loss import LOSSES
from vsr.train.options import TrainOptions
from vsr.train.resume import check_data_stamps, cut_log, data_conflicts, sources_digest, sources_stamps
from vsr.train.stream import BatchStream, default_workers
from vsr.train.validate import default_sets, holdout_sets, validate, vid4_sets

log = logging.getLogger(__name__)


def lr_at(it: int, o: TrainOptions) -> float:
    """Learning rate of iteration ``it`` (0-based): linear warm-up, then cosine decay to ``min_lr``."""
    if it < o.warmup:
        return o.lr * (it + 1) / o.warmup
    span = max(o.iters - o.warmup, 1)
    p = min((it - o.warmup) / span, 1.0)
    return o.min_lr + 0.5 * (o.lr - o.min_lr) * (1 + math.cos(math.pi * p))


def _device(name: str) -> torch.device:
    """``--device``: auto (a GPU where torch sees one), or a torch device that is here (one line where not: a CUDA
    device on a CPU build of torch raised its own traceback at the first tensor)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise InputError(f"--device {name}: torch sees no GPU here (torch {torch.__version__}); --device cpu "
                             "trains on the CPU")
        if device.index is not None and device.index >= count:
            raise InputError(f"--device {name}: no GPU {device.index} (torch sees {count})")
    return device


def _amp_dtype(amp: str, device: torch.device) -> torch.dtype | None:
    if device.type != "cuda" or amp == "off":
        return None
    if amp == "auto":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return {"bf16": torch.bfloat16, "fp16": torch.float16}[amp]


def adam_options(device: torch.device) -> dict:
    """Adam's implementation for parameters on ``device``: on CUDA the fused one (one kernel for every parameter's
    update, where torch has it); elsewhere torch's default, which the CPU's exact-resume tests pin.  A resumed run
    keeps what its checkpoint's optimiser used (``load_state_dict`` restores it)."""
    if device.type == "cuda" and "fused" in inspect.signature(torch.optim.Adam).parameters:
        return {"fused": True}
    return {}


def score(sets: dict) -> float:
    """The single validation figure: mean Y-PSNR gain over bicubic across the sets."""
    return float(np.mean([v["psnr_y"] - v["bicubic_y"] for v in sets.values()]))


def _check_run_folder(path: Path) -> None:
    """A one-line :class:`InputError` where the run folder ``--out`` cannot be made (before any data is read)."""
    if path.is_symlink() and not path.exists():  # ("is a file" sent the user looking for one)
        raise InputError(f"--out {path} is a symbolic link to nothing: give a folder's name, or make the folder it "
                         "points to")
    if os.path.lexists(path) and not path.is_dir():
        raise InputError(f"--out {path} is a file: vsr train writes a folder there (checkpoints, its log); give a "
                         "folder's name")
    blocker = file_in_the_way(path.parent)
    if blocker is not None:
        raise InputError(f"--out {path} cannot be made: {blocker} is a file, not a folder")
    check_writable(path, "--out")  # the probe vsr's other outputs use: a run that cannot save stops before it trains
    others = _not_a_run_folder(path)
    if others:
        shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        raise InputError(f"--out {path} holds other files ({shown}): vsr train writes a run into a new or empty "
                         "folder, or resumes one of its own (latest.pth, log.jsonl); give another --out")
    for name in ("log.jsonl", "holdout"):  # appended to, written into: where a planted link points never is
        if (path / name).is_symlink():
            raise InputError(f"--out {path}: its {name} is a symbolic link, and vsr train writes its run's files in "
                             "the run folder itself, never where a link points; remove the link or give another --out")


# What a run folder holds (see the module's doc): a folder of nothing else is one to resume, or a run stopped before
# its first log line (the holdout frames made, nothing else yet).  The temporaries of vsr.train.checkpoint,
# _write_json and vsr.train.resume.cut_log count too: a kill can leave them.
RUN_FILES = frozenset(("latest.pth", "best.pth", "log.jsonl", "qat.json", "holdout", "latest.tmp", "best.tmp",
                       ".qat.json.part", ".log.jsonl.part"))


def _not_a_run_folder(path: Path) -> list[str]:
    """The entries of an existing ``path`` that make it no run folder of vsr train's (none where it is one, is
    empty or is not there): a folder holding ``latest.pth`` or ``log.jsonl`` is a run (resumed, or refused on other
    options), whatever else the user keeps beside them; any other folder must hold only what a run writes."""
    try:
        names = sorted(os.listdir(path))
    except FileNotFoundError:
        return []
    if "latest.pth" in names or "log.jsonl" in names:
        return []
    return [n for n in names if n not in RUN_FILES]


class Trainer:
    """One training run in ``options.out``; resumes from ``latest.pth`` there when it exists.  ``val_note``: the
    line saying the run validates on nothing, where it asked for no sets and the default ones are not at hand."""

    def __init__(self, options: TrainOptions):
        self.o = o = options
        self.dir = Path(o.out)
        _check_run_folder(self.dir)
        self.cfg: ModelConfig = load_config(o.config) if o.config else resolve_config(o.init, None)[0]
        self.degradation = load_degrade(o.degrade_config or o.degrade)
        self.sources = find_sources(list(o.data), holdout=o.holdout, exclude=o.exclude)
        self.data_files = sources_digest(self.sources)  # (a resume compares the files, not how --data spells them)
        self.data_stamps = sources_stamps(self.sources)  # (and their sizes and times: the same files, edited)
        val, self.val_note = (o.val, None) if o.val is not None else default_sets()
        vid4 = [v for v in val if v != "holdout"]
        self.val_sets = vid4_sets(vid4) if vid4 else []
        if o.threads or torch.get_num_threads() > usable_cores():  # torch's count ignores a cgroup's CPU quota
            torch.set_num_threads(o.threads or usable_cores())
        self.device = _device(o.device)
        self.amp = _amp_dtype(o.amp, self.device)
        self.workers = default_workers() if o.workers is None else o.workers
        self._unit = torch.tensor(UNIT, device=self.device)
        torch.manual_seed(o.seed)
        self.model = build_model(self.cfg).to(self.device)
        if o.init:
            self._load_init(o.init)
        else:
            init_weights(self.model, o.weight_init)
        if o.qat:
            prepare_qat(self.model)  # before the EMA copy: validation then scores the int8 arithmetic too
        self.ema = copy.deepcopy(self.model).eval()
        for p in self.ema.parameters():
            p.requires_grad_(False)
        self.opt = self._optimizer()
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.amp == torch.float16)
        self.parts = Trainable(self.model, self.ema, self.opt, self.scaler)
        self.state = TrainState()
        if self.device.type == "cuda":  # cuDNN times its algorithms for the run's one shape once, keeps the fastest
            torch.backends.cudnn.benchmark = True
        # the training forward: the model itself, or compiled (kernels fused, launches cut: a small batch is
        # launch-bound on a GPU); checkpoints, the EMA and validation use the model's own parameters either way
        if o.compile:
            torch_cache_dir()  # torch.compile's dynamo makes it
        self.forward = torch.compile(self.model) if o.compile else self.model

        # Segments big and long enough for a degradation's [context] too, or every window would be a still image.
        ctx = self.degradation.context
        self.pool = FramePool(self.sources, segments_per_video=o.segments_per_video,
                              segment_length=max(2 * self.cfg.num_frame - 1, ctx.frames),
                              region=max(256, 4 * o.lr_patch, 4 * ctx.lr_size))
        self.sampler = PairSampler(self.pool, num_frame=self.cfg.num_frame, lr_patch=o.lr_patch,
                                   batch_size=o.batch_size, seed=o.seed, video_fraction=o.video_fraction,
                                   refresh_every=o.refresh_every, degradation=self.degradation)
        self.sampler.check()  # data that can make no window: one line now, not after the run folder is made
        self.dir.mkdir(parents=True, exist_ok=True)
        # a checkpoint a kill cut (vsr.train.checkpoint's name holds no pid): by age alone, as vsr.leftovers says
        remove_unnumbered(self.dir, r"(?:latest|best)\.tmp")
        if "holdout" in val:
            self.val_sets += holdout_sets(self.sources.videos, self.dir / "holdout")
        self._val_cache: dict = {}
        self.resumed = self._maybe_resume()

    # -- setup ---------------------------------------------------------------------------------------------
    def _load_init(self, init: str) -> None:
        path = bundled_path(init)
        sd, _ = extract_state_dict(read_checkpoint(path))
        load_state(self.model, sd, self.cfg, str(path))

    def _optimizer(self) -> torch.optim.Adam:
        """Adam with two parameter groups: the DCN offset convolutions learn ``offset_lr_mult`` slower."""
        offset_ids = {id(p) for conv in offset_convs(self.model) for p in conv.parameters()}
        offset = [p for p in self.model.parameters() if id(p) in offset_ids]
        rest = [p for p in self.model.parameters() if id(p) not in offset_ids]
        return torch.optim.Adam([{"params": rest, "lr_mult": 1.0},
                                 {"params": offset, "lr_mult": self.o.offset_lr_mult}],
                                lr=self.o.lr, betas=self.o.betas, **adam_options(self.device))

    def _maybe_resume(self) -> bool:
        path = self.dir / "latest.pth"
        if not path.is_file():
            return False
        ck = read_checkpoint(path)
        saved = ck.get("vsr", {})
        diff = data_conflicts(self.o.resume_conflicts(saved.get("options", {})), saved, self.sources)
        if diff:
            raise InputError(f"{path} was written with other options ({', '.join(diff)}); "
                             "use another --out folder or the same options")
        check_data_stamps(path, saved, self.sources, self.data_stamps)
        self.state = restore(ck, self.parts)
        log.info("resumed %s at iteration %d", path, self.state.iteration)
        return True

    def checkpoint(self) -> dict:
        """The run's checkpoint now (see :mod:`vsr.train.checkpoint`)."""
        ck = make_checkpoint(self.parts, self.state, config=self.cfg.name, options=self.o.to_dict())
        ck["vsr"]["data_files"] = self.data_files
        ck["vsr"]["data_stamps"] = self.data_stamps
        return ck

    # -- one step ------------------------------------------------------------------------------------------
    def step(self, lr_u8: torch.Tensor, hr_u8: torch.Tensor) -> torch.Tensor:
        """One optimiser step on the batch of the current iteration (uint8 tensors, see :mod:`vsr.train.stream`);
        returns its loss, a 0-d tensor on the device (reading it waits for the step)."""
        o, it = self.o, self.state.iteration
        # to [0, 1] on the device, by the table the numpy batches use (vsr.train.data.UNIT): the same numbers
        lr = self._unit[lr_u8.to(self.device, non_blocking=True).long()]
        hr = self._unit[hr_u8.to(self.device, non_blocking=True).long()]
        base = lr_at(it, o)
        for g in self.opt.param_groups:
            g["lr"] = base * g["lr_mult"]
        self.model.train()
        with torch.autocast(self.device.type, dtype=self.amp or torch.float32, enabled=self.amp is not None):
            out = self.forward(lr)
        loss = LOSSES[o.loss](out.float(), hr)
        self.opt.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        if o.grad_clip > 0:
            self.scaler.unscale_(self.opt)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), o.grad_clip)
        self.scaler.step(self.opt)
        self.scaler.update()
        self._update_ema(it)
        self.state.iteration = it + 1
        return loss.detach()

    @torch.no_grad()
    def _update_ema(self, it: int) -> None:
        # The warm-up form of the decay lets the EMA follow the model in short runs.
        d = min(self.o.ema_decay, (1 + it) / (10 + it))
        torch._foreach_lerp_(list(self.ema.parameters()), list(self.model.parameters()), 1.0 - d)

    # -- validation ----------------------------------------------------------------------------------------
    def validate(self) -> dict:
        """``{weights tag: {set name: {"psnr_y", "bicubic_y"}}}`` for each of ``options.val_weights``."""
        return {tag: validate(self.ema if tag == "ema" else self.model, self.val_sets, padding=self.cfg.padding,
                              device=self.device, cache=self._val_cache)
                for tag in self.o.val_weights}

    def _record_validation(self) -> dict:
        res = self.validate()
        it = self.state.iteration
        entry = {"iteration": it, "wall_s": round(self.state.wall_s, 1), "val": res}
        self.state.history.append(entry)
        best_tag = max(res, key=lambda t: score(res[t]))
        gain = score(res[best_tag])
        if gain > self.state.best_psnr:
            self.state.best_psnr, self.state.best_iteration = gain, it
            ck = self.checkpoint()
            ck["vsr"]["best_of"] = best_tag  # which weights scored best: "ema" or "model"
            save_checkpoint(ck, self.dir / "best.pth")
        self._log({"event": "val", **entry, "best_gain_db": self.state.best_psnr,
                   "best_iteration": self.state.best_iteration})
        return res

    def _log(self, rec: dict) -> None:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC  # (never through a link)
        with open(os.open(self.dir / "log.jsonl", flags, 0o666), "a") as f:
            f.write(json.dumps(rec) + "\n")

    # -- the loop ------------------------------------------------------------------------------------------
    def run(self, *, stop_after: int | None = None, progress: bool = True,
            deadline: float | None = None) -> TrainState:
        """Train up to ``options.iters`` (or ``stop_after`` more iterations, or until ``time.time()`` passes
        ``deadline``: a time slice); checkpoint on the way out.

        An interrupted step is not saved: the last checkpoint stays an exact resume point.
        """
        o = self.o
        start = self.state.iteration
        end = o.iters if stop_after is None else min(o.iters, start + stop_after)
        if self.resumed:  # the lines of the iterations past the checkpoint cut: this run logs them again
            cut_log(self.dir / "log.jsonl", start)
            self._log({"event": "resume", "iteration": start, "workers": self.workers})
        else:
            self._log({"event": "start", "options": o.to_dict(), "config": self.cfg.name, "workers": self.workers,
                       "data": self.sources.describe(), "degradation": asdict(self.degradation),
                       "params": sum(p.numel() for p in self.model.parameters())})
        validating = bool(self.val_sets and o.val_every)
        if start == 0 and validating:
            self._record_validation()  # the starting point: the initialised or the --init weights
        # the stretch's losses so far, the checkpoint's before this process's (the same float32 values)
        losses = [torch.tensor(v, device=self.device) for v in self.state.pending_losses]
        t_last, waited, steps = time.time(), 0.0, 0
        with (BatchStream(self.sampler, start, end, workers=self.workers,
                          pin_memory=self.device.type == "cuda") as batches,
              progress_bar(total=o.iters, initial=start, disable=not progress, desc="train", unit="it",
                           mininterval=5.0) as bar):
            # the batch workers the run kept (the start line says those asked for): fewer where /dev/shm is small
            self._log({"event": "batch_workers", "iteration": start, "asked": batches.asked,
                       "kept": batches.workers, "prefetch": batches.prefetch if batches.workers else 0,
                       "why": batches.why})
            while self.state.iteration < end and not (deadline is not None and time.time() >= deadline):
                t0 = time.time()
                losses.append(self.step(*next(batches)))
                steps += 1
                it = self.state.iteration
                # the last iteration too (an --iters that is no multiple of log_every: its last steps went unlogged,
                # all of them in a run shorter than log_every), and only the run's last: a resumed run logs as one
                logging = it % o.log_every == 0 or it == o.iters
                if logging:  # the only wait for the device between checkpoints: inside the time
                    loss = float(torch.stack(losses).double().mean())
                self.state.wall_s += time.time() - t0
                bar.update(1)
                if logging:
                    bar.set_postfix(loss=f"{loss:.4f}", lr=f"{lr_at(it - 1, o):.2e}", refresh=False)
                    now = time.time()
                    # data_wait_s: of this stretch's time, how long the steps waited for their batches
                    self._log({"event": "train", "iteration": it, "loss": loss,
                               "lr": lr_at(it - 1, o), "it_per_s": steps / max(now - t_last, 1e-9),
                               "data_wait_s": round(batches.wait_s - waited, 3),
                               "wall_s": round(self.state.wall_s, 1)})
                    t_last, waited, losses, steps = now, batches.wait_s, [], 0
                if validating and (it % o.val_every == 0 or it == o.iters):
                    t0 = time.time()
                    res = self._record_validation()
                    self.state.wall_s += time.time() - t0
                    t_last += time.time() - t0  # the next stretch's it_per_s: training steps, not validation
                    bar.write(f"iter {it}: {_validation_line(res)}")
                if it % o.ckpt_every == 0 or it == end or (deadline is not None and time.time() >= deadline):
                    self.state.pending_losses = [float(v) for v in losses]
                    save_checkpoint(self.checkpoint(), self.dir / "latest.pth")
                    if o.qat:
                        _write_json(self.dir / "qat.json", qat_parameters(self.ema))
        return self.state


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.part")
    write_new(tmp, (json.dumps(data, indent=1) + "\n").encode())
    os.replace(tmp, path)


def _validation_line(res: dict) -> str:
    return "; ".join(f"{tag} " + ", ".join(f"{k} {v['psnr_y']:.2f} dB (bicubic {v['bicubic_y']:.2f})"
                                           for k, v in sets.items()) for tag, sets in res.items())


def train(options: TrainOptions, *, stop_after: int | None = None, progress: bool = True) -> TrainState:
    """Run (or resume) the training described by ``options``; see :class:`Trainer`."""
    return Trainer(options).run(stop_after=stop_after, progress=progress)
