"""The GPU memory a run of the CUDA runtime takes, measured on the device for the run's memory plan.

The plan (:class:`vsr.pipeline.memory.DeviceMemory`) needs the working memory of one item as ``fixed + bytes
per LR pixel x pixels``.  It is measured by doing what ``prepare`` does at two small probe sizes, batch 1 --
with CUDA graphs: capturing the run's graphs (the features and windows graphs, or the whole model) in a pool of
their own and reading how much the device's reserved memory grew, static inputs and outputs included; without:
the allocator's peak over one eager run -- and releasing it all again.  What the plan then counts is what the
device gave, not an estimate of it; beside it, the bytes of the transfers' device buffers (known exactly, their
shapes: :func:`transfer_nbytes_per_pixel`).  The frames' kept features are counted apart (``feature_nbytes``).
"""

from __future__ import annotations

import numpy as np
import torch

from vsr.backends.cuda.graphs import GraphSet, static_inputs


def fit_line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """``(pixels, bytes)`` of two probes -> ``(bytes per pixel, fixed bytes)``: the line through them, its slope
    at least 1 byte and its intercept at least 0 (a probe's rounding must not make either negative)."""
    (p0, b0), (p1, b1) = points
    per_pixel = max((b1 - b0) / (p1 - p0), 1.0)
    return per_pixel, max(b0 - per_pixel * p0, 0.0)


def probe_nbytes(backend, side: int) -> int:
    """Bytes the device gives a run of ``backend`` at ``side x side``, batch 1 (see the module's docstring)."""
    api, device = torch.cuda, backend.device
    specs = backend.graph_specs(side, side, 1)
    api.synchronize(device)
    api.empty_cache()
    if backend.graphs_on:
        before = api.memory_reserved(device)
        probe = GraphSet(device)
        probe.plan(("probe", side), specs)
        grown = api.memory_reserved(device) - before
        probe.release()
        return grown
    base = api.memory_allocated(device)
    api.reset_peak_memory_stats(device)
    for spec in specs:
        spec.program(*static_inputs(spec, device))
    api.synchronize(device)
    return api.max_memory_allocated(device) - base


def transfer_nbytes_per_pixel(backend) -> float:
    """Device bytes per LR pixel of one item that the transfers keep (:mod:`~vsr.backends.cuda.transfer`): for
    each of its two slots, the upload (float32 RGB: the new frames where features are kept, else the window's
    T frames) and the download's copy (``scale**2`` output pixels in the output dtype)."""
    frames = 1 if backend.keeps_features else backend.num_frame
    return 2 * (frames * 3 * 4 + 3 * backend.scale ** 2 * np.dtype(backend.options.output).itemsize)


@torch.inference_mode()
def device_memory(backend, sides: tuple[int, int]) -> dict:
    """The fields of :class:`vsr.pipeline.memory.DeviceMemory` for ``backend`` on its GPU: free memory now (after
    the probes' memory went back) and the working memory of one item, from probes at ``sides`` squared."""
    api, device = torch.cuda, backend.device
    per_pixel, fixed = fit_line([(s * s, probe_nbytes(backend, s)) for s in sides])
    api.empty_cache()
    free, _ = api.mem_get_info(device)
    cached = api.memory_reserved(device) - api.memory_allocated(device)
    return {"name": api.get_device_name(device), "free_mb": (free + cached) / 2**20,
            "bytes_per_pixel": per_pixel + transfer_nbytes_per_pixel(backend), "fixed_mb": fixed / 2**20}
