#!/usr/bin/env bash
# The evaluation of issue 16 (docs/benchmarks-history.md, "Default weights for real footage") for one set of weights:
#   (a) Vid4 city GT -> MATLAB bicubic x1/4 -> x264 CRF 28 (recipe configs/degrade/eval-x264-crf28.toml)
#   (b) the same recipe on frames 0-15 of the cockatoo clip (a 512x288 crop on the bird and the cage; never trained on)
#   (c) clean Vid4 calendar with its official LR
# Usage: scripts/eval_real_footage.sh WEIGHTS OUT_DIR   (JSON results: OUT_DIR/{city-x264,cockatoo-x264,calendar}.json)
set -euo pipefail
cd "$(dirname "$0")/.."
W=$1; OUT=$2
DATA=${VSR_DATA:-../shared/data}
mkdir -p "$OUT"
COCKATOO=${COCKATOO_GT:-runs/eval/cockatoo-gt}
if [ ! -f "$COCKATOO/00000015.png" ]; then  # GT frames: decoded from the top (frame-exact), centre crop
  mkdir -p "$COCKATOO"
  python - "$DATA/videos/h264yuv444_mp3_1280x720_20fps_14s_cockatoo.mp4" "$COCKATOO" <<'PY'
import sys, av, cv2
src, out = sys.argv[1], sys.argv[2]
with av.open(src) as c:
    for i, f in enumerate(c.decode(video=0)):
        if i >= 16:
            break
        rgb = f.to_ndarray(format="rgb24")[160:448, 400:912]
        cv2.imwrite(f"{out}/{i:08d}.png", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
PY
fi
python -m vsr eval --gt "$DATA/sequences/vid4/city/gt" --degrade eval-x264-crf28 --weights "$W" --json > "$OUT/city-x264.json"
python -m vsr eval --gt "$COCKATOO" --degrade eval-x264-crf28 --weights "$W" --json > "$OUT/cockatoo-x264.json"
python -m vsr eval --gt "$DATA/sequences/vid4/calendar/gt" --lr "$DATA/sequences/vid4/calendar/lr" --weights "$W" \
  --json > "$OUT/calendar.json"
