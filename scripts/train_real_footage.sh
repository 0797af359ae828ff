#!/usr/bin/env bash
# Issue 16: fine-tune the bundled clean-trained default (EDVR-S) on clean and real-footage degradations mixed
# (--degrade mix: configs/degrade/mix.toml, 40% clean BI, 60% blur / random-kernel resize / noise / JPEG / x264),
# warm start, same public data as scripts/train_default.sh.  Re-running resumes from runs/degrade-mix-p16/latest.pth
# (--iters is the one option a resumed run may change: the session-3 run was scheduled for 400, resumed at 30
# with --iters 260 and at 60 with --iters 160 to end in time).  Validation adds city-x264 (Vid4 city through
# BI + x264 CRF 28); evaluate with scripts/eval_real_footage.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${VSR_DATA:-../shared/data}
exec vsr train --init "${INIT:-default}" --data "$DATA/train/images" "$DATA/train/videos" "$DATA/videos" \
  --exclude cockatoo --degrade mix --out runs/degrade-mix-p16 --iters "${ITERS:-160}" --batch-size 4 --patch 16 \
  --lr 3e-4 --warmup 10 --seed 3 --val calendar city city-x264 --val-every 50 --ckpt-every 10 --threads 2 "$@"
