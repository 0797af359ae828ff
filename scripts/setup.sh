#!/usr/bin/env bash
# Create .venv (if missing) and install vsr with what its tests need.  Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
. .venv/bin/activate
# torch first, pinned: a bare 'torch' requirement with none installed would pull GBs of CUDA wheels;
# 2.13.0 resolves to the local CPU wheel on this project's machines.
python -m pip install -q --disable-pip-version-check "torch==2.13.0"
python -m pip install -q --disable-pip-version-check -e ".[test,jobs]"
# Triton, for the fused DCN's tests (its interpreter runs the GPU kernel on the CPU); the GPU image's version
python -m pip install -q --disable-pip-version-check "triton==3.6.0"
