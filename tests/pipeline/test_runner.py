"""The frame-queue runner: every output frame is the model applied to the right window; memory stays
bounded; a failure anywhere leaves no output behind; tiles are seamless."""

from __future__ import annotations

import gc
import threading
import weakref
from pathlib import Path

import cv2
import numpy as np
import pytest

from tests.conftest import DATA, pattern
from vsr.pipeline import FrameQueueRunner, RunnerSettings, upscale
from vsr.pipeline.windows import window_indices
from vsr.video import EncoderSettings
from vsr.video.colour import quantise_rgb
from vsr.video.source import read_png

REDS = DATA / "sequences" / "reds_demo_000" / "lr"


def write_pngs(folder: Path, frames: list[np.ndarray]) -> Path:
    folder.mkdir()
    for i, f in enumerate(frames):
        cv2.imwrite(str(folder / f"{i:08d}.png"), f[:, :, ::-1])
    return folder


def reference(backend, frames: list[np.ndarray]) -> list[np.ndarray]:
    """Straight from the definition: window_indices + one backend call per frame, no runner."""
    rgb = [f.transpose(2, 0, 1).astype(np.float32) / 255 for f in frames]
    out = []
    for i in range(len(rgb)):
        idx = window_indices(i, len(rgb), backend.num_frame, backend.config.padding)
        y = backend.infer(np.stack([rgb[j] for j in idx])[None])[0]
        out.append(quantise_rgb(y, 8).transpose(1, 2, 0))
    return out


def read_out(folder: Path) -> list[np.ndarray]:
    return [cv2.imread(str(p))[:, :, ::-1] for p in sorted(folder.glob("*.png"))]


@pytest.mark.parametrize("batch", [1, 3])
def test_each_output_frame_is_the_model_on_its_window(tmp_path, tiny_backend, batch):
    frames = [pattern(i, 20, 12) for i in range(5)]
    src = write_pngs(tmp_path / "in", frames)
    out = tmp_path / "out"
    report = upscale(src, out, backend=tiny_backend, runner=RunnerSettings(batch=batch))
    got, want = read_out(out), reference(tiny_backend, frames)
    assert [p.name for p in sorted(out.glob("*.png"))] == [f"{i:08d}.png" for i in range(5)]
    assert report.frames == 5 and len(got) == 5
    for g, w in zip(got, want):
        assert g.shape == (48, 80, 3)
        assert np.abs(g.astype(int) - w.astype(int)).max() <= 1  # batch size may change the last float bit


def test_tiled_equals_untiled_within_one_step_on_real_footage(tmp_path, tiny_backend):
    frames = [cv2.imread(str(p))[:64, :96, ::-1] for p in sorted(REDS.glob("*.png"))[:3]]
    if len(frames) < 3:
        pytest.skip("shared data not present")
    src = write_pngs(tmp_path / "in", frames)
    whole, tiled = tmp_path / "whole", tmp_path / "tiled"
    upscale(src, whole, backend=tiny_backend, runner=RunnerSettings(tile=0))
    report = upscale(src, tiled, backend=tiny_backend, runner=RunnerSettings(tile=48, batch=4))  # default overlap
    assert report.settings["tiles_per_frame"] == 8  # 2 x 4 tiles of 48, stepping 48 - 2 * 16
    for a, b in zip(read_out(whole), read_out(tiled)):
        assert np.abs(a.astype(int) - b.astype(int)).max() <= 1


class CountingSource:
    """A long synthetic source that counts how many of its frames are alive at once."""

    def __init__(self, n: int, size=(12, 8)):
        from vsr.video.colour import ColourSpec
        from vsr.video.source import VideoInfo
        from fractions import Fraction

        w, h = size
        self.n = n
        self.alive = 0
        self.peak = 0
        self.lock = threading.Lock()
        self.info = VideoInfo(path=Path("synthetic"), kind="png", width=w, height=h, pix_fmt="rgb24", bits=8,
                              colour=ColourSpec.srgb(), time_base=Fraction(1, 25), rate=Fraction(25), frames=n)

    def _gone(self):
        with self.lock:
            self.alive -= 1

    def frames(self, start=0):
        from vsr.video.source import SourceFrame

        for i in range(start, self.n):
            rgb = np.full((3, self.info.height, self.info.width), (i % 7) / 7, np.float32)
            with self.lock:
                self.alive += 1
                self.peak = max(self.peak, self.alive)
            weakref.finalize(rgb, self._gone)
            yield SourceFrame(i, i, 1, rgb)


class NullSink:
    """The Sink protocol with nothing behind it: remembers the timestamps written."""

    pix_fmt = "rgb24"

    def __init__(self):
        self.pts = []

    def planes_format(self):
        from vsr.video.colour import ColourSpec

        return "rgb24", ColourSpec.srgb()

    def plane_dtype(self):
        return np.dtype(np.uint8)

    def memory_estimate_mb(self):
        return 0.0

    def new_planes(self, height, width):
        return np.empty((3, height, width), np.uint8)

    def finish(self, planes):
        return planes

    def write(self, planes, pts, duration):
        self.pts.append(pts)

    def commit(self):
        pass

    def abort(self):
        pass


def test_memory_is_bounded_whatever_the_length(tiny_backend):
    src, sink = CountingSource(120), NullSink()
    settings = RunnerSettings(batch=2, queue=2)
    report = FrameQueueRunner(tiny_backend, settings).run(src, sink)
    gc.collect()
    assert sink.pts == list(range(120)) and report.frames == 120
    # window ring (4r+1) + queues between decode and batch + one batch: independent of the 120 frames
    r = tiny_backend.num_frame // 2
    assert src.peak <= (4 * r + 1) + 2 * settings.queue + 2 * settings.batch + 4, src.peak
    names = [s.name for s in report.stages]
    assert names == ["decode", "window", "batch", "infer", "post", "encode"]
    assert all(s.items > 0 and s.busy_s >= 0 for s in report.stages)
    assert report.bottleneck is not None and report.bottleneck.name in names


class FailingBackend:
    def __init__(self, inner, after: int):
        self.inner, self.after, self.calls = inner, after, 0
        self.num_frame, self.scale, self.config, self.name = inner.num_frame, inner.scale, inner.config, "failing"
        self.padding = inner.padding

    def prepare(self, height, width, batch):
        pass

    def infer(self, x):
        self.calls += 1
        if self.calls > self.after:
            raise RuntimeError("backend exploded")
        return self.inner.infer(x)

    def timings(self):
        return {}


def test_a_failing_stage_stops_the_run_and_leaves_no_output(make_clip, tmp_path, tiny_backend):
    src = make_clip("f.mp4", frames=8)
    out = tmp_path / "out.mp4"
    with pytest.raises(RuntimeError, match="exploded"):
        upscale(src, out, backend=FailingBackend(tiny_backend, after=3))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.mp4"]


def test_png_folder_to_video_and_video_to_png_folder(make_clip, tmp_path, tiny_backend):
    src = make_clip("v.mp4", frames=4, width=16, height=12)
    frames_out = tmp_path / "frames"
    upscale(src, frames_out, backend=tiny_backend)
    pngs = sorted(frames_out.glob("*.png"))
    assert [p.name for p in pngs] == [f"{i:08d}.png" for i in range(4)]
    assert read_png(pngs[0]).shape == (3, 48, 64)
    video = tmp_path / "back.mkv"
    upscale(frames_out, video, backend=tiny_backend, runner=RunnerSettings(tile=32, overlap=8),
            encoder=EncoderSettings(codec="ffv1"))
    import av

    with av.open(str(video)) as c:
        fr = list(c.decode(video=0))
    assert len(fr) == 4 and (fr[0].width, fr[0].height) == (256, 192)
    assert fr[0].format.name == "yuv444p"  # RGB frames are written without chroma subsampling
