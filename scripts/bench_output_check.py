"""What the checks of issue 32, item 2 cost: ``check_model_output`` (is every value finite and within range?)
beside ``encode_planes`` (the colour conversion the post stage does to the same frame anyway), alternated on one
720x1280 HR frame, medians of 50 pairs after 10 warm-up ones; and the sha256 of the bundled default weights,
read once per load (median of 20).

    flock /work/bench.lock python scripts/bench_output_check.py
"""

from __future__ import annotations

import time

import numpy as np

from vsr.files import sha256_file
from vsr.model.weights import DEFAULT_WEIGHTS
from vsr.pipeline.checks import check_model_output
from vsr.video.colour import ColourSpec
from vsr.video.planes import encode_planes


def main() -> None:
    y = np.random.default_rng(0).random((3, 720, 1280), dtype=np.float32)
    spec = ColourSpec.of("yuv420p", 1280, 720, 1, 0, 1, 1)
    out = np.empty((3, 720, 1280), np.uint8)
    check, encode = [], []
    for _ in range(60):
        t = time.perf_counter()
        check_model_output(y, 0, "w")
        check.append(time.perf_counter() - t)
        t = time.perf_counter()
        encode_planes(y, "yuv420p", spec, out=out)
        encode.append(time.perf_counter() - t)
    c, e = np.median(check[10:]) * 1e3, np.median(encode[10:]) * 1e3
    print(f"720x1280 HR frame: check {c:.2f} ms, encode_planes {e:.2f} ms, check/encode {c / e:.3f}")
    digest = []
    for _ in range(20):
        t = time.perf_counter()
        sha256_file(DEFAULT_WEIGHTS)
        digest.append(time.perf_counter() - t)
    size = DEFAULT_WEIGHTS.stat().st_size / 1e6
    print(f"sha256 of the bundled default weights ({size:.1f} MB): {np.median(digest) * 1e3:.2f} ms per load")


if __name__ == "__main__":
    main()
