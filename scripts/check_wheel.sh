#!/usr/bin/env bash
# The installed package works on its own: build the wheel, install it into a fresh venv outside the checkout
# (torch==2.13.0 first, pinned: an unpinned torch would pull GBs of CUDA packages), and from another folder
# run `vsr models` and a 1-frame `vsr upscale` of a real clip on the bundled default weights.  Checks that the
# configs and weights ship in the wheel, that the installed vsr (not the checkout) runs, and that its engine
# cache goes to the user cache.  Called by .ci/run; about 2 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
# the shared data's clip where it is beside the checkout, else the same file in the repository's own cut of it
clip="$repo/../shared/data/videos/h264_256x240_35fps_1s_noaudio.mp4"
[ -f "$clip" ] || clip="$repo/tests/fixtures/real/videos/h264_256x240_35fps_1s_noaudio.mp4"
work=$(mktemp -d "${TMPDIR:-/tmp}/vsr-wheel.XXXXXX")
trap 'rm -rf "$work"' EXIT

.venv/bin/python -m pip wheel -q --no-deps -w "$work/dist" . 2>&1 | grep -v '^WARNING: Location' || true
wheel=$(ls "$work"/dist/vsr-*.whl)
python3 -m venv "$work/venv"
# --no-compile: byte-compiling torch's thousands of files would double the install time
"$work/venv/bin/python" -m pip install -q --no-compile "torch==2.13.0" 2>&1 | grep -v '^WARNING: Location' || true
"$work/venv/bin/python" -m pip install -q --no-compile "$wheel" 2>&1 | grep -v '^WARNING: Location' || true

mkdir "$work/run"
cd "$work/run"
export XDG_CACHE_HOME="$work/cache"
unset VSR_CONFIG_DIR VSR_ENGINE_DIR VSR_WEIGHTS_DIR
where=$("$work/venv/bin/python" -c 'import vsr, vsr.files; print(vsr.__file__); print(vsr.files.config_dir())')
case "$where" in
  *"$repo"*) echo "check_wheel: the installed vsr reads from the checkout: $where" >&2; exit 1 ;;
esac
"$work/venv/bin/vsr" models > models.txt
grep -q "edvr-m " models.txt || { echo "check_wheel: vsr models lists no edvr-m config" >&2; cat models.txt >&2; exit 1; }
engines_before=$(find "$repo/engines" -type f 2>/dev/null | wc -l)
"$work/venv/bin/vsr" upscale "$clip" out.mkv --frames 0:1 --quiet
"$work/venv/bin/python" -c 'import av; c = av.open("out.mkv"); n = sum(1 for _ in c.decode(video=0)); assert n == 1, n'
test -d "$XDG_CACHE_HOME/vsr/engines/onnx" || { echo "check_wheel: no engine cache in \$XDG_CACHE_HOME/vsr" >&2; exit 1; }
test "$(find "$repo/engines" -type f 2>/dev/null | wc -l)" = "$engines_before" \
  || { echo "check_wheel: the installed vsr wrote into the checkout's engines/" >&2; exit 1; }
echo "check_wheel: ok ($(basename "$wheel"), configs at ${where##*$'\n'})"
