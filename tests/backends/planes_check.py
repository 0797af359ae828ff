"""The check both CUDA paths' device-made planes share: equal, bit for bit, to what the post stage makes of the
same RGB on the host (``vsr.video.planes.convert_tile``)."""

from __future__ import annotations

import numpy as np

from vsr.video.planes import PlaneBatch, PlaneFormat, convert_tile


def assert_host_planes(got, rgb: np.ndarray, fmt: PlaneFormat) -> None:
    """``got`` (a backend's PlaneBatch of ``fmt``) holds, per item of ``rgb (N, 3, H, W)``, the host's planes."""
    assert isinstance(got, PlaneBatch) and got.data.dtype == fmt.dtype and len(got.data) == len(rgb)
    for n in range(len(rgb)):
        host = [np.empty(shape, fmt.dtype) for shape in fmt.plane_shapes(*rgb.shape[2:])]
        convert_tile(rgb[n], fmt, host)
        for a, b in zip(got.planes(n), host):
            np.testing.assert_array_equal(a, b)
