"""The CUDA runtime's run discipline, checked on the CPU emulation (``CudaOptions(device="cpu")``) and, for the
graph capture itself, on a recording stand-in for ``torch.cuda``'s graph API (no GPU here; it says so):

* one graph per program and (bucket, planned batch) -- the whole model, or the features and windows programs --:
  partial batches are padded to the planned batch, larger ones cut into planned batches; graphs are captured by
  ``prepare`` only (the order and the pool: ``test_cuda_graphs.py``);
* TSA's temporal attention sums in fp32 in an fp16 model (its convolutions in half): features whose products
  overflow fp16 there give finite output;
* the output is downloaded as uint8 (quantised as the post stage would), float16 or float32.
"""

from __future__ import annotations

import dataclasses

import warnings
from contextlib import contextmanager

import numpy as np
import pytest
import torch
from torch import nn

from vsr.backends import CudaOptions, TorchOptions
from tests.backends.test_cuda_graphs import GraphAPI
from vsr.backends.cuda.runtime import CudaTorchBackend
from vsr.backends.torch_backend import TorchBackend
from vsr.model import load_model
from vsr.video.colour import quantise_rgb


def _model(config: str = "edvr-tiny"):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_model("random", config)


def _frames(seed: int, shape) -> np.ndarray:
    return np.random.default_rng(seed).random(shape, dtype=np.float32)


@pytest.fixture(scope="module")
def tiny():
    model, cfg = _model()
    ref = TorchBackend(model, cfg, TorchOptions(device="cpu", threads=1))
    return model, cfg, ref


def _backend(tiny, **options) -> CudaTorchBackend:
    model, cfg, _ = tiny
    return CudaTorchBackend(model, cfg, CudaOptions(device="cpu", **options), torch.device("cpu"))


@pytest.mark.parametrize("stream", [False, True])
def test_every_run_uses_the_planned_batch_padding_partial_ones(tiny, stream):
    _, _, ref = tiny
    backend = _backend(tiny, precision="fp32", output="float32", stream_features=stream)
    backend.prepare(16, 20, 3)
    shapes = []
    for name in ("program", "features_program", "windows_program"):
        fn = getattr(backend, name)
        setattr(backend, name, lambda *a, fn=fn, name=name: (shapes.append((name, tuple(a[0].shape))), fn(*a))[1])
    for n in (1, 3, 5):  # a partial batch, the planned one, and one and a bit (two chunks)
        x = _frames(n, (n, 3, 3, 13, 20))
        np.testing.assert_allclose(backend.infer(x), ref.infer(x), rtol=0, atol=1e-5)
    if not stream:
        assert set(shapes) == {("program", (3, 3, 3, 16, 20))} and len(shapes) == 4
        return
    # without keys every frame of a call is new: 3, 9 and 15 frames, 3 per features call; L1 of 3 windows
    assert set(shapes) == {("features_program", (3, 3, 16, 20)), ("windows_program", (9, 16, 16, 20))}
    assert [s[0] for s in shapes].count("features_program") == 1 + 3 + 5 and len(shapes) == 9 + 4


@pytest.fixture
def graph_api(monkeypatch):
    api = GraphAPI()
    for name in ("graph_pool_handle", "CUDAGraph", "graph", "empty_cache", "synchronize", "memory_reserved",
                 "Stream", "current_stream", "stream"):
        monkeypatch.setattr(torch.cuda, name, getattr(api, name))
    return api


def _replay(run, replays: list) -> None:
    """What a real replay does: the captured program again, on the static inputs, into the static outputs."""
    replays.append(run.spec.key[0])
    got = run.spec.program(*run.inputs)
    outs, got = (run.output, got) if isinstance(got, list) else ([run.output], [got])
    torch._foreach_copy_(outs, got)


@pytest.mark.parametrize("stream", [False, True])
def test_a_run_never_captures_it_replays_what_prepare_captured(tiny, graph_api, stream):
    _, _, ref = tiny
    backend = _backend(tiny, precision="fp32", output="float32", stream_features=stream)
    backend.graphs_on = True  # as on a GPU; the stand-in's graphs replay nothing: _replay does their work
    backend.prepare(16, 20, 2)
    keys = [("windows", 2, 16, 20), ("features", 2, 16, 20)] if stream else [("window", 2, 16, 20)]
    assert list(backend.graphs.runs) == keys
    replays = []
    for run in backend.graphs.runs.values():
        run.graph.replay = lambda run=run: _replay(run, replays)
    x = _frames(7, (1, 3, 3, 16, 20))
    np.testing.assert_allclose(backend.infer(x), ref.infer(x), rtol=0, atol=1e-5)
    backend.infer(_frames(8, (1, 3, 3, 32, 32)))  # an unprepared bucket: eager, no capture mid-run
    assert list(backend.graphs.runs) == keys
    assert replays == (["features", "features", "windows"] if stream else ["window"])  # 3 new frames, 2 a call


def test_fp16_keeps_the_attention_fp32_so_large_features_stay_finite(tiny):
    model, cfg, _ = tiny
    big = _model()[0]
    big.load_state_dict(model.state_dict())
    with torch.no_grad():  # embeddings of thousands: products of either sign overflow fp16 (65504): inf - inf
        for conv in (big.fusion.temporal_attn1, big.fusion.temporal_attn2):
            conv.weight.mul_(30000.0)
    ref = TorchBackend(big, cfg, TorchOptions(device="cpu", threads=1))
    half = CudaTorchBackend(big, cfg, CudaOptions(device="cpu", precision="fp16", output="float32"),
                            torch.device("cpu"))
    x = _frames(3, (1, 3, 3, 16, 20))
    got, want = half.infer(x), ref.infer(x)
    assert np.isfinite(got).all() and np.abs(got - want).max() <= 2e-2
    tsa = half.model.model.fusion
    assert tsa.assembly.attention_sum_fp32
    tsa.assembly = dataclasses.replace(tsa.assembly, attention_sum_fp32=False)  # the plain fp16 sum, for contrast
    assert not np.isfinite(half.infer(x)).all()


def test_fp16_attention_convolves_in_half_and_sums_in_fp32(tiny):
    """Only the correlation's products and sum are fp32: the embedding convolutions take and give half."""
    half = _backend(tiny, precision="fp16", output="float32")
    tsa = half.model.model.fusion
    seen = []
    for conv in (tsa.temporal_attn1, tsa.temporal_attn2):
        assert conv.weight.dtype == torch.float16
        conv.register_forward_hook(lambda m, args, out: seen.append((args[0].dtype, out.dtype)))
    got = half.infer(_frames(4, (1, 3, 3, 16, 20)))
    assert np.isfinite(got).all() and seen and set(seen) == {(torch.float16, torch.float16)}


@pytest.mark.parametrize("output", ["uint8", "float16"])
def test_the_output_is_downloaded_small_and_quantised_as_the_post_stage_would(tiny, output):
    _, _, ref = tiny
    backend = _backend(tiny, precision="fp32", output=output)
    x = _frames(5, (2, 3, 3, 16, 20))
    got, want = backend.infer(x), ref.infer(x)
    assert got.dtype == np.dtype(output)
    if output == "uint8":  # the same levels as quantising the float32 output, but where 1e-6 crosses an edge
        assert np.abs(got.astype(int) - quantise_rgb(want, 8).astype(int)).max() <= 1
    else:
        assert np.abs(got.astype(np.float32) - want).max() <= 1e-3


@pytest.mark.parametrize("pix_fmt,matrix,output", [("yuv420p", 1, "float16"), ("yuv422p10le", 9, "float32"),
                                                    ("yuv444p", 6, "uint8"), ("rgb48be", 0, "float16"),
                                                    ("gbrp10le", 0, "float32"), ("yuv410p", 1, "float32")])
def test_planes_made_on_the_device_are_the_hosts_bit_for_bit(tiny, pix_fmt, matrix, output):
    """What the post stage would make of the downloaded RGB (vsr.video.planes on the host) is what the device
    made: the same float32 operations in the same order."""
    from tests.backends.planes_check import assert_host_planes
    from vsr.video.colour import ColourSpec
    from vsr.video.planes import PlaneFormat

    backend = _backend(tiny, precision="fp32", output=output)
    x = _frames(6, (3, 3, 3, 13, 18))  # a partial second chunk, a bucket larger than the frame
    backend.prepare(13, 18, 2)
    rgb = backend.infer(x)
    fmt = PlaneFormat.of(pix_fmt, ColourSpec(matrix, 1, 1, 1) if matrix else ColourSpec.srgb())
    backend.prepare(13, 18, 2, planes=fmt)  # what the runner does: the sink's planes, told as it prepares
    assert backend.facts()["download"] == f"planes {fmt.pix_fmt}"
    assert_host_planes(backend.infer(x), rgb, fmt)


class _StreamAPI:
    """A recording stand-in for torch.cuda's streams and events (there is no GPU here): what waits on what."""

    def __init__(self):
        self.log = []
        self.current = self.Stream(self, "compute")

    class Stream:
        def __init__(self, api, name):
            self.api, self.name = api, name

        def wait_stream(self, other):
            self.api.log.append(("wait_stream", self.name, other.name))

        def wait_event(self, event):
            self.api.log.append(("wait_event", self.name, event.label))

    def event(self):
        api = self

        class Event:
            def record(self, stream):
                self.label = f"{stream.name}#{sum(e[0] == 'record' for e in api.log)}"
                api.log.append(("record", stream.name, self.label))

            def synchronize(self):
                api.log.append(("host_wait", self.label))

        return Event

    @contextmanager
    def stream(self, s):
        saved, self.current = self.current, s
        self.log.append(("on", s.name))
        yield
        self.current = saved


def test_transfers_use_pinned_buffers_and_a_copy_stream_ordered_by_events(monkeypatch):
    from vsr.backends.cuda import transfer

    api, pinned = _StreamAPI(), []
    monkeypatch.setattr(torch.cuda, "Event", api.event())
    monkeypatch.setattr(torch.cuda, "stream", api.stream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: api.current)
    empty = torch.empty

    def recording_empty(*shape, pin_memory=False, **kw):  # no CUDA: record the request, allocate plainly
        pinned.append(pin_memory)
        return empty(*shape, **kw)

    monkeypatch.setattr(transfer.torch, "empty", recording_empty)
    io = transfer.Transfers(torch.device("cpu"))
    io.gpu, io.copy_stream = True, api.Stream(api, "copy")  # as on a GPU, with the stand-in streams and events
    results = []
    for k in range(3):  # three chunks: slots 0, 1, 0
        slot = k % 2
        host = io.input_buffer(slot, (1, 2))
        host[...] = float(k)
        lr = io.upload(slot, host)
        y = lr * 2
        io.consumed(slot)
        out = io.start_download(slot, y)
        got = io.finish(slot, out)
        assert np.shares_memory(got, out.numpy())  # the pinned buffer itself: the caller's copy is the only one
        results.append(got.copy())
    assert [r.tolist() for r in results] == [[[0.0, 0.0]], [[2.0, 2.0]], [[4.0, 4.0]]]
    assert pinned.count(True) == 4  # pinned input and output of each of the two slots, made once
    assert ("on", "copy") in api.log and ("wait_stream", "copy", "compute") in api.log
    uploads = [e for e in api.log if e[0] == "record" and e[1] == "copy"]
    assert len(uploads) == 6  # each chunk: its upload and its download recorded on the copy stream
    assert all(("wait_event", "compute", e[2]) in api.log for e in uploads[0::2])  # compute waits for uploads
    waits = [e[1] for e in api.log if e[0] == "host_wait"]
    # the host waits for each download alone, and before refilling slot 0's pinned input, for its upload
    assert waits == [uploads[1][2], uploads[3][2], uploads[0][2], uploads[5][2]]


@pytest.mark.parametrize("precision", ["fp16", "fp32"])
def test_no_method_of_the_model_is_replaced_on_an_instance(tiny, precision):
    """The runtime says how EDVR writes what it assembles through its Assembly, a strategy model/edvr.py names:
    no module of the bridged model carries a function in its own ``__dict__`` that would shadow its class's."""
    half = _backend(tiny, precision=precision, output="float32")
    edvr = half.model.model
    assert edvr.assembly.channels_last and edvr.assembly.attention_sum_fp32 == (precision == "fp16")
    for name, module in half.model.named_modules():
        shadowing = [k for k, v in vars(module).items() if callable(v) and not isinstance(v, (nn.Module, type))
                     and hasattr(type(module), k)]
        assert not shadowing, (name, shadowing)
