#!/usr/bin/env bash
# The exact commands that trained the bundled default weights (vsr/weights/default.pth, config edvr-s), in
# three stages, each starting from the previous one's latest.pth.  Re-running a stage resumes it from its own
# runs/<stage>/latest.pth (exact resume); logs are runs/<stage>/log.jsonl.  STAGE=1|2|3 picks one (default 3,
# which needs the earlier stages' checkpoints).
# The cockatoo clip is left out so that fine-tuning can be shown on footage the default never saw.
# Ship the best checkpoint afterwards with:  python -m vsr.train.ship runs/edvr-s-p3/best.pth --overwrite
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p runs  # vsr train makes its run folder, not the folders above it
DATA=${VSR_DATA:-../shared/data}
COMMON=(--config edvr-s --data "$DATA/train/images" "$DATA/train/videos" "$DATA/videos" --exclude cockatoo
        --offset-lr-mult 0.25 --grad-clip 1.0 --loss charbonnier --ema-decay 0.999 --val calendar city --threads 2)
case "${STAGE:-3}" in
  1)  # session 1: from scratch, 560 iterations of batch 4, LR patch 16 (run with --iters 400 to 175, resumed at 560)
      exec vsr train "${COMMON[@]}" --out runs/edvr-s-default --iters 560 --batch-size 4 --patch 16 --lr 5e-4 \
        --warmup 10 --weight-init identity --seed 0 --val-every 50 --ckpt-every 25 "$@" ;;
  2)  # session 1: warm restart, LR patch 24; stopped after 100 of the 1200 scheduled iterations (latest.pth at 100)
      exec vsr train "${COMMON[@]}" --init runs/edvr-s-default/latest.pth --out runs/edvr-s-default-p2 --iters 1200 \
        --batch-size 4 --patch 24 --lr 4e-4 --warmup 20 --seed 1 --val-every 100 --ckpt-every 50 "$@" ;;
  3)  # session 2: batch 8, LR patch 24; scheduled for 4000, resumed exactly at 2000 with --iters 3500 to end in time
      exec vsr train "${COMMON[@]}" --init runs/edvr-s-default-p2/latest.pth --out runs/edvr-s-p3 --iters "${ITERS:-3500}" \
        --batch-size 8 --patch 24 --lr 4e-4 --warmup 20 --seed 2 --val-every 200 --ckpt-every 50 "$@" ;;
esac
