#!/usr/bin/env bash
# Issue 11: quantization-aware fine-tune of the bundled default (EDVR-S) in the deployed int8 arithmetic
# (vsr train --qat: the int8 plan of this CPU -- 8-bit per-channel weights with VNNI/AMX, 7-bit without
# (VSR_INT8_ISA=avx2 trains for an AVX2 plan) -- u8 activations at the run-time range rule, each conv's sum rounded
# before its bias and after, straight-through gradients), same public data and clean degradation as scripts/train_default.sh, a short low-lr run.
# Writes runs/edvr-s-qat/{best,latest}.pth + qat.json; evaluate with
#   vsr eval --gt ../shared/data/sequences/vid4/calendar/gt --lr ../shared/data/sequences/vid4/calendar/lr \
#            --weights runs/edvr-s-qat/latest.pth --precision int8      (and --precision fp32, --int8-scales static)
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p runs  # vsr train makes its run folder, not the folders above it
DATA=${VSR_DATA:-../shared/data}
exec vsr train --qat --init "${INIT:-default}" --data "$DATA/train/images" "$DATA/train/videos" "$DATA/videos" \
  --exclude cockatoo --out runs/edvr-s-qat --iters "${ITERS:-400}" --batch-size 8 --patch 24 --lr 2e-5 --min-lr 2e-6 --ema-decay 0.99 \
  --warmup 0 --seed 4 --val calendar --val-every 100 --ckpt-every 50 --threads 2 "$@"
