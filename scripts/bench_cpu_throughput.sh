#!/usr/bin/env bash
# Issue 26's figures, paired and interleaved (vsr bench), on EDVR-M at LR 180x320 with random weights:
#   1. streaming features: the split plan and torch with each frame's features computed once vs per window;
#   2. int8 end to end: fp32 and int8 split plans per frame, and as whole `vsr upscale` processes (warm-up apart);
#   3. only where the CPU has VNNI/AMX: the same int8 runs with 7-bit weights forced (VSR_INT8_ISA=avx2), so
#      8-bit against 7-bit is measured on the same machine.
# Each step writes its reports, the CPU flags and /proc/loadavg before and after into OUT/<step>/.
#
#   bash scripts/bench_cpu_throughput.sh OUT [FRAMES]        (FRAMES: timed frames per case, default 10)
#
# Run it on a quiet machine: every figure is a median of pairs, but a loaded machine widens them a lot.
set -euo pipefail
out=${1:?usage: bash scripts/bench_cpu_throughput.sh OUT [FRAMES]}
frames=${2:-10}
vsr=(python -m vsr bench --config edvr-m --weights random --size 180x320 --input random --frames "$frames")
mkdir -p "$out"

facts() {  # $1: folder
    mkdir -p "$1"
    grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E -x 'avx2|fma|avx512f|avx512_vnni|avx_vnni|amx_int8' \
        | tr '\n' ' ' > "$1/cpu_flags.txt" || true
    python -c 'from vsr.quant.isa import int8_isa; print(int8_isa())' > "$1/int8_isa.txt"
}

run() {  # $1: step name, then vsr bench arguments
    local step=$1; shift
    facts "$out/$step"
    cat /proc/loadavg > "$out/$step/loadavg_before.txt"
    "${vsr[@]}" "$@" --out "$out/$step/reports" --overwrite | tee "$out/$step/table.txt"
    cat /proc/loadavg > "$out/$step/loadavg_after.txt"
}

run stream --cases ort-split-fp32,ort-split-fp32-nostream,torch-eager-fp32,torch-eager-fp32-nostream \
    --baseline ort-split-fp32-nostream
run int8 --cases ort-split-fp32,ort-split-int8,ort-split-int8-nostream,upscale-ort-split-fp32,upscale-ort-split-int8 \
    --baseline ort-split-fp32 --runs 3
if [ "$(python -c 'from vsr.quant.isa import int8_isa; print(int8_isa())')" != avx2 ]; then
    VSR_INT8_ISA=avx2 run int8-7bit --cases ort-split-fp32,ort-split-int8,upscale-ort-split-int8 \
        --baseline ort-split-fp32 --runs 3
fi
