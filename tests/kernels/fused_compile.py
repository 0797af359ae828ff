"""The seconds it takes to compile the fused DCN's tiles for sm_90 (EDVR-M's DCN in fp16), through the stand-in
driver of ``tests/kernels/test_fused_dcn.py`` (Triton's real compiler and ptxas, no GPU), one by one as Triton's
autotuner would or side by side as ``vsr.kernels.cuda.fused_dcn`` does; each run in a fresh Triton cache.

    python -m tests.kernels.fused_compile serial|threads

Not part of the test suite (a minute of CPU): its figures are in docs/benchmarks.md with this command.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time


def main() -> None:
    how = sys.argv[1] if len(sys.argv) > 1 else "threads"
    if how not in ("serial", "threads"):
        sys.exit("usage: python -m tests.kernels.fused_compile serial|threads")
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="vsr-triton-")
    from triton.runtime.driver import driver

    import vsr.kernels.cuda.fused_dcn as fused
    from tests.kernels.test_fused_dcn import _hopper_driver, _kernel_args

    driver.set_active(_hopper_driver())
    args, consts = _kernel_args(540, 960)
    t0 = time.perf_counter()
    if how == "serial":
        fused._tuned().warmup(*args, grid=(1,), **consts)
    else:
        fused._compile_tiles(args, consts)
    tiles = len(fused._compiled().device_caches[0][0])
    print(f"{how}: {tiles} tiles in {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
