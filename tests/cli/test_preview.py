"""`vsr preview`: the frames it shows are the frames `vsr upscale` writes, its pictures hold them, its estimate is
the measured per-frame time and encoded size scaled to the clip, and bad options are one line before any work."""

from __future__ import annotations

import base64
import re
import subprocess
import sys
import warnings
from pathlib import Path

import cv2
import numpy as np
import pytest

from tests.data import VIDEOS, need
from vsr.errors import InputError
from vsr.pipeline import RunnerSettings, upscale
from vsr.quality.preview import Preview, frame_at, preview, steady_spacing
from vsr.quality.preview_page import page, side_by_side, write_preview
from vsr.video import EncoderSettings, open_source

LOSSLESS = EncoderSettings(codec="ffv1")


def decoded(path: Path) -> list[np.ndarray]:
    src = open_source(path)
    try:
        return [np.clip(f.rgb * 255 + 0.5, 0, 255).astype(np.uint8).transpose(1, 2, 0) for f in src.frames()]
    finally:
        src.close()


def test_the_preview_frames_are_what_vsr_upscale_writes(tmp_path, make_clip, tiny_backend):
    clip = make_clip("clip.mkv", codec="ffv1", width=24, height=16, frames=9)
    p = preview(clip, at="4", frames=3, backend=tiny_backend, encoder=LOSSLESS)
    assert p.first == 3 and len(p.sr) == len(p.lr) == len(p.bicubic) == 3 and p.total_frames == 9
    upscale(clip, tmp_path / "ref.mkv", backend=tiny_backend, encoder=LOSSLESS, runner=RunnerSettings(frames=(3, 6)))
    assert all(np.array_equal(a, b) for a, b in zip(p.sr, decoded(tmp_path / "ref.mkv")))
    assert p.sr[0].shape == (64, 96, 3) and p.bicubic[0].shape == (64, 96, 3)
    assert p.seconds_per_frame > 0 and p.warmup_s > 0 and len(p.video_bytes) == 3
    assert p.memory_plan["tile"] is None  # whole frames, as the full run would


def test_the_estimate_scales_the_measured_frames_to_the_clip():
    frame = np.zeros((8, 10, 3), np.uint8)
    p = Preview(Path("x.mp4"), 0, [frame] * 3, [frame] * 3, [frame] * 3, total_frames=101, warmup_s=4.0,
                seconds_per_frame=0.5, video_bytes=[900, 100, 300], other_bytes=50, memory_plan={}, config=None)
    assert p.estimate_s == pytest.approx(4.0 + 101 * 0.5)
    assert p.estimate_bytes == 900 + 100 * 200 + 50  # one key frame, the rest at the mean of the others
    assert p.bits_per_pixel == pytest.approx(8 * 1300 / (3 * 80))
    unknown = Preview(Path("x.mp4"), 0, [frame] * 2, [frame] * 2, [frame] * 2, None, 1.0, 1.0, [1, 1], 0, {}, None)
    assert unknown.estimate_s is None and unknown.estimate_bytes is None


def test_the_estimate_leaves_out_what_the_engine_cache_now_keeps(tmp_path, monkeypatch, make_clip):
    """The split plan's first preview exports the model and builds the plan into the engine cache; the run after
    it finds both there, so the estimate counts the warm-up less those builds (a VNNI CPU's int8 plan: most of
    the first preview's 92 s of warm-up, which put its estimate at 2.07x the real run's time). A preview that
    finds them cached has next to nothing to leave out, and says nothing of it."""
    from vsr.backends import SplitOptions, open_backend
    from vsr.cli.preview import summary

    monkeypatch.setenv("VSR_ENGINE_DIR", str(tmp_path / "engines"))
    clip = make_clip("clip.mkv", codec="ffv1", width=24, height=16, frames=9)
    runs = []
    for _ in range(2):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            backend = open_backend("random", "edvr-tiny", SplitOptions(threads=1))
        runs.append(preview(clip, frames=3, backend=backend, encoder=LOSSLESS))
    first, again = runs
    assert 0 < first.cached_build_s < first.warmup_s
    assert first.estimate_s == pytest.approx(first.warmup_s - first.cached_build_s + first.first_frame_s
                                             + 8 * first.seconds_per_frame)
    assert "which the run finds in the engine cache" in summary(first)
    assert again.cached_build_s < 0.05 < first.cached_build_s  # export and plan came from the cache: looked up
    assert "engine cache" not in summary(again)


def test_the_time_per_frame_leaves_out_the_last_frames_spacing():
    """A run on a device hands each result on once the next batch is queued, the last as it ends (so did the
    CPU's, then: a 480p int8 preview's frames came 8.9 s apart, then 4.7 s, and their mean put the time per
    frame a quarter short of the run's 9.1 s): the last spacing is left out."""
    assert steady_spacing([15.3, 24.2, 28.9]) == pytest.approx(8.9)
    assert steady_spacing([1.0, 3.0, 5.0, 5.5]) == pytest.approx(2.0)
    assert steady_spacing([1.0, 2.5]) == pytest.approx(1.5)  # 2 frames: the one spacing there is
    frame = np.zeros((8, 10, 3), np.uint8)
    p = Preview(Path("x.mp4"), 0, [frame] * 3, [frame] * 3, [frame] * 3, total_frames=101, warmup_s=30.0,
                seconds_per_frame=9.0, video_bytes=[1], other_bytes=0, memory_plan={}, config=None,
                cached_build_s=20.0, first_frame_s=15.0)
    assert p.estimate_s == pytest.approx(10.0 + 15.0 + 100 * 9.0)  # the warm-up less the cached builds


def test_at_takes_a_frame_or_a_time():
    assert frame_at("120", 25.0, 1000) == 120
    assert frame_at("12.5s", 20.0, 1000) == 250
    assert frame_at("1:02.5", 20.0, 5000) == 1250
    assert frame_at("0:01:00", 10.0, 5000) == 600
    assert frame_at(None, 25.0, 101) == 50
    for bad in ("soon", "1:2:3:4", "-3s", "nan s", "12.5"):
        with pytest.raises(InputError, match="--at must be"):
            frame_at(bad, 25.0, 1000)
    with pytest.raises(InputError, match="only 100 frames"):
        frame_at("100", 25.0, 100)


@pytest.mark.parametrize("at, want", [("1.5s", 20), ("0:00.95", 9), ("0:01.97", 29), ("0.5s", 5)])
def test_at_a_time_is_the_frame_on_screen_then_on_a_variable_frame_rate(tmp_path, at, want):
    """10 frames at 10 fps, then 20 at 20 fps: at 1.5 s the 21st frame is on screen (as vsr upscale --start 1.5
    begins there), where 1.5 s x the average 15 fps said frame 22."""
    from tests.video.test_clock import VFR, clip
    from vsr.video.clock import frame_times

    source = open_source(clip(tmp_path / "v.mkv", VFR))
    try:
        info = source.info
        assert frame_at(at, float(info.rate), 30, lambda t: frame_times(source, t)) == want
        with pytest.raises(InputError, match=r"^--at 3s: the source is only 2\.0\d* s long"):
            frame_at("3s", float(info.rate), 30, lambda t: frame_times(source, t))
    finally:
        source.close()


@pytest.mark.parametrize("at,message", [
    ("5s", "--at 5s: the source is only 1 s long (its last frame starts at 0.97 s)"),
    ("0:01", "--at 0:01: the source is only 1 s long (its last frame starts at 0.97 s)"),
    ("35", "--at 35: the source has only 35 frames"),
])
def test_an_at_past_the_end_is_said_in_its_own_unit(at, message):
    """A time past the end is said in seconds: `--at 5s` of a 1-second clip said "the source has only 35 frames"."""
    with pytest.raises(InputError) as e:
        frame_at(at, 35.0, 35)
    assert str(e.value) == message


def test_the_png_and_the_html_page_hold_bicubic_and_vsr(tmp_path, make_clip, tiny_backend):
    clip = make_clip("clip.mkv", codec="ffv1", width=24, height=16, frames=4)
    p = preview(clip, at="0", frames=2, backend=tiny_backend, encoder=LOSSLESS)
    img = side_by_side(p)
    k = len(p.sr) // 2
    h, w = p.sr[k].shape[:2]
    # the full frames at 1:1 (small enough to fit), below the labels' rows and beside the crop's frame
    assert np.array_equal(img[h - 1, :2], p.bicubic[k][h - 1, :2])
    assert np.array_equal(img[h - 1, w + 8: w + 10], p.sr[k][h - 1, :2])
    page_text = page(p, "estimate line")
    images = [cv2.imdecode(np.frombuffer(base64.b64decode(b), np.uint8), cv2.IMREAD_COLOR)[:, :, ::-1]
              for b in re.findall(r"base64,([A-Za-z0-9+/=]+)", page_text)]
    assert len(images) == 2 and np.array_equal(images[0], p.bicubic[k]) and np.array_equal(images[1], p.sr[k])
    assert 'type="range"' in page_text and "estimate line" in page_text
    out = write_preview(p, tmp_path / "p.png")
    assert np.array_equal(cv2.imread(str(out))[:, :, ::-1], img)
    with pytest.raises(InputError, match="exists"):
        write_preview(p, out)
    assert [f.name for f in tmp_path.iterdir() if "partial" in f.name] == []


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vsr", "preview", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=600)


def test_vsr_preview_writes_the_png_and_prints_the_estimate(tmp_path, make_clip):
    clip = make_clip("clip.mp4", width=24, height=16, frames=6)
    res = run_cli(str(clip), "--weights", "random", "--config", "edvr-tiny", "--backend", "torch", "--frames", "2",
                  "--out", "p.png", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert re.search(r"whole run \(6 frames\): about \d+m\d\ds on this machine, output about [\d.]+ KB", res.stdout)
    assert "memory plan: whole frames" in res.stdout
    assert cv2.imread(str(tmp_path / "p.png")) is not None


@pytest.mark.parametrize("args,message", [
    (["--at", "soon"], "--at must be a frame index"),
    (["--frames", "1"], "--frames must be >= 2"),
    (["--out", "p.jpg"], "--out must end in .png or .html"),
    (["--scene-cuts", "missing.txt"], "cannot read --scene-cuts file"),
])
def test_bad_options_are_one_line(tmp_path, make_clip, args, message):
    clip = make_clip("clip.mp4", width=24, height=16, frames=3)
    res = run_cli(str(clip), "--weights", "random", "--config", "edvr-tiny", *args, cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and message in res.stderr, res.stderr
    assert list(tmp_path.iterdir()) == [clip]


@pytest.mark.parametrize("source,message", [
    ("nope.mp4", "vsr: error: no such file or folder: nope.mp4"),
    ("-", "vsr: error: vsr preview needs a file: it reads its input three times"),
])
def test_the_input_is_checked_before_the_default_picture(tmp_path, source, message):
    """As `vsr upscale` does: a missing input is the error, not the preview.png an earlier preview left (it said
    "preview.png exists (pass --overwrite ...)", and the user passing --overwrite heard of the input only then)."""
    (tmp_path / "preview.png").write_bytes(b"an earlier preview")
    res = run_cli(source, "--weights", "random", "--config", "edvr-tiny", cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and res.stderr.startswith(message), res.stderr
    assert (tmp_path / "preview.png").read_bytes() == b"an earlier preview"


def test_preview_chooses_the_weights_as_upscale_does_and_says_so(tmp_path):
    clip = VIDEOS / "h264_256x240_35fps_1s_noaudio.mp4"
    need(clip)
    res = run_cli(str(clip), "--backend", "torch", "--threads", "1", "--frames", "2", "--out", "p.png", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    said = [ln for ln in res.stderr.splitlines() if ln.startswith("vsr: weights")]
    assert said == ["vsr: weights: real (h264 at 0.137 bits/pixel, blockiness 1.78: a block codec's grid shows; "
                    "--weights default to override)"]
    assert cv2.imread(str(tmp_path / "p.png")) is not None


def test_the_zoomed_region_is_detail_that_holds_still():
    """Issue 40: the "most detailed region" fell on a motion-blurred hand.  A moving texture (more contrast than
    anything else in each frame, 6 pixels a frame) beside a still, softer one: the crop is the still one."""
    from vsr.quality.preview_page import detail_crop

    rng = np.random.default_rng(0)
    still = rng.integers(40, 220, (32, 32, 3)).astype(np.uint8)  # left
    moving = rng.integers(0, 256, (32, 48, 3)).astype(np.uint8)  # right, sliding past
    frames = []
    for t in range(3):
        f = np.full((32, 96, 3), 128, np.uint8)
        f[:, :32], f[:, 64:] = still, moving[:, 6 * t:6 * t + 32]
        frames.append(f)
    assert detail_crop(frames[1], 128, 128, 4) == (0, 256)  # the frame alone: the moving texture
    assert detail_crop(frames[1], 128, 128, 4, (frames[0], frames[2])) == (0, 0)  # with its neighbours: still


@pytest.mark.parametrize("suffix", [None, ".mp4"])
def test_the_size_estimate_counts_the_fonts_the_output_holds(tmp_path, tiny_backend, suffix):
    # an anime release's fonts are megabytes that every output in Matroska copies whole (the estimate left
    # them out: 13 KB said, 776 KB written); .mp4 drops them
    font = tmp_path / "font.ttf"
    font.write_bytes(bytes(range(256)) * 1000)
    clip = tmp_path / "fonts.mkv"
    subprocess.run(["ffmpeg", "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=24x16:rate=25:duration=0.24",
                    "-attach", str(font), "-metadata:s:t:0", "mimetype=font/ttf", "-c:v", "libx264",
                    "-pix_fmt", "yuv420p", str(clip)], check=True)
    p = preview(clip, frames=2, backend=tiny_backend, suffix=suffix)
    video = p.video_bytes[0] + 5 * float(np.mean(p.video_bytes[1:]))
    assert p.total_frames == 6 and p.other_bytes == (256_000 if suffix is None else 0)
    assert p.estimate_bytes == int(video + p.other_bytes)


def test_a_y4m_source_is_previewed_as_a_matroska_run(tmp_path, tiny_backend):
    """Y4M is raw video, a pipe format vsr writes only with --format y4m: the default container of the whole run
    (the source's) is then Matroska, as for PNG frames; the hostile sweep found `vsr preview in.y4m` failing
    with "yuv4mpegpipe holds none of the video codecs vsr writes" (issue 37)."""
    from tests.video.test_source_inputs import y4m

    src = y4m(tmp_path / "in.y4m", 16, 12, 4)
    p = preview(src, frames=2, backend=tiny_backend)
    assert len(p.sr) == 2 and p.encoder is not None and p.encoder.codec == "libx264"


def _cut_at_packet(clip, k: int, out):
    """``clip`` up to its ``k``-th packet (from 0): the header's duration stays, the frames from ``k`` on go."""
    pos = subprocess.run(["ffprobe", "-v", "error", "-show_entries", "packet=pos", "-of", "csv=p=0", str(clip)],
                         capture_output=True, text=True, check=True).stdout.split()
    out.write_bytes(clip.read_bytes()[:int(pos[k])])
    return out


@pytest.mark.parametrize("frames, says", [(9, "cut.mkv ended early: it declares 0.36 s (about 9 frames at 25 fps)"),
                                          (3, "cut.mkv has only 2 frames (it declares 3): the preview shows frames "
                                              "0..1")])
def test_a_source_shorter_than_its_header_is_said_in_the_previews_words(tmp_path, make_clip, tiny_backend, frames,
                                                                        says):
    """A Matroska file cut short (its header's duration says 9 or 3 frames, 2 decode): said once, in the run's
    words for a file that ended early (2 frames or more missing), else in the preview's -- never the run's
    warning about a ``--frames 0:3`` the user never gave (`vsr preview` has no such range; the hostile sweep
    found the old wording) -- and the whole run's estimate counts the frames there are."""
    cut = _cut_at_packet(make_clip("whole.mkv", codec="ffv1", width=24, height=16, frames=frames), 2,
                         tmp_path / "cut.mkv")
    with pytest.warns(UserWarning) as said:
        p = preview(cut, at="0", frames=3, backend=tiny_backend, encoder=LOSSLESS)
    texts = [str(w.message) for w in said]
    assert len(p.sr) == 2 and p.total_frames == 2
    assert [t for t in texts if "cut.mkv" in t] == [t for t in texts if says in t] and len(texts) == 1, texts
    assert not any("--frames" in t or "wrote" in t for t in texts), texts


def test_a_source_with_one_frame_where_it_declares_more_is_one_error(tmp_path, make_clip, tiny_backend):
    """The same cut at the first frame: the preview's one error, not the run's warning that it wrote 1 frame
    before it (the hostile sweep, seed 53: a warning "wrote 1, frames 0:1", then "a preview needs 2 frames")."""
    cut = _cut_at_packet(make_clip("whole.mkv", codec="ffv1", width=24, height=16, frames=9), 1,
                         tmp_path / "cut.mkv")
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        with pytest.raises(InputError) as e:
            preview(cut, at="0", frames=3, backend=tiny_backend, encoder=LOSSLESS)
    assert str(e.value) == (f"{cut} has 1 frame (it declares 9): a preview times 2 frames or more "
                            "(vsr upscale upscales it)")
    assert [str(w.message) for w in said] == []


def test_a_cut_y4m_is_said_once_though_the_preview_opens_it_twice(tmp_path, tiny_backend):
    """The preview reads the source for its length and again for the run: its warning about the dropped part frame
    comes once, not once per open (the hostile sweep, seed 41)."""
    from tests.video.test_source_inputs import y4m

    src = y4m(tmp_path / "cut.y4m", 16, 12, 4, cut=16 * 12 * 3 // 4)  # 3.5 frames
    with pytest.warns(UserWarning) as said:
        p = preview(src, frames=2, backend=tiny_backend)
    cut = [str(w.message) for w in said if "ends 150 bytes into frame 3, which is dropped" in str(w.message)]
    assert len(p.sr) == 2 and len(cut) == 1, [str(w.message) for w in said]


@pytest.mark.parametrize("command", ["preview", "upscale", "eval"])
def test_the_help_names_every_kind_of_frames_read(capsys, command):
    """IN of vsr preview, eval's --gt and --int8-calibration said 'folder of *.png frames' of folders of JPEG,
    TIFF, ... too."""
    from vsr.cli import main

    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "*.png frames" not in text and "folder of PNG frames" not in text and "(*.png, in" not in text
    assert "folder of frames (PNG, JPEG, TIFF, BMP or WebP) that calibrates" in text
