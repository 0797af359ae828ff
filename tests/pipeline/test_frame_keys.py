"""Frame keys: every batch names each input frame's source frame and tile, and what a streaming backend keeps by
them is enough (no feature asked for after it went), never computed twice in a run, and never more than the
memory plan counts (``kept_features``); the runner streams where the plan keeps the features, else not."""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import numpy as np
import pytest

from tests.pipeline.test_runner import write_pngs
from tests.conftest import pattern
from vsr.backends.features import FeatureSlots
from vsr.pipeline import RunnerSettings, upscale
from vsr.pipeline.batches import batches, kept_features
from vsr.pipeline.tiles import tile_grid
from vsr.pipeline.windows import scene_window_indices, windows


def frames(n: int, cuts: tuple[int, ...]):
    for i in range(n):
        yield SimpleNamespace(index=i, pts=i, duration=1, rgb=np.full((1, 4, 6), i, np.float32)), i in cuts


@pytest.mark.parametrize("num_frame, padding", [(5, "reflection_circle"), (3, "replicate"), (7, "reflection_circle")])
@pytest.mark.parametrize("batch, tile", [(1, None), (3, None), (2, 3), (5, 3)])
@pytest.mark.parametrize("cuts", [(), (4,), (4, 5, 11)])
def test_keys_keep_what_later_windows_need_once_and_within_the_plan(num_frame, padding, batch, tile, cuts):
    n = 16
    tiles = tile_grid(4, 6, tile, 1)
    slots, seen, gone = FeatureSlots(), set(), set()
    for b in batches(windows(frames(n, cuts), num_frame, padding, scenes=True), tiles, batch, stream=7):
        keys = b.keys
        call = slots.begin(keys)
        for s, i, t in call.new:
            key = keys.keys()[i][t]
            assert key not in seen, f"{key} computed twice"
            seen.add(key)
        assert not {k for row in keys.keys() for k in row} & gone, "a feature was asked for after it went"
        for slot, row in zip(b.slots, keys.frames):  # the keys are the windows' own frames
            assert list(row) == scene_window_indices(slot.index, n, num_frame, padding, cuts)
        assert keys.tiles == tuple(tiles.index(s.tile) for s in b.slots)
        slots.end(keys)
        gone |= {k for k in seen if k[0] < keys.keep_from}
    assert seen == {(f, t) for f in range(n) for t in range(len(tiles))}
    assert slots.size <= kept_features(num_frame, batch, len(tiles))
    if batch == 1 and tile is None and cuts == (4,) and num_frame == 5:
        # at a scene's first window the last scene's end (reached back by its reflections) is still kept
        assert slots.size == kept_features(num_frame, batch, len(tiles)) == 9


def test_a_new_stream_keeps_nothing_of_the_last():
    slots = FeatureSlots()
    items = list(batches(windows(frames(6, ()), 3, "replicate", scenes=True), tile_grid(4, 6, None, 1), 2))
    first = [len(slots.begin(b.keys).new) for b in items]
    again = [len(slots.begin(b.keys).new) for b in items]  # the same stream: all kept
    from dataclasses import replace

    other = [len(slots.begin(replace(b.keys, stream=1)).new) for b in items]
    assert sum(first) == 6 and sum(again) == 0 and sum(other) == 6


class RecordingBackend:
    """A backend that streams: records which call each batch went to; the output is the centre frame x4."""

    name, scale, num_frame, padding, keeps_features = "recording", 4, 3, "reflection_circle", True
    config = SimpleNamespace(padding="reflection_circle", memory_fixed_mb=None, memory_bytes_per_pixel=None)

    def __init__(self, feature_nbytes: int):
        self.nbytes, self.calls = feature_nbytes, []

    def prepare(self, height, width, batch, phase=None, planes=None):
        pass

    def feature_nbytes(self, height, width):
        return self.nbytes

    def infer(self, x):
        self.calls.append("infer")
        return np.repeat(np.repeat(x[:, 1], 4, axis=2), 4, axis=3)

    def infer_stream(self, x, keys):
        self.calls.append(keys.stream)
        return np.repeat(np.repeat(x[:, 1], 4, axis=2), 4, axis=3)

    def timings(self):
        return {}

    def step_stats(self):
        return {}


@pytest.mark.parametrize("feature_nbytes, kept", [(1000, True), (2 ** 40, False)])
def test_the_runner_streams_where_the_memory_plan_keeps_the_features(tmp_path, feature_nbytes, kept):
    src = write_pngs(tmp_path / "in", [pattern(i, 12, 8) for i in range(5)])
    backend = RecordingBackend(feature_nbytes)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        report = upscale(src, tmp_path / "out", backend=backend, runner=RunnerSettings(batch=2))
    plan = report.settings["memory_plan"]
    assert plan["features"] == ("kept" if kept else "per-window")
    assert plan["features_mb"] == round(kept_features(3, 2, 1) * feature_nbytes / 2 ** 20, 1)
    assert len(backend.calls) == 3
    if kept:
        assert len(set(backend.calls)) == 1 and backend.calls[0] != "infer"
    else:
        assert backend.calls == ["infer"] * 3
        assert any("computed per window, about 1.18x slower" in str(w.message) for w in said)
