"""The memory plan of a backend whose model works in GPU memory: tiles sized from the GPU's free memory, the
host budget holding only the arrays around the model, each frame's kept features counted against the GPU; a
backend without GPU memory plans as before."""

from __future__ import annotations

import pytest

from vsr.errors import MemoryBudgetError
from vsr.pipeline.memory import MARGIN, DeviceMemory, flight_mb, plan_memory, with_features
from vsr.pipeline.runner import FrameQueueRunner

GPU = DeviceMemory(name="stand-in GPU", free_mb=4096.0, bytes_per_pixel=60_000.0, fixed_mb=300.0)


def plan(**kw):
    args = dict(budget_mb=3072, height=540, width=960, scale=4, num_frame=5, batch=1, queue=2, overlap=16,
                encoder_mb=155.0)
    args.update(kw)
    return plan_memory(**args)


def test_tiles_are_sized_from_the_free_gpu_memory():
    p = plan(device=GPU)
    assert p.tile is not None and p.device_mb is not None
    assert p.device_mb <= GPU.free_mb * (1 - MARGIN)
    assert p.device_mb == pytest.approx(GPU.item_mb(p.tile[0] * p.tile[1], 1))
    roomy = plan(device=DeviceMemory("big GPU", 80_000.0, 60_000.0, 300.0))
    assert roomy.tile is None  # whole 540x960 frames fit 80 GB
    assert p.to_dict()["device_mb"] == round(p.device_mb, 1)


def test_the_host_budget_holds_only_the_arrays_around_a_gpu_model():
    # whole 540x960 frames need far more than 3 GB of host memory with the model on the CPU...
    with pytest.raises(MemoryBudgetError):
        plan(tile=0)
    # ...but fit when the model works on a GPU with the room for it
    p = plan(tile=0, device=DeviceMemory("big GPU", 80_000.0, 60_000.0, 300.0))
    on_host = plan(tile=0, budget_mb=100_000)
    assert p.tile is None and p.fits
    assert p.model_mb == pytest.approx(flight_mb(540 * 960, 1, 5, 4))  # the arrays in flight, no model
    assert p.model_mb < on_host.model_mb / 10


def test_a_tile_the_gpu_cannot_hold_is_refused_in_one_line_naming_the_gpu():
    with pytest.raises(MemoryBudgetError, match=r"the GPU \(stand-in GPU\) has 4096 MB free: --tile 512") as e:
        plan(tile=512, device=GPU)
    assert "\n" not in str(e.value)
    tiny_gpu = DeviceMemory(name="tiny GPU", free_mb=100.0, bytes_per_pixel=60_000.0, fixed_mb=300.0)
    with pytest.raises(MemoryBudgetError, match=r"the GPU \(tiny GPU\) has 100 MB free: \d+x\d+ tiles"):
        plan(device=tiny_gpu)


def test_without_gpu_memory_the_plan_is_the_host_plan():
    assert plan(device=None) == plan()
    assert "device_mb" not in plan().to_dict()


class _Backend:
    padding, num_frame, scale = "replicate", 5, 4

    def __init__(self, memory):
        self.memory = memory

    def device_memory(self):
        return self.memory


def test_the_runner_asks_the_backend_for_its_gpu_memory():
    facts = {"name": "stand-in GPU", "free_mb": 4096.0, "bytes_per_pixel": 60_000.0, "fixed_mb": 300.0}
    assert FrameQueueRunner(_Backend(facts)).device_memory() == GPU
    assert FrameQueueRunner(_Backend(None)).device_memory() is None


def test_features_kept_on_the_gpu_count_against_its_free_memory_not_the_host_budget():
    big = DeviceMemory("big GPU", 80_000.0, 60_000.0, 300.0)
    p = plan(tile=0, device=big)
    kept = with_features(p, 5000.0, big)  # more than the whole host budget, well within the GPU
    assert kept.features == "kept" and kept.total_mb == p.total_mb
    assert kept.to_dict()["features_on_device"] is True and "features_on_device" not in p.to_dict()
    room = (p.device_mb + 4000.0) / (1.0 - MARGIN)  # the GPU holds the model and 4000 MB beside it
    assert with_features(p, 3999.0, DeviceMemory("GPU", room, 60_000.0, 300.0)).features == "kept"
    assert with_features(p, 4001.0, DeviceMemory("GPU", room, 60_000.0, 300.0)).features == "per-window"
    assert with_features(p, 5000.0).features == "per-window"  # the same features in host memory do not fit
