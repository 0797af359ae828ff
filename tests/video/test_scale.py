"""``--scale S``: outputs S times the source (1 to 4), the model's x4 downscaled (vsr.video.resize).

The reference is independent of swscale, which does the downscale: PyTorch's antialiased bicubic of the x4 output
written losslessly by the same run without ``--scale``.  The backend is a bicubic x4 of each window's middle frame
(OpenCV), so the x4 frames are smooth like a model's, not the nearest-neighbour blocks of the jobs' test backend.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np
import pytest
import torch

from tests.data import REDS, VIDEOS, need
from tests.jobs.test_chunks import REQUEST, decoded, run_job
from vsr.errors import InputError
from vsr.jobs.spec import JobSpec
from vsr.pipeline import RunnerSettings, upscale
from vsr.video import EncoderSettings
from vsr.video.hdr10plus import scaled
from vsr.video.resize import factor_of, output_size, parse_scale, sample_aspect, scaled_size

REPO = Path(__file__).resolve().parents[2]
CLIP = VIDEOS / "h264_aac_320x240_29.97fps_1.2s_realshort.mp4"
RUNNER = RunnerSettings(scene_cuts="off", frames=(0, 3))


class BicubicBackend:
    """EDVR's interface (3-frame windows, x4); the output: OpenCV's bicubic x4 of the middle frame."""

    name = "bicubic-test"
    num_frame = 3
    scale = 4
    padding = "reflection_circle"

    def prepare(self, height, width, batch, phase=None, planes=None):
        pass

    def infer(self, x: np.ndarray) -> np.ndarray:
        out = [cv2.resize(w[1].transpose(1, 2, 0), None, fx=4, fy=4, interpolation=cv2.INTER_CUBIC) for w in x]
        return np.clip(np.stack(out).transpose(0, 3, 1, 2), 0, 1).astype(np.float32)

    def timings(self):
        return {}

    def step_stats(self):
        return {}


def run(src: Path, dst: Path, runner: RunnerSettings = RUNNER, **encoder):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return upscale(src, dst, backend=BicubicBackend(), encoder=EncoderSettings(**encoder), runner=runner)


def png_frames(folder: Path) -> np.ndarray:
    return np.stack([cv2.imread(str(p))[..., ::-1] for p in sorted(folder.glob("*.png"))]).astype(np.float64)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    return float(10 * np.log10(255.0 ** 2 / np.mean((a - b) ** 2)))


def antialiased(frames: np.ndarray, height: int, width: int) -> np.ndarray:
    x = torch.from_numpy(frames).permute(0, 3, 1, 2)
    y = torch.nn.functional.interpolate(x, size=(height, width), mode="bicubic", antialias=True, align_corners=False)
    return y.clamp(0, 255).round().permute(0, 2, 3, 1).numpy()


@pytest.mark.parametrize("text, value", [("2", "2"), ("1.5", "3/2"), ("3/2", "3/2"), (" 4 ", "4"), ("1", "1"),
                                         (2.5, "5/2"), (1.1, "11/10"), ("2160p", "2160p"), ("0720P", "720p"),
                                         (" 1080 p ", "1080p")])
def test_scale_values(text, value):
    assert parse_scale(text) == value


@pytest.mark.parametrize("text, said", [("0.5", "needs no model"), ("4.01", "does not upscale further"),
                                        ("two", "must be a number"), ("1/0", "must be a number"), ("", "number"),
                                        ("nan", "number"), ("inf", "number"), ("1e400", "further"),
                                        ("9" * 5000, r"not '9{21}\.\.\.'$")])
def test_a_scale_out_of_range_is_one_line(text, said):
    with pytest.raises(InputError, match=said):
        parse_scale(text)


@pytest.mark.parametrize("size, scale, pix_fmt, out", [
    ((1920, 1080), 2, "yuv420p", (3840, 2160)), ((1280, 720), Fraction(3, 2), "yuv420p", (1920, 1080)),
    ((1280, 720), 3, "yuv420p10le", (3840, 2160)), ((180, 320), 4, "yuv420p", (720, 1280)),
    ((321, 181), 1, "yuv444p", (321, 181)),  # exact: kept, odd or not
    ((321, 181), 1, "yuv420p", (322, 182)),  # whole chroma samples
    ((720, 480), Fraction(3, 2), "yuv411p", (1080, 720)), ((722, 480), Fraction(3, 2), "yuv411p", (1084, 720)),
    ((196, 104), Fraction(13, 10), "yuv420p", (254, 136)),  # 254.8 and 135.2: the nearest even
])
def test_output_sizes(size, scale, pix_fmt, out):
    assert output_size(*size, Fraction(scale), pix_fmt) == out


def test_the_models_frame_must_fit_ffmpegs_frames_too():
    assert scaled_size(1920, 1080, None, 4, "yuv420p") == (7680, 4320)
    assert scaled_size(1920, 1080, Fraction(4), 4, "yuv420p") == (7680, 4320)
    assert scaled_size(3840, 2160, Fraction(1), 4, "yuv420p") == (3840, 2160)  # a 4K source: its x4 fits
    with pytest.raises(InputError, match="model's x4 frame, 32000x18000, is larger than FFmpeg's"):
        scaled_size(8000, 4500, Fraction(1), 4, "yuv420p")
    with pytest.raises(InputError, match="does not upscale further"):
        scaled_size(100, 100, Fraction(5), 4, "yuv420p")


def test_the_aspect_follows_a_rounded_side():
    assert sample_aspect(None, 1920, 1080, 3840, 2160) is None
    assert sample_aspect(Fraction(8, 9), 720, 480, 1440, 960) == Fraction(8, 9)
    sar = sample_aspect(None, 196, 104, 254, 136)
    assert Fraction(254, 136) * sar == Fraction(196, 104)  # the display shape is the source's
    sar = sample_aspect(Fraction(8, 9), 722, 480, 1084, 720)
    assert Fraction(1084, 720) * sar == Fraction(722, 480) * Fraction(8, 9)


def test_hdr10plus_windows_follow_a_fractional_scale():
    head = bytes([0xB5, 0x00, 0x3C, 0x00, 0x01, 0x04, 0x01])
    window = [10, 20, 109, 219, 60, 120, 0, 50, 40, 30, 0]  # corners, centre, rotation, axes, overlap
    widths = (16, 16, 16, 16, 16, 16, 8, 16, 16, 16, 1)

    def payload(values):
        bits, n = 2, 2  # num_windows = 2 (the first window's fields are not in the payload)
        for v, w in zip(values, widths):
            bits, n = bits << w | v, n + w
        pad = -n % 8
        return head + (bits << pad).to_bytes((n + pad) // 8, "big")

    def fields(p):
        bits, total, at, out = int.from_bytes(p, "big"), len(p) * 8, 58, []
        for w in widths:
            out.append((bits >> (total - at - w)) & ((1 << w) - 1))
            at += w
        return out

    p = payload(window)
    assert fields(p) == window
    assert scaled(p, Fraction(4)) == scaled(p, 4)  # a whole number as before
    assert fields(scaled(p, 4)) == [40, 80, 439, 879, 242, 482, 0, 200, 160, 120, 0]
    # x1.5: pixel 10 becomes pixels 15-16, pixel 109 ends at 164; the centre pixel 60 covers 90-91, its middle 90
    assert fields(scaled(p, Fraction(3, 2))) == [15, 30, 164, 329, 90, 180, 0, 75, 60, 45, 0]


def test_a_scaled_output_is_the_x4_output_downscaled(tmp_path):
    need(REDS)
    run(REDS, tmp_path / "x4")
    run(REDS, tmp_path / "x2", scale="2")
    run(REDS, tmp_path / "x13", scale="13/10")
    x4 = png_frames(tmp_path / "x4")
    lr = cv2.imread(str(sorted(REDS.glob("*.png"))[0]))
    h, w = lr.shape[:2]
    assert x4.shape[1:3] == (4 * h, 4 * w)
    for name, scale in (("x2", Fraction(2)), ("x13", Fraction(13, 10))):
        out = png_frames(tmp_path / name)
        oh, ow = out.shape[1:3]
        assert (ow, oh) == output_size(w, h, scale, None) and len(out) == len(x4) == 3
        ref = antialiased(x4, oh, ow)
        # swscale's Lanczos against PyTorch's antialiased bicubic: two good filters, within a code or two
        assert psnr(out, ref) > 42 and np.abs(out - ref).mean() < 1.0, (name, psnr(out, ref))
        # and not a point sample of the x4 frame (what a resize without antialiasing would be closer to)
        nearest = np.stack([cv2.resize(f, (ow, oh), interpolation=cv2.INTER_NEAREST) for f in x4])
        assert np.abs(out - ref).mean() < np.abs(nearest - ref).mean() / 2


def test_a_scaled_video_keeps_everything_else(tmp_path):
    """Timestamps, durations, audio as they were; the size, the display shape; the report says both."""
    need(CLIP)
    runner = RunnerSettings(scene_cuts="off", frames=(0, 6))
    run(CLIP, tmp_path / "x4.mkv", runner, codec="ffv1")
    report = run(CLIP, tmp_path / "x13.mkv", runner, codec="ffv1", scale="13/10")
    a, b = decoded(tmp_path / "x4.mkv"), decoded(tmp_path / "x13.mkv")
    assert [s["type"] for s in a.values()] == [s["type"] for s in b.values()]
    for i, s in a.items():
        if s["type"] == "video":
            assert [f[:3] for f in s["items"]] == [f[:3] for f in b[i]["items"]]  # pts, duration, pix_fmt
            assert {f[3:5] for f in b[i]["items"]} == {(416, 312)}  # 320x240 x1.3
        else:
            assert s["items"] == b[i]["items"]
    with av.open(str(tmp_path / "x13.mkv")) as c:
        cc = c.streams.video[0].codec_context
        assert cc.sample_aspect_ratio in (None, Fraction(1))  # 416x312 is 4:3 exactly
    assert report.settings["size"] == "416x312" and report.settings["scale"] == "13/10"
    assert report.encoder_line() == "encoder: ffv1, yuv420p, 416x312 (--scale 13/10)"


def test_a_rounded_size_keeps_the_display_shape(tmp_path):
    need(REDS)
    run(REDS, tmp_path / "out.mp4", scale="5/4", pix_fmt="yuv420p")  # 180x320 -> 226x400, 104x196 -> 130x246
    lr = cv2.imread(str(sorted(REDS.glob("*.png"))[0]))
    h, w = lr.shape[:2]
    with av.open(str(tmp_path / "out.mp4")) as c:
        cc = c.streams.video[0].codec_context
        ow, oh = cc.width, cc.height
        assert (ow, oh) == output_size(w, h, Fraction(5, 4), "yuv420p") and (ow * h != oh * w)
        assert Fraction(ow, oh) * cc.sample_aspect_ratio == Fraction(w, h)


def test_a_chunked_job_at_a_scale_equals_the_single_run(tmp_path):
    need(CLIP)
    encoder = EncoderSettings(codec="ffv1", scale="3/2")
    runner = RunnerSettings(scene_cuts="off", frames=(0, 6))
    spec = JobSpec.from_settings(CLIP, tmp_path / "job.mkv", REQUEST, encoder, runner)
    again = JobSpec.from_json(spec.to_json())
    assert again == spec and again.encoder.scale == "3/2"
    assert spec.key != JobSpec.from_settings(CLIP, tmp_path / "job.mkv", REQUEST, EncoderSettings(codec="ffv1"),
                                             runner).key
    backend = BicubicBackend()
    assert len(run_job(spec, backend, chunk_frames=3)) == 2
    run(CLIP, tmp_path / "single.mkv", runner, codec="ffv1", scale="3/2")
    job, single = decoded(tmp_path / "job.mkv"), decoded(tmp_path / "single.mkv")
    assert [s["items"] for s in job.values()] == [s["items"] for s in single.values()]
    assert {f[3:5] for f in job[0]["items"]} == {(480, 360)}


def test_a_job_without_a_scale_keeps_its_key():
    """A job added before ``--scale`` existed (its stored encoder has no such field) names the same chunks."""
    spec = JobSpec.from_settings("a.mp4", "b.mkv", REQUEST, EncoderSettings(), RunnerSettings())
    data = spec.to_dict()
    del data["encoder"]["scale"]
    assert JobSpec.from_dict(data).key == spec.key


def test_the_command_line_and_a_job_file_take_it(tmp_path):
    need(CLIP)
    cmd = [sys.executable, "-m", "vsr", "upscale", str(CLIP), str(tmp_path / "out.mp4"), "--weights", "random",
           "--config", "edvr-tiny", "--backend", "torch", "--frames", "0:2", "--quiet", "--report",
           str(tmp_path / "r.json")]
    bad = subprocess.run(cmd + ["--scale", "8"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and bad.stderr.splitlines()[-1] == (
        "vsr: error: --scale 8: from 1 to 4 (EDVR upscales x4; vsr does not upscale further)")
    assert not (tmp_path / "out.mp4").exists()
    ok = subprocess.run(cmd + ["--scale", "2"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stderr
    with av.open(str(tmp_path / "out.mp4")) as c:
        assert (c.streams.video[0].width, c.streams.video[0].height) == (640, 480)
    assert json.loads((tmp_path / "r.json").read_text())["settings"]["size"] == "640x480"
    job = tmp_path / "job.toml"
    job.write_text(f'inputs = ["{CLIP}"]\nout_dir = "{tmp_path / "jobs"}"\n[upscale]\nscale = 1.5\n'
                   'weights = "random"\nconfig = "edvr-tiny"\n')
    add = subprocess.run([sys.executable, "-m", "vsr", "jobs", "add", str(job), "--store", str(tmp_path / "s.db")],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert add.returncode == 0, add.stderr
    rows = subprocess.run([sys.executable, "-m", "vsr", "jobs", "list", "--json", "--store", str(tmp_path / "s.db")],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert rows.returncode == 0 and len(json.loads(rows.stdout)) == 1


@pytest.mark.parametrize("name, out", [("ffv1.mkv", "out.mkv"), ("qtrle.mov", "pngs")])
def test_the_alpha_is_downscaled_with_the_picture(tmp_path, name, out):
    """A source's alpha at --scale 2: the x4 bicubic alpha downscaled, within a few levels of its bicubic x2 (PNG
    frames: that bicubic itself, upscaled from the source)."""
    from tests.video.test_alpha import alphas, source

    src = source(tmp_path, name)
    run(src, tmp_path / out, RunnerSettings(scene_cuts="off"), scale="2", codec="ffv1" if "." in out else None)
    a, top = alphas(src)
    b, b_top = alphas(tmp_path / out)
    assert b.shape == (a.shape[0], 2 * a.shape[1], 2 * a.shape[2])
    want = torch.nn.functional.interpolate(torch.from_numpy(a / top)[:, None], scale_factor=2, mode="bicubic",
                                           align_corners=False)[:, 0].clamp(0, 1).numpy()
    assert np.abs(b / b_top - want).mean() < 0.005 and np.abs(b / b_top - want).max() < 0.05  # (0.002, 0.016 measured)


@pytest.mark.parametrize("size, scale, factor, said", [
    ((1920, 1080), "2160p", Fraction(2), None), ((1280, 720), "2160p", Fraction(3), None),
    ((1280, 720), "1080p", Fraction(3, 2), None), ((1080, 1920), "2160p", Fraction(2), None),  # upright: its width
    ((640, 360), "2160p", Fraction(4), "a 360p source becomes 1440p (EDVR upscales x4 at most)"),
    ((3840, 2160), "1080p", Fraction(1), "the source is 2160p already; kept at its size"),
    ((720, 480), "1080p", Fraction(9, 4), None), ((720, 480), "2", Fraction(2), None), ((720, 480), None, 4, None)])
def test_a_height_makes_a_factor_of_each_source(size, scale, factor, said):
    got, line = factor_of(scale, *size)
    assert got == factor and (line is None if said is None else said in line)


def test_a_batch_of_sizes_into_one_height(tmp_path):
    """Two sources, 320x240 and 256x240, at --scale 480p: both 480 lines; a 1440p target beyond x4 said once."""
    need(CLIP)
    other = VIDEOS / "h264_256x240_35fps_1s_noaudio.mp4"
    need(other)
    run(CLIP, tmp_path / "a.mkv", codec="ffv1", scale="480p")
    run(other, tmp_path / "b.mkv", codec="ffv1", scale="480p")
    for name, size in (("a.mkv", (640, 480)), ("b.mkv", (512, 480))):
        with av.open(str(tmp_path / name)) as c:
            assert (c.streams.video[0].width, c.streams.video[0].height) == size
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        upscale(CLIP, tmp_path / "c.mkv", backend=BicubicBackend(),
                encoder=EncoderSettings(codec="ffv1", scale="1440p"), runner=RUNNER)
    lines = [str(w.message) for w in said if "--scale" in str(w.message)]
    assert lines == ["--scale 1440p: a 240p source becomes 960p (EDVR upscales x4 at most)"]


def test_the_encoder_line_names_the_size_scale_set():
    from vsr.video import open_source
    from vsr.video.encoder_choice import OutputContainer, choose_encoder

    need(CLIP)
    source = open_source(CLIP)
    source.close()
    mp4 = OutputContainer.named("out.mp4")
    assert choose_encoder(mp4, EncoderSettings(scale="720p"), source.info).describe().endswith("yuv420p, 960x720")
    assert choose_encoder(mp4, EncoderSettings(), source.info).describe().endswith("preset medium, yuv420p")
