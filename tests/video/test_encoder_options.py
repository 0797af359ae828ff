"""Encoder options are checked when the encoder opens: one line naming the option, exit 2, nothing written;
an output too large for the codec says so; `--quiet` keeps SVT-AV1 and x265 silent."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.data import VIDEOS
from vsr.cli import main
from vsr.errors import InputError
from vsr.video import EncoderSettings, open_sink, open_source

TINY = ["--weights", "random", "--config", "edvr-tiny", "--backend", "torch", "--threads", "1", "--quiet"]
REPO = Path(__file__).resolve().parents[2]
RANDOM_WEIGHTS_WARNING = "vsr: warning: using seeded random weights"

BAD = {
    "unknown option": ("o.mp4", ["-x", "nosuchoption=1"], "has no option 'nosuchoption' (-x nosuchoption=1)"),
    "bad x264-params value": ("o.mp4", ["-x", "x264-params=ref=abc"], "rejected -x x264-params=ref=abc"),
    "unknown x264-params key": ("o.mp4", ["-x", "x264-params=nosuch=3"], "nosuch"),
    "crf too high for libx264": ("o.mp4", ["--crf", "99"], "--crf 99 is out of range for libx264 (0..51)"),
    "crf as -x": ("o.mp4", ["-x", "crf=52"], "-x crf=52 is out of range for libx264"),
    "crf too high for libsvtav1": ("o.webm", ["--crf", "64"], "out of range for libsvtav1 (0..63)"),
    "crf too high for libx265": ("o.mkv", ["--codec", "libx265", "--crf", "60"], "(0..51)"),
    "crf on a lossless codec": ("o.mkv", ["--codec", "ffv1", "--crf", "20"], "ffv1 has no option 'crf' (--crf 20)"),
    "unknown preset": ("o.mp4", ["--preset", "fastest"], "--preset fastest is not a libx264 preset"),
    "bad crf value": ("o.mp4", ["-x", "crf=abc"], "libx264 rejected its options"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_encoder_options_give_one_line_naming_them(case, make_clip, tmp_path, capsys):
    name, args, expected = BAD[case]
    src = make_clip("clip.mp4", frames=2)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    rc = main(["upscale", str(src), str(tmp_path / name), *TINY, *args])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("vsr: error:")]
    assert rc == 2 and len(errors) == 1, err
    assert expected in errors[0]
    assert [line for line in err.splitlines() if not line.startswith(RANDOM_WEIGHTS_WARNING)] == errors
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_the_same_bad_option_is_caught_every_time(make_clip, tmp_path):
    """FFmpeg's log would fold a repeated message into the first; each sink must still see its own."""
    source = open_source(make_clip("clip.mp4", frames=2))
    bad = EncoderSettings(options=(("x264-params", "ref=abc"),))
    for i in range(3):
        with pytest.raises(InputError, match="ref = abc"):
            open_sink(tmp_path / f"o{i}.mp4", source.info, bad)
    source.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clip.mp4"]


@pytest.mark.parametrize("codec,suffix,width,height,limit", [
    ("libx264", ".mp4", 16000, 16000, "FFmpeg encodes frames of at most"),  # the 64000x64000
    ("ffv1", ".mkv", 16000, 16000, "FFmpeg encodes frames of at most"),
    ("libx264", ".mp4", 4100, 100, "at most 16384x16384"),  # libx264's own limit
    ("libsvtav1", ".webm", 100, 2200, "at most 16384x8704"),
])
def test_an_output_too_large_for_the_codec_says_so(make_clip, tmp_path, codec, suffix, width, height, limit):
    source = open_source(make_clip("clip.mp4", frames=2))
    info = dataclasses.replace(source.info, width=width, height=height)
    with pytest.raises(InputError) as e:
        open_sink(tmp_path / f"o{suffix}", info, EncoderSettings(codec=codec), scale=4)
    source.close()
    msg = str(e.value)
    assert f"the output, {4 * width}x{4 * height}, is too large for {codec}" in msg and limit in msg
    assert "rejected its options" not in msg
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clip.mp4"]


def test_quiet_webm_output_prints_nothing(make_clip, tmp_path):
    """SVT-AV1 prints its settings (about 20 lines) to stderr itself; --quiet silences it."""
    src = make_clip("clip.mp4", frames=2)
    env = {k: v for k, v in os.environ.items() if k != "SVT_LOG"}
    res = subprocess.run([sys.executable, "-m", "vsr", "upscale", str(src), str(tmp_path / "out.webm"), *TINY],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    assert res.stdout == ""
    assert [line for line in res.stderr.splitlines() if not line.startswith(RANDOM_WEIGHTS_WARNING)] == []
    assert open_source(tmp_path / "out.webm").info.frames_estimate == 2


def real_excerpt(path: Path, frames: int, width: int, height: int) -> Path:
    """The first ``frames`` frames of the real short clip, scaled down to ``width`` x ``height`` (libx264)."""
    import av

    src = VIDEOS / "h264_aac_320x240_29.97fps_1.2s_realshort.mp4"
    if not src.exists():
        pytest.skip(f"{src} not here")
    with av.open(str(src)) as c, av.open(str(path), "w") as oc:
        vs = oc.add_stream("libx264", rate=c.streams.video[0].average_rate)
        vs.width, vs.height, vs.pix_fmt = width, height, "yuv420p"
        for i, frame in enumerate(c.decode(video=0)):
            if i == frames:
                break
            small = frame.reformat(width, height, "yuv420p")
            small.pts, small.time_base = frame.pts, frame.time_base
            oc.mux(vs.encode(small))
        oc.mux(vs.encode(None))
    return path


def test_quiet_x265_output_prints_nothing(tmp_path):
    """x265 prints its settings and statistics (about 25 lines) to stderr itself; --quiet silences it."""
    import av

    if "libx265" not in av.codecs_available:
        pytest.skip("this PyAV build has no libx265")
    src = real_excerpt(tmp_path / "clip.mp4", 3, 32, 24)
    res = subprocess.run([sys.executable, "-m", "vsr", "upscale", str(src), str(tmp_path / "out.mkv"), *TINY,
                          "--codec", "libx265"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    assert res.stdout == ""
    assert [line for line in res.stderr.splitlines() if not line.startswith(RANDOM_WEIGHTS_WARNING)] == []
    assert open_source(tmp_path / "out.mkv").info.frames_estimate == 3


def test_quiet_keeps_the_users_x265_params_and_log_level():
    from vsr.video.encoder_open import quiet_options

    assert quiet_options("libx265", {"x265-params": "aq-mode=3"}, True) == {"x265-params": "aq-mode=3:log-level=error"}
    assert quiet_options("libx265", {"x265-params": "log-level=info"}, True) == {"x265-params": "log-level=info"}
    assert quiet_options("libx265", {"crf": "20"}, False) == {"crf": "20"}
    assert quiet_options("libx264", {}, True) == {}


def test_no_thread_runs_at_a_real_time_priority_while_webm_encodes(make_clip, tmp_path, tiny_backend, monkeypatch):
    """SVT-AV1 puts its threads under SCHED_FIFO 99 where it may (as root): each frame's write sees every thread
    of the process under a normal policy."""
    from vsr.pipeline import upscale
    from vsr.video.sink import VideoSink
    from vsr.video.threads import REAL_TIME, thread_policies

    seen = []
    real_write = VideoSink.write

    def write(self, *args):
        real_write(self, *args)
        seen.append(sorted(set(thread_policies().values())))

    monkeypatch.setattr(VideoSink, "write", write)
    src = make_clip("c.mp4", frames=4, width=32, height=24)
    upscale(src, tmp_path / "out.webm", backend=tiny_backend)
    assert len(seen) == 4 and all(not set(p) & set(REAL_TIME) for p in seen), seen
    assert all(p == [os.SCHED_OTHER] or set(p) <= {os.SCHED_OTHER, os.SCHED_BATCH, os.SCHED_IDLE} for p in seen)
