"""The window and batch stages as plain generators, driven without threads: every output frame gets the
window of its definition (clip ends padded as configured, ``--frames A:B`` with neighbours from outside), a
frame is pulled only when a window needs it, and batches keep order, tiles, and a short last batch."""

from __future__ import annotations

import weakref

import numpy as np
import pytest

from vsr.pipeline.batches import Batch, batches
from vsr.pipeline.tiles import tile_grid
from vsr.pipeline.windows import FrameWindow, window_indices, windows
from vsr.video.source import SourceFrame


def clip(n: int, first: int = 0, h: int = 4, w: int = 6) -> list[SourceFrame]:
    """Frames ``first..n-1`` whose pixels all hold their own index; pts ``10 * i``, duration ``i + 1``."""
    return [SourceFrame(i, 10 * i, i + 1, np.full((3, h, w), i, np.float32)) for i in range(first, n)]


class Pulls:
    """Iterates ``frames`` and records the index of each frame handed out."""

    def __init__(self, frames):
        self.frames, self.pulled = frames, []

    def __iter__(self):
        for f in self.frames:
            self.pulled.append(f.index)
            yield f


def check(ws: list[FrameWindow], n: int, num_frame: int, padding: str, centres: list[int]) -> None:
    assert [w.index for w in ws] == centres
    for w in ws:
        want = window_indices(w.index, n, num_frame, padding)
        assert list(w.sources) == want
        assert [int(f[0, 0, 0]) for f in w.frames] == want  # the frames themselves, not only their indices
        assert (w.pts, w.duration) == (10 * w.index, w.index + 1)


@pytest.mark.parametrize("padding", ["reflection_circle", "replicate"])
@pytest.mark.parametrize("num_frame", [1, 3, 5, 7])
def test_whole_clip_both_ends_padded(padding, num_frame):
    n = 9
    check(list(windows(clip(n), num_frame, padding)), n, num_frame, padding, list(range(n)))


@pytest.mark.parametrize("padding", ["reflection_circle", "replicate"])
@pytest.mark.parametrize("n", [1, 2, 3])
def test_clip_shorter_than_the_window(padding, n):
    check(list(windows(clip(n), 5, padding)), n, 5, padding, list(range(n)))


@pytest.mark.parametrize("padding", ["reflection_circle", "replicate"])
def test_frames_a_to_b_take_neighbours_from_outside_and_stop_pulling(padding):
    n, num_frame, start, stop = 20, 5, 6, 10
    r = num_frame // 2
    src = Pulls(clip(n, first=start - 2 * r))
    check(list(windows(src, num_frame, padding, start, stop)), n, num_frame, padding, list(range(start, stop)))
    assert src.pulled == list(range(start - 2 * r, stop + r))  # nothing past the last window's reach


@pytest.mark.parametrize("padding", ["reflection_circle", "replicate"])
def test_frames_past_the_clip_end_give_the_frames_there_are_padded_at_the_real_end(padding):
    n = 7
    check(list(windows(clip(n, first=1), 5, padding, 5, 100)), n, 5, padding, [5, 6])
    assert list(windows(clip(n, first=6), 5, padding, 8, 12)) == []  # starts past the end: no window


def test_a_window_is_made_as_soon_as_its_frames_are_there_and_few_frames_are_held():
    num_frame, r, n = 5, 2, 30
    src = Pulls(clip(n))
    for w in windows(src, num_frame, "reflection_circle"):
        assert len(src.pulled) == min(max(w.index + r, 2 * r) + 1, n)  # a reflection at the start reaches 2r
    alive: set[int] = set()

    def frames():
        for i in range(n):
            rgb = np.full((3, 2, 2), i, np.float32)
            alive.add(i)
            weakref.finalize(rgb, alive.discard, i)
            yield SourceFrame(i, i, 1, rgb)
            rgb = None

    peak = 0
    for w in windows(frames(), num_frame, "reflection_circle"):
        peak = max(peak, len(alive))
    assert peak <= 3 * r + 1


def test_frames_before_the_reach_of_a_reflection_are_missing_is_an_error():
    with pytest.raises(ValueError, match="needs frames before"):
        list(windows(clip(10, first=3), 5, "reflection_circle", 3, 6))


def windows_of(n: int, h: int = 8, w: int = 12, num_frame: int = 3) -> list[FrameWindow]:
    return list(windows(clip(n, h=h, w=w), num_frame, "replicate"))


def test_batches_stack_tiles_in_order_with_a_short_last_batch():
    ws = windows_of(3)
    tiles = tile_grid(8, 12, (8, 8), 2)  # two tiles across, overlapping
    assert len(tiles) == 2
    out = list(batches(iter(ws), tiles, 4))
    assert [len(b.slots) for b in out] == [4, 2]
    slots = [s for b in out for s in b.slots]
    assert [(s.index, s.tile) for s in slots] == [(i, t) for i in range(3) for t in tiles]
    assert [(s.pts, s.duration) for s in slots[::2]] == [(0, 1), (10, 2), (20, 3)]
    for b in out:
        assert isinstance(b, Batch) and b.x.dtype == np.float32 and b.x.shape[1:] == (3, 3, 8, 8)
        for x, s in zip(b.x, b.slots):
            win = ws[s.index]
            t = s.tile
            want = np.stack([f[:, t.y0:t.y1, t.x0:t.x1] for f in win.frames])
            np.testing.assert_array_equal(x, want)


def test_batches_of_one_and_batches_larger_than_the_clip():
    ws = windows_of(3)
    tiles = tile_grid(8, 12, None, 0)
    assert [[s.index for s in b.slots] for b in batches(ws, tiles, 1)] == [[0], [1], [2]]
    big = list(batches(ws, tiles, 8))
    assert len(big) == 1 and big[0].x.shape == (3, 3, 3, 8, 12)
    assert list(batches([], tiles, 2)) == []


def test_nothing_ready_sends_what_waits_as_a_smaller_batch():
    ws = windows_of(4)
    tiles = tile_grid(8, 12, None, 0)
    out = list(batches([None, ws[0], None, None, ws[1], ws[2], ws[3], None], tiles, 3))
    assert [[s.index for s in b.slots] for b in out] == [[0], [1, 2, 3]]
    out = list(batches([ws[0], ws[1], None, ws[2], ws[3]], tiles, 3))
    assert [[s.index for s in b.slots] for b in out] == [[0, 1], [2, 3]]


def test_a_stage_that_ends_before_its_input_does_not_block_the_stage_before_it():
    """``--frames 0:8``: the windows end while the decoder still has frames (and its end) to hand over; with
    more of them than the queue holds, the decoder must not wait forever on a stage that has finished."""
    import threading

    from vsr.pipeline.stages import Stage, StagePipeline

    produced = []

    def source(_inbox):
        for i in range(10):
            produced.append(i)
            yield i

    def first_three(inbox):
        for n, item in enumerate(inbox):
            if n == 3:
                return
            yield item

    out = []
    pipeline = StagePipeline([Stage("decode", source), Stage("window", first_three)], [1], on_output=out.append)
    runner = threading.Thread(target=pipeline.run, daemon=True)
    runner.start()
    runner.join(20)
    assert not runner.is_alive(), "the pipeline hung on a stage that had ended"
    assert out == [0, 1, 2] and produced == list(range(10))


def test_the_objects_alive_when_the_stages_start_are_left_out_of_garbage_collection_until_they_end():
    """A full collection walked every object (the imports, the model) inside whichever stage allocated: while a
    pipeline runs they are frozen (gc.freeze), after it they are collected again, even if a stage failed."""
    import gc

    from vsr.pipeline.stages import Stage, StagePipeline

    seen = []

    def stage(_inbox):
        seen.append(gc.get_freeze_count())
        yield 1

    def failing(_inbox):
        raise RuntimeError("stage failed")
        yield

    before = gc.get_freeze_count()
    StagePipeline([Stage("one", stage)], []).run()
    with pytest.raises(RuntimeError, match="stage failed"):
        StagePipeline([Stage("one", failing)], []).run()
    assert seen[0] > before == gc.get_freeze_count() == 0
