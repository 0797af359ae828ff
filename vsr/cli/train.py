"""`vsr train`: train or fine-tune an EDVR configuration (resumes from ``OUT/latest.pth`` when present)."""

from __future__ import annotations

from pathlib import Path


def add_parser(sub) -> None:
    from vsr.model.init import INIT_SCHEMES
    from vsr.train.loss import LOSSES
    from vsr.train.options import AMP_MODES
    from vsr.train.options import TrainOptions as T

    p = sub.add_parser("train", help="train or fine-tune EDVR on folders of images and videos",
                       description="Train (or fine-tune with --init) an EDVR config on images and videos. "
                                   "Re-running with the same --out resumes exactly from OUT/latest.pth.")
    p.add_argument("--config", default=None, help="model config name (configs/NAME.toml) or path; "
                                                  "default: the one stored in --init weights")
    p.add_argument("--data", nargs="+", required=True, help="image/video files or folders (searched recursively)")
    p.add_argument("--out", default=None, help="run folder for checkpoints and log: a new or empty folder in an "
                                                "existing one, or a run to resume (default: runs/NAME, NAME being "
                                                "--config's name, else --init's: runs/default for --init default)")
    p.add_argument("--iters", type=int, required=True,
                   help="total iterations (sets the cosine schedule), 1 to 10**9; required")
    p.add_argument("--init", default=None, help="start from these weights: a file or 'default'")
    p.add_argument("--batch-size", type=int, default=T.batch_size, help=f"windows per step (default {T.batch_size})")
    p.add_argument("--patch", type=int, default=T.lr_patch,
                   help=f"LR patch side (HR is 4x); multiple of 4 (default {T.lr_patch})")
    p.add_argument("--lr", type=float, default=T.lr, help=f"peak learning rate (Adam; default {T.lr})")
    p.add_argument("--min-lr", type=float, default=T.min_lr, help=f"the cosine schedule's end (default {T.min_lr})")
    p.add_argument("--warmup", type=int, default=T.warmup, help=f"warm-up iterations (default {T.warmup})")
    p.add_argument("--offset-lr-mult", type=float, default=T.offset_lr_mult,
                   help=f"--lr's factor for the DCN offset convolutions (default {T.offset_lr_mult})")
    p.add_argument("--grad-clip", type=float, default=T.grad_clip,
                   help=f"max gradient norm (0: off; default {T.grad_clip})")
    # Names are checked by TrainOptions, so that a bad one is a one-line error like any other bad option.
    p.add_argument("--loss", default=T.loss, help=f"{' | '.join(LOSSES)} (default {T.loss})")
    p.add_argument("--ema-decay", type=float, default=T.ema_decay,
                   help=f"decay of the weights' moving average (default {T.ema_decay})")
    p.add_argument("--seed", type=int, default=T.seed,
                   help=f"seed of the run's random draws (default {T.seed})")
    p.add_argument("--weight-init", default=T.weight_init,
                   help=f"initialisation when training from scratch: {' | '.join(INIT_SCHEMES)} "
                        f"(default {T.weight_init}; see vsr.model.init)")
    p.add_argument("--video-fraction", type=float, default=T.video_fraction,
                   help="share of training windows taken from videos (rest: still images with synthetic motion; "
                        f"default {T.video_fraction})")
    p.add_argument("--exclude", nargs="*", default=[],
                   help="never train on these: fragments of a file's path (case-insensitive: cockatoo, b.mp4) or "
                        "files and folders by any path to them (../data/x.mp4, an absolute path); default: Vid4 "
                        "alone, which is always excluded")
    p.add_argument("--holdout", type=float, default=T.holdout,
                   help="fraction of each video's last frames kept out of training (validated with --val holdout; "
                        "default 0: none)")
    p.add_argument("--val", nargs="*", default=None,
                   help="validation sets: calendar, city (Vid4) and/or holdout; none: no validation (default: "
                        "calendar and city where the Vid4 set is at hand, see VSR_DATA in docs/install.md; "
                        "else none, said in one line)")
    p.add_argument("--val-every", type=int, default=T.val_every, metavar="N",
                   help=f"validate every N iterations and at the last (default {T.val_every}; 0: never)")
    p.add_argument("--ckpt-every", type=int, default=T.ckpt_every, metavar="N",
                   help=f"write a checkpoint every N iterations (default {T.ckpt_every})")
    p.add_argument("--threads", type=int, default=T.threads, help="torch CPU threads (0: torch default)")
    p.add_argument("--workers", type=int, default=T.workers, metavar="N",
                   help="processes that make the batches ahead of the training step (default: all cores but one; "
                        "0: made in the training process)")
    p.add_argument("--amp", default=T.amp, help=f"{' | '.join(AMP_MODES)} (default {T.amp})")
    p.add_argument("--device", default=T.device,
                   help="auto (default: cuda where torch sees a GPU, else cpu), cpu, cuda, cuda:1 ...")
    p.add_argument("--qat", action="store_true",
                   help="quantization-aware training: convs run the arithmetic of this CPU's int8 plans (fake "
                        "quantization, straight-through gradients; VSR_INT8_ISA=avx2 for an AVX2 plan's 7-bit "
                        "weights); writes OUT/qat.json beside the checkpoints")
    p.add_argument("--degrade", default=T.degrade,
                   help="LR of the training pairs: clean (MATLAB bicubic x1/4; the default), real (blur, noise, JPEG, "
                        "x264; configs/degrade/real.toml) or mix (some clean, some real; configs/degrade/mix.toml)")
    p.add_argument("--degrade-config", default=None, metavar="PATH",
                   help="a TOML file of degradation settings instead of configs/degrade/<--degrade>.toml")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (the log file still fills)")
    p.set_defaults(func=run)


def train_options(args):
    """The :class:`vsr.train.TrainOptions` that the parsed flags ask for (checked when made)."""
    from vsr.train import TrainOptions

    from vsr.errors import InputError, printable

    name = args.config or (Path(args.init).stem if args.init else "run")
    val = None if args.val is None else tuple(v for v in args.val if v != "none")
    if val and len(val) < len(args.val):  # (it validated on the others: 'none' was dropped silently)
        raise InputError(f"--val none means no validation: give it alone, not with "
                         f"{', '.join(printable(v) for v in val)}")
    out = str(Path("runs") / Path(name).stem) if args.out is None else args.out
    return TrainOptions(
        config=args.config, data=tuple(args.data), out=out,
        iters=args.iters, init=args.init, batch_size=args.batch_size, lr_patch=args.patch, lr=args.lr,
        min_lr=args.min_lr, warmup=args.warmup, offset_lr_mult=args.offset_lr_mult, grad_clip=args.grad_clip,
        loss=args.loss, ema_decay=args.ema_decay, seed=args.seed, weight_init=args.weight_init,
        video_fraction=args.video_fraction, holdout=args.holdout, val=val,
        val_every=args.val_every, ckpt_every=args.ckpt_every, threads=args.threads, workers=args.workers, amp=args.amp,
        device=args.device, qat=args.qat, degrade=args.degrade, degrade_config=args.degrade_config,
        exclude=tuple(dict.fromkeys((*TrainOptions.exclude, *args.exclude))))


def run(args) -> int:
    import os

    from vsr.errors import InputError, printable
    from vsr.train import Trainer

    # The run folder is made, never the folders above a given --out (a typo would land a run anywhere), as vsr
    # upscale's output folder; the default runs/NAME makes runs/ (--help says so).
    if args.out == "":  # (an unset DIR in --out "$DIR" trained into runs/NAME, a folder the user never named)
        raise InputError("--out is empty: give the run folder's name (or leave --out out for runs/NAME)")
    parent = Path(args.out).parent if args.out is not None else None
    if parent is not None and not os.path.lexists(parent):
        raise InputError(f"--out {args.out}: the folder {parent} does not exist (vsr train makes the run folder, "
                         "not the folders above it)")
    trainer = Trainer(train_options(args))
    where = f"resuming at iteration {trainer.state.iteration}" if trainer.resumed else "starting"
    # names the user gave (a file name may hold a newline or an escape sequence): shown, never sent
    print(f"vsr train: {printable(trainer.cfg.name)}, {trainer.sources.describe()}; {where}; "
          f"run folder {printable(trainer.dir)}")
    if trainer.val_note:
        print(f"vsr train: {printable(trainer.val_note)}")
    state = trainer.run(progress=not args.no_progress)
    best = (f"best validation gain over bicubic {state.best_psnr:+.2f} dB at iteration {state.best_iteration}"
            if state.best_iteration >= 0 else "no validation")
    print(f"vsr train: stopped at iteration {state.iteration}; {best}; checkpoints in {printable(trainer.dir)}")
    return 0
