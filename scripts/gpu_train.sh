#!/usr/bin/env bash
# One training slice on a lent GPU (<= 10 minutes a command, 64 MiB carried each way): EDVR-S-wide, batch 32,
# LR patch 48, bf16, batches made by worker processes; resumes exactly from the checkpoint a previous slice of the
# same window returned, or starts a window from the weights the repository carries.  Details: scripts/gpu_train.py.
#
#   here, once:      python scripts/gpu_carry.py --train     (packs .gpu/train, checks sizes, prints the run call)
#   on the device:   bash scripts/gpu_train.sh --out "$OUT" --continue training/edvr-s-wide.pth [--probe-s 40]
#                    [--slice-s 360] [...]   (--probe-s: first the speed probe at batch 16, LR patch 32; its
#                    probe.json and probe-log.jsonl land in --out, so they come back with the slice's files)
#   here, after:     python scripts/gpu_train.py keep --returned FILES_AT   (the window's weights and record into
#                    training/; commit them), python scripts/gpu_train.py gate (ship only on its "ship").
#                    A further slice of the same window: copy the returned files into .gpu/run and run again.
# Every option after the script's name goes to `gpu_train.py slice`.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
exec "$PY" scripts/gpu_train.py slice --data "${VSR_TRAIN_DATA:-.gpu/train}" --carried "${VSR_TRAIN_CARRIED:-.gpu/run}" "$@"
