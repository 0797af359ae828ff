#!/usr/bin/env bash
# One training slice on a lent GPU (<= 9 minutes a command, 64 MiB carried each way), resuming exactly from the
# checkpoint the previous slice returned.  Details: scripts/gpu_train.py.
#
#   here, once:      python scripts/gpu_train.py pack --src ../shared/data/train/images --out .gpu/train
#                    (python scripts/gpu_carry.py --train checks the sizes and prints the device command)
#   on the device:   bash scripts/gpu_train.sh --out "$OUT" [--slice-s 480] [--iters 20000] [...]
#   here, after:     copy the returned files (latest.pth.partNN, latest.sha256, log.jsonl, curve.json) into
#                    .gpu/run/ and run the next slice the same way; a slice without .gpu/run starts afresh.
# Every option after the script's name goes to `gpu_train.py slice` (defaults: edvr-s-wide, batch 16, patch 32).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
exec "$PY" scripts/gpu_train.py slice --data "${VSR_TRAIN_DATA:-.gpu/train}" --carried "${VSR_TRAIN_CARRIED:-.gpu/run}" "$@"
