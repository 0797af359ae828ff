#!/usr/bin/env bash
# A lent GPU window in one device call (<= 10 minutes): scripts/gpu_check.py first -- every figure, its JSON
# rewritten after each check, so a call cut short still returns what finished -- then a training slice with the
# time left (scripts/gpu_train.sh: the speed probe at batch 16, LR patch 32, then EDVR-S-wide resumed from the
# weights the repository carries).
#
#   here:        python scripts/gpu_carry.py --window     (packs .gpu/wheels, .gpu/data, .gpu/train within 64 MiB
#                                                          and prints the run call)
#   on the GPU:  bash scripts/gpu_window.sh                ($OUT: gpu_check.json; train/: the slice's files)
#   here, after: tar -xf FILES_AT/train/records.tar into a copy of FILES_AT/train, then
#                python scripts/gpu_train.py keep --returned THAT_COPY; a line per figure in docs/benchmarks.md's
#                GPU section, with the device's name
#
# CHECK_S and TRAIN_S (seconds) split the call (CHECKS: a subset of gpu_check's checks; SLICE_S: the slice's
# training time; TRAIN_EXTRA: more options of gpu_train.py slice, e.g. --probe-compile); the device returns at most 8 files, so gpu_check's log (its
# tracebacks are in the JSON too) and any folder a killed check left are removed before training starts, and the
# slice's records (probe, log, curve, sha256, slice.json) travel as one tar.
set -uo pipefail
cd "$(dirname "$0")/.."
CHECK_S=${CHECK_S:-420}
TRAIN_S=${TRAIN_S:-150}
OUT=${OUT:?OUT: the folder that comes back}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .gpu/wheels/*.whl \
  || { echo "gpu_window: the carried wheels did not install" >&2; exit 1; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader
timeout -k 10 "$CHECK_S" python3 scripts/gpu_check.py --out "$OUT" --data .gpu/data --budget-s $((CHECK_S - 45)) \
  ${CHECKS:+--checks "$CHECKS"}
echo "gpu_window: gpu_check exited $?"
rm -rf "$OUT"/e2e-* "$OUT"/upscale-* "$OUT"/gpu_check.log "$OUT"/.gpu_check.json.part
[ -d .gpu/train ] || { echo "gpu_window: no .gpu/train: no training slice"; exit 0; }
VSR_TRAIN_DATA=.gpu/train timeout -k 10 "$TRAIN_S" bash scripts/gpu_train.sh --out "$OUT/train" \
  --config edvr-s-wide --continue training/edvr-s-wide.pth --probe-s 30 --slice-s "${SLICE_S:-$((TRAIN_S - 80))}" \
  ${TRAIN_EXTRA:-}
echo "gpu_window: training exited $?"
# at most 8 files come back: the slice's small records in one tar beside its checkpoint parts
( cd "$OUT/train" 2>/dev/null && small=$(ls | grep -v '^latest\.pth\.part') && [ -n "$small" ] \
  && tar -cf records.tar $small && rm -f $small )
ls -la "$OUT" "$OUT/train" 2>/dev/null
