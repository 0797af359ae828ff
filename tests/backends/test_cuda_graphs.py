"""The CUDA runtime's graphs and the GPU memory they hold, checked without a GPU: :class:`GraphSet` on a
recording stand-in for ``torch.cuda``'s graph and memory calls (it says so), and the arithmetic the memory plan
reads (:class:`GraphMemory`, :func:`fit_line`).

* a bucket's graphs are captured largest first, after a warm-up run of every one of them outside any capture
  whose blocks go back to the device (``empty_cache``) before the first capture begins;
* a graph larger than every one kept releases them all and all are captured again, largest first, in a new pool;
* graphs leave when their bucket's plan changes or when more buckets than ``keep`` are planned (least recent);
* what the pool grew by per capture and each graph's static bytes are counted; the bound is the largest working
  memory plus every graph's statics;
* ``device_memory()`` plans from what capturing the backend's own programs at two sizes took (the CPU emulation's
  real programs, captured on the stand-in).
"""

from __future__ import annotations

from contextlib import contextmanager

import pytest
import torch

from vsr.backends.cuda.graphs import GraphMemory, GraphSet, GraphSpec
from vsr.backends.cuda.memory import device_memory, fit_line, transfer_nbytes_per_pixel

CPU = torch.device("cpu")


class GraphAPI:
    """A recording stand-in for the ``torch.cuda`` calls of :mod:`vsr.backends.cuda.graphs` (there is no GPU
    here).  ``graph(...)`` keeps torch's signature and refuses modes torch lacks; the device's reserved memory
    grows during a capture by the next of ``queue``, else by ``growth[key]`` for the graph whose program logged
    ``key`` last."""

    def __init__(self):
        self.log: list[tuple] = []
        self.pools: list[object] = []
        self.reserved = 0
        self.growth: dict[str, int] = {}
        self.queue: list[int] = []

    def graph_pool_handle(self):
        self.pools.append(object())
        self.log.append(("pool",))
        return self.pools[-1]

    class CUDAGraph:
        def replay(self):
            pass

    @contextmanager
    def graph(self, cuda_graph, pool=None, stream=None, capture_error_mode="global"):
        if capture_error_mode not in ("global", "thread_local", "relaxed"):
            raise ValueError(f"unknown capture_error_mode {capture_error_mode}")
        self.log.append(("capture", capture_error_mode, self.pools.index(pool)))
        yield
        self.reserved += self.queue.pop(0) if self.queue else self.growth.get(self.log[-1][-1], 0)
        self.log.append(("captured",))

    def empty_cache(self):
        self.log.append(("empty_cache",))

    def synchronize(self, device=None):
        self.log.append(("sync",))

    def memory_reserved(self, device=None):
        return self.reserved

    def memory_allocated(self, device=None):
        return 0

    def mem_get_info(self, device=None):
        return 1 << 30, 80 << 30

    def get_device_name(self, device=None):
        return "stand-in GPU"

    class Stream:
        def __init__(self, device=None):
            pass

        def wait_stream(self, other):
            pass

    def current_stream(self, device=None):
        return self.Stream()

    @contextmanager
    def stream(self, s):
        yield


def spec(api: GraphAPI, name: str, size: int) -> GraphSpec:
    """A graph whose program logs its name; one (2, 4) float32 input, an output of the same size: 64 static bytes."""
    def program(x):
        api.log.append(("run", name))
        return x * 2
    return GraphSpec((name,), program, (((2, 4), torch.float32, torch.contiguous_format),), size)


def captured(api: GraphAPI) -> list[str]:
    """Names of the graphs captured, in order: the program run inside a capture."""
    return [b[1] for a, b in zip(api.log, api.log[1:]) if a[0] == "capture"]


def test_every_warm_up_runs_and_gives_its_blocks_back_before_the_first_capture_largest_first():
    api = GraphAPI()
    graphs = GraphSet(CPU, api)
    graphs.plan(("a",), [spec(api, "a-features", 1), spec(api, "a-windows", 2)])
    assert captured(api) == ["a-windows", "a-features"]
    # no program runs outside a capture once the pool exists: its blocks would sit beside the pool, beyond the plan
    assert api.log[:8] == [("run", "a-windows"), ("sync",), ("empty_cache",),
                           ("run", "a-features"), ("sync",), ("empty_cache",), ("pool",),
                           ("capture", "thread_local", 0)]
    assert list(graphs.runs) == [("a-windows",), ("a-features",)]


def test_a_larger_graph_captures_everything_again_largest_first_a_smaller_one_joins_the_pool():
    api = GraphAPI()
    graphs = GraphSet(CPU, api)
    graphs.plan(("a",), [spec(api, "a1", 1), spec(api, "a2", 2)])
    api.log.clear()
    graphs.plan(("b",), [spec(api, "b1", 5), spec(api, "b2", 8)])  # larger than all kept
    assert captured(api) == ["b2", "b1", "a2", "a1"] and len(api.pools) == 2
    assert {pool for kind, *rest in api.log if kind == "capture" for pool in rest[1:]} == {1}  # all in the new one
    api.log.clear()
    graphs.plan(("c",), [spec(api, "c1", 3)])
    assert captured(api) == ["c1"] and len(api.pools) == 2  # into the pool the largest made
    graphs.plan(("a",), [spec(api, "a1", 1), spec(api, "a2", 2)])  # planned again as it was: nothing to do
    assert captured(api) == ["c1"]


def test_graphs_leave_with_their_plan_and_beyond_keep_buckets():
    api = GraphAPI()
    graphs = GraphSet(CPU, api, keep=2)
    graphs.plan(("a",), [spec(api, "a-batch2", 4)])
    graphs.plan(("b",), [spec(api, "b", 1)])
    graphs.plan(("a",), [spec(api, "a-batch3", 3)])  # another batch for a: its old graph goes
    assert set(graphs.runs) == {("a-batch3",), ("b",)}
    graphs.plan(("c",), [spec(api, "c", 2)])  # a third bucket: b, the least recently planned, goes
    assert set(graphs.runs) == {("a-batch3",), ("c",)}
    assert graphs.get(("b",)) is None


def test_the_pool_is_counted_as_measured_and_bounded_by_the_largest_graph_and_the_statics():
    api = GraphAPI()
    api.growth = {"small": 3 << 20, "large": 40 << 20}
    graphs = GraphSet(CPU, api)
    graphs.plan(("s",), [spec(api, "small", 1)])
    assert graphs.memory.pool_nbytes == 3 << 20 and graphs.memory.statics == {("small",): 64}
    graphs.plan(("l",), [spec(api, "large", 9)])  # everything again, largest first, in a new pool
    memory = graphs.memory
    assert memory.grown == {("large",): 40 << 20, ("small",): 3 << 20} and memory.statics_nbytes == 128
    # each graph measured alone (its statics included): the pool may hold the largest and the others' statics
    working = {("large",): 40 << 20, ("small",): 3 << 20}
    assert memory.bound(working) == (40 << 20) - 64 + 128
    assert memory.pool_nbytes > memory.bound(working)  # this stand-in's pool did not share: the check would fail
    assert memory.to_dict() == {"graphs": 2, "pool_mib": 43.0, "statics_mib": 128 / 2**20}
    graphs.release()
    assert graphs.runs == {} and graphs.memory.pool_nbytes == 0 and api.log[-1] == ("empty_cache",)


def test_graph_memory_bound_arithmetic():
    memory = GraphMemory(statics={("a",): 10, ("b",): 30})
    assert memory.bound({("a",): 100, ("b",): 50}) == 90 + 40
    assert GraphMemory().bound({}) == 0


@pytest.mark.parametrize("points, want", [([(100, 1300), (400, 4300)], (10.0, 300.0)),
                                          ([(100, 5000), (400, 4000)], (1.0, 4900.0)),  # rounding: flat
                                          ([(100, 500), (400, 8000)], (25.0, 0.0))])  # never below zero
def test_the_probes_line(points, want):
    assert fit_line(points) == pytest.approx(want)


def test_device_memory_is_the_line_through_two_measured_captures(monkeypatch):
    import warnings

    from vsr.backends import CudaOptions, open_backend

    api = GraphAPI()
    for name in ("graph_pool_handle", "CUDAGraph", "graph", "empty_cache", "synchronize", "memory_reserved",
                 "memory_allocated", "mem_get_info", "get_device_name", "Stream", "current_stream", "stream"):
        monkeypatch.setattr(torch.cuda, name, getattr(api, name))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        backend = open_backend("random", "edvr-tiny", CudaOptions(device="cpu", precision="fp16"))
    backend.graphs_on = True  # as on a GPU: the probes capture the windows and features programs
    api.queue = [5000 + 70 * 8 * 8, 900, 5000 + 70 * 16 * 16, 2100]  # what each capture took, 8x8 then 16x16
    got = device_memory(backend, (8, 16))
    per_pixel = (70 * (256 - 64) + 2100 - 900) / (256 - 64)
    assert got["bytes_per_pixel"] == pytest.approx(per_pixel + transfer_nbytes_per_pixel(backend))
    assert got["fixed_mb"] == pytest.approx((5000 + 70 * 64 + 900 - per_pixel * 64) / 2**20)
    assert got["name"] == "stand-in GPU" and got["free_mb"] == 1024.0 + api.reserved / 2**20  # and torch's cache
    assert [e[0] for e in api.log].count("capture") == 4 and backend.graphs.runs == {}  # probes, released
    assert transfer_nbytes_per_pixel(backend) == 2 * (1 * 3 * 4 + 3 * 16 * 2)  # new frames up, fp16 HR down
