#!/usr/bin/env bash
# The exact command that trained the bundled default weights (vsr/weights/default.pth, config edvr-s).
# Re-running it resumes from runs/edvr-s-default/latest.pth (exact resume); the log is runs/edvr-s-default/log.jsonl.
# The cockatoo clip is left out so that fine-tuning can be shown on footage the default never saw.
# Ship the best checkpoint afterwards with:  python -m vsr.train.ship runs/edvr-s-default/best.pth
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${VSR_DATA:-../shared/data}
exec vsr train --config edvr-s \
  --data "$DATA/train/images" "$DATA/train/videos" "$DATA/videos" \
  --out runs/edvr-s-default --iters "${ITERS:-560}" \
  --batch-size 4 --patch 16 --lr 5e-4 --warmup 10 --weight-init identity --offset-lr-mult 0.25 --grad-clip 1.0 --loss charbonnier \
  --exclude cockatoo \
  --ema-decay 0.999 --seed 0 --val calendar city --val-every 50 --ckpt-every 25 --threads 2 "$@"
