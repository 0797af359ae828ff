"""A run's 4:2:0 output: FFmpeg's own conversion of the run's RGB output of the same frames, seamless tiles, the
chroma siting in the stream, and the same planes whether the host or the CUDA runtime (emulated) made them."""

from __future__ import annotations

import json
import os
import subprocess
import warnings
from pathlib import Path

import av
import cv2
import numpy as np
import pytest

from tests.data import NEEDS_SHARED, REDS
from tests.video.test_planes import assert_close_to_ffmpeg, ffmpeg_planes
from vsr.pipeline import RunnerSettings, upscale
from vsr.video import EncoderSettings

LOSSLESS = EncoderSettings(codec="ffv1", pix_fmt="yuv420p")


@pytest.fixture(scope="module")
def frames_dir(tmp_path_factory) -> Path:
    files = sorted(REDS.glob("*.png"))[:3]
    if len(files) < 3:
        pytest.skip(NEEDS_SHARED)
    folder = tmp_path_factory.mktemp("lr")
    for i, p in enumerate(files):  # 48 x 64 crops of real frames
        cv2.imwrite(str(folder / f"{i:08d}.png"), cv2.imread(str(p))[40:88, 100:164])
    return folder


def planes_of(video: Path) -> list[list[np.ndarray]]:
    out = []
    with av.open(str(video)) as c:
        for f in c.decode(video=0):
            out.append([np.frombuffer(p, np.uint8).reshape(p.height, p.line_size)[:, : p.width].copy()
                        for p in f.planes])
    return out


def test_yuv420p_output_is_ffmpegs_conversion_of_the_runs_rgb_output(tmp_path, frames_dir, tiny_backend):
    upscale(frames_dir, tmp_path / "rgb", backend=tiny_backend)
    upscale(frames_dir, tmp_path / "out.mkv", backend=tiny_backend, encoder=LOSSLESS)
    pngs = sorted((tmp_path / "rgb").glob("*.png"))
    got = planes_of(tmp_path / "out.mkv")
    assert len(pngs) == len(got) == 3
    for png, planes in zip(pngs, got):  # PNG frames in: BT.709 limited range out
        assert_close_to_ffmpeg(planes, ffmpeg_planes(png, "yuv420p", 1, False, 192, 256))
    probe = subprocess.run(["ffprobe", "-v", "error", "-show_entries", "stream=chroma_location,color_space",
                            "-of", "json", str(tmp_path / "out.mkv")], capture_output=True, text=True, check=True)
    assert json.loads(probe.stdout)["streams"][0] == {"color_space": "bt709", "chroma_location": "left"}


def test_tiles_are_seamless_in_subsampled_chroma(tmp_path, frames_dir, tiny_backend):
    upscale(frames_dir, tmp_path / "whole.mkv", backend=tiny_backend, encoder=LOSSLESS,
            runner=RunnerSettings(tile=0, frames=(0, 2)))
    report = upscale(frames_dir, tmp_path / "tiled.mkv", backend=tiny_backend, encoder=LOSSLESS,
                     runner=RunnerSettings(tile=40, overlap=8, batch=4, frames=(0, 2)))
    assert report.settings["tiles_per_frame"] == 4
    for a, b in zip(planes_of(tmp_path / "whole.mkv"), planes_of(tmp_path / "tiled.mkv")):
        assert max(np.abs(x.astype(int) - y).max() for x, y in zip(a, b)) <= 1


def test_planes_made_by_the_emulated_cuda_runtime_are_the_hosts(tmp_path, frames_dir):
    """The CUDA runtime on its CPU emulation converts on its device; the torch backend's RGB is converted on the
    host: the same frames within one level (the two backends' RGB differ in the last float bits)."""
    from vsr.backends import BackendRequest, CudaOptions, TorchOptions

    outs = {}
    for name, options in (("cuda", CudaOptions(device="cpu", precision="fp32", output="float32")),
                          ("torch", TorchOptions(device="cpu", threads=1))):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            report = upscale(frames_dir, tmp_path / f"{name}.mkv", encoder=LOSSLESS,
                             backend=BackendRequest("random", "edvr-tiny", options),
                             runner=RunnerSettings(tile=40, overlap=8, batch=2))
        outs[name] = planes_of(tmp_path / f"{name}.mkv")
        facts = report.settings["backend_facts"]
        assert facts.get("download") == ("planes yuv420p" if name == "cuda" else None)
    assert len(outs["cuda"]) == 3
    for a, b in zip(outs["cuda"], outs["torch"]):
        assert max(np.abs(x.astype(int) - y).max() for x, y in zip(a, b)) <= 1


def test_the_post_stage_converts_on_the_cores_the_backend_leaves():
    from types import SimpleNamespace

    from vsr.backends import CudaOptions, SplitOptions, TorchOptions
    from vsr.pipeline.post import post_threads

    cores = os.cpu_count() or 1
    on = lambda options: post_threads(SimpleNamespace(options=options))  # noqa: E731
    assert on(SplitOptions()) == 1 and on(TorchOptions(threads=1)) == max(1, cores - 1)
    assert on(CudaOptions(device="cpu")) is None and on(TorchOptions(device="cuda:1")) is None  # all of them
    assert post_threads(object()) is None


@pytest.mark.parametrize("tile", [None, 32])
def test_the_post_stage_is_set_up_before_the_first_frame_for_the_types_the_frames_use(tmp_path, frames_dir,
                                                                                        monkeypatch, tile):
    """prepare_post loads the compiled pass the run's frames call (numba compiles one version per argument types:
    the planes' views are contiguous or not with the tile), so its first-call cost is no frame's."""
    import numba

    import vsr.pipeline.post as post
    from vsr.pipeline.batches import Result, Slot
    from vsr.pipeline.tiles import tile_grid
    from vsr.video import open_sink, open_source

    calls = []
    real = post.convert_tile
    monkeypatch.setattr(post, "convert_tile", lambda rgb, fmt, out, *a: calls.append(
        tuple(numba.typeof(x) for x in (rgb, *out))) or real(rgb, fmt, out, *a))
    source = open_source(frames_dir)  # 48 x 64
    sink = open_sink(tmp_path / "out.mkv", source.info, LOSSLESS, scale=4)
    tiles = tile_grid(48, 64, tile, 8)
    post.prepare_post(sink, 48, 64, 4, tiles[0])
    y = np.random.default_rng(0).random((1, 3, 4 * (tiles[0].y1 - tiles[0].y0), 4 * (tiles[0].x1 - tiles[0].x0)),
                                        dtype=np.float32)
    list(post.hr_frames(iter([Result((Slot(0, 0, 1, tiles[0]),), y)]), sink, 48, 64, 4, len(tiles)))
    sink.abort()
    source.close()
    assert len(calls) == 2 and calls[0] == calls[1], calls
