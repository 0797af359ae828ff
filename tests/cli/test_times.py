"""`vsr upscale --start T --end T` and `vsr jobs add --start/--end`: the frames shown from T to before T on the
source's clock, resolved to the `--frames A:B` run (the same output, the same job key); wrong times refused in one
line, exit 2, before the model loads."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.video.test_clock import VFR, clip, ffprobe_times
from vsr.backends import BackendRequest
from vsr.cli import main
from vsr.jobs.spec import JobSpec
from vsr.jobs.store import JobStore

TINY = ["--weights", "random", "--config", "edvr-tiny", "--backend", "torch", "--threads", "1"]


def test_an_upscale_from_start_to_end_writes_the_frames_shown_then(tmp_path):
    """1 s to 1.5 s of the VFR clip: its 10 frames at 20 fps (frames 10:20), the output starting at 0 and keeping
    their spacing, the report's frames setting 10:20."""
    src = clip(tmp_path / "v.mkv", VFR)
    out, report = tmp_path / "o.mkv", tmp_path / "r.json"
    assert main(["upscale", str(src), str(out), "--start", "1", "--end", "1.5", "--report", str(report), "--quiet",
                 *TINY]) == 0
    times = ffprobe_times(out)
    assert len(times) == 10 and times[0] == 0
    assert times == pytest.approx([t - 1 for t in ffprobe_times(src)[10:20]], abs=0.002)
    assert json.loads(report.read_text())["settings"]["frames"] == "10:20"


@pytest.fixture
def no_model(monkeypatch):
    """A run that gets as far as loading the model fails the test: refusals come first."""
    def refuse(self):
        raise AssertionError("the model was loaded")
    monkeypatch.setattr(BackendRequest, "open", refuse)


@pytest.mark.parametrize("times, line", [
    (["--start", "1", "--frames", "0:5"], "--frames 0:5 and --start 1 both choose the frames: give one of them"),
    (["--start", "0:02", "--end", "1.5"], "--start 0:02 --end 1.5: the end must be after the start"),
    (["--start", "2", "--end", "2"], "--start 2 --end 2: the end must be after the start"),
    (["--end", "0"], "--end 0: the end must be after the start (0)"),
    (["--start", "-5"], "--start must be a time: seconds (90, 90.5) or [H:]M:S (1:30, 01:30:00.25), not '-5'"),
    (["--end", "soon"], "--end must be a time: seconds (90, 90.5) or [H:]M:S (1:30, 01:30:00.25), not 'soon'"),
    (["--start", "3"], "--start 3: the source is only 3s long (its last frame starts at 2.9s)"),
    (["--start", "1:00", "--end", "2:00"], "--start 1:00 --end 2:00: the source is only 3s long (its last frame "
                                           "starts at 2.9s)"),
])
def test_wrong_times_are_one_line_before_the_model_loads(tmp_path, capsys, no_model, times, line):
    src = clip(tmp_path / "c.mp4")
    assert main(["upscale", str(src), str(tmp_path / "o.mp4"), *times, *TINY]) == 2
    assert capsys.readouterr().err.splitlines() == [f"vsr: error: {line}"]
    assert not (tmp_path / "o.mp4").exists()


def test_a_stream_has_no_times_before_it_is_read(tmp_path, capsys, no_model):
    assert main(["upscale", "-", str(tmp_path / "o.mp4"), "--end", "1", *TINY]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "vsr: error: --end 1: standard input is read once, and its frames' times are known only as it is read; "
        "give --frames A:B"]


def test_a_job_from_start_to_end_is_the_job_of_its_frames(tmp_path):
    """The times are resolved once, when the job is added: the same key (the same chunks) as --frames 10:20."""
    src = clip(tmp_path / "v.mkv", VFR)
    keys, lines = [], []
    for name, frames in (("a", ["--frames", "10:20"]), ("b", ["--start", "0:01", "--end", "1.5"])):
        store = tmp_path / f"{name}.db"
        add = subprocess.run([sys.executable, "-m", "vsr", "jobs", "add", str(src), "--out-dir", str(tmp_path / "out"),
                              "--store", str(store), *frames, *TINY], capture_output=True, text=True, timeout=300)
        assert add.returncode == 0, add.stderr
        lines.append(add.stdout.splitlines()[0])
        with JobStore(store, write=False) as s:
            keys.append(JobSpec.from_json(s.spec_json(s.jobs()[0].id)).key)
    assert keys[0] == keys[1]
    assert lines[0].endswith("(10 frames in 1 chunk)")
    assert lines[1].endswith("(10 frames in 1 chunk, frames 10:20 (1s to 1.5s))")


@pytest.mark.parametrize("times", [["--start", "0.5"], ["--end", "1"]])
def test_times_of_one_picture_are_one_line(tmp_path, capsys, no_model, times):
    """A picture has no times: FFmpeg's reading of it (a still image, with its warning) said 'the source is only
    0.04s long' of --start 0.5, and --frame-rate said that the picture 'has its own timestamps'."""
    photo = tmp_path / "p.jpg"
    subprocess.run(["ffmpeg", "-v", "error", "-f", "lavfi", "-i", "testsrc=size=64x48", "-frames:v", "1", str(photo)],
                   check=True)
    assert main(["upscale", str(photo), str(tmp_path / "big.jpg"), *times, *TINY]) == 2
    said = " ".join(times)
    assert capsys.readouterr().err == (f"vsr: error: {said}: {photo} is one picture, which has no times (they trim a "
                                       "video or a folder of frames)\n")
    assert main(["upscale", str(photo), str(tmp_path / "big.jpg"), "--frame-rate", "24", *TINY]) == 2
    assert capsys.readouterr().err == (f"vsr: error: --frame-rate is for a folder of frames, whose pictures have no "
                                       f"times; {photo} is one picture\n")
