"""``--frame-rate R``: a folder of frames plays at R (as ffmpeg's ``-framerate R -i %04d.jpg``), every frame's time
exact in the output; refused for a video, and a bad value is one line, exit 2.  A job carries it in its key.

Every folder played at 25 frames a second, and nothing could change it: a 24 fps animation came out too short.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from fractions import Fraction

import pytest

from tests.jobs.helpers import WindowBackend
from tests.video.test_frame_folders import frames_of
from vsr.cli import main

TINY = ["--weights", "random", "--config", "edvr-tiny", "--threads", "1", "--quiet"]


def ffprobe(path) -> tuple[dict, list[Fraction]]:
    """The video stream's ``r_frame_rate``, ``time_base`` and ``nb_read_frames``, and every frame's time."""
    out = json.loads(subprocess.run(
        ["ffprobe", "-v", "error", "-select_streams", "v:0", "-count_frames", "-show_entries",
         "stream=r_frame_rate,time_base,nb_read_frames:frame=pts", "-of", "json", str(path)],
        capture_output=True, text=True, check=True).stdout)
    stream = out["streams"][0]
    tb = Fraction(stream["time_base"])
    return stream, sorted(Fraction(f["pts"]) * tb for f in out["frames"])


@pytest.mark.parametrize("suffix", [".mp4", ".mkv"])
def test_a_jpeg_folder_at_23_976_keeps_every_frame_s_time(tmp_path, capsys, suffix):
    folder = frames_of(tmp_path / "f", ".jpg", 4)
    out = tmp_path / f"o{suffix}"
    assert main(["upscale", str(folder), str(out), *TINY, "--frame-rate", "23.976"]) == 0, capsys.readouterr().err
    stream, times = ffprobe(out)
    assert stream["r_frame_rate"] == "24000/1001" and stream["nb_read_frames"] == "4"
    exact = [Fraction(1001 * i, 24000) for i in range(4)]
    if suffix == ".mp4":
        assert times == exact and stream["time_base"] == "1/24000"
    else:  # (Matroska counts milliseconds)
        assert times == [Fraction(round(t * 1000), 1000) for t in exact]


@pytest.mark.parametrize("value", ["0", "-24", "nan", "fast", "1001"])
def test_a_bad_frame_rate_is_one_line_exit_2(tmp_path, capsys, value):
    folder = frames_of(tmp_path / "f", ".jpg", 2)
    assert main(["upscale", str(folder), str(tmp_path / "o.mp4"), *TINY, f"--frame-rate={value}"]) == 2
    err = capsys.readouterr().err
    assert err == (f"vsr: error: --frame-rate must be frames a second above 0 and at most 1000 (24, 23.976, "
                   f"30000/1001), not {value!r}\n")
    assert not (tmp_path / "o.mp4").exists()


@pytest.mark.parametrize("command", ["upscale", "preview"])
def test_a_frame_rate_for_a_video_is_refused_never_ignored(make_clip, tmp_path, capsys, command):
    src = make_clip("in.mp4", width=16, height=12, frames=3)
    out = ["--out", str(tmp_path / "p.png")] if command == "preview" else [str(tmp_path / "o.mp4")]
    assert main([command, str(src), *out, *TINY[:4], "--frame-rate", "24"]) == 2
    assert capsys.readouterr().err == (f"vsr: error: --frame-rate is for a folder of frames, whose pictures have no "
                                       f"times; {src} has its own timestamps\n")


def test_a_job_of_a_folder_keeps_its_rate_and_counts_it_in_its_key(tmp_path):
    from tests.jobs.test_chunks import ENCODER, REQUEST, run_job
    from vsr.jobs import JobSpec
    from vsr.pipeline.runner import RunnerSettings

    folder = frames_of(tmp_path / "f", ".jpg", 5)
    runner = RunnerSettings(frame_rate="24000/1001")
    spec = JobSpec.from_settings(folder, tmp_path / "job.mp4", REQUEST, ENCODER, runner)
    assert JobSpec.from_json(spec.to_json()) == spec
    assert spec.key != replace(spec, runner=RunnerSettings()).key != replace(spec, runner=RunnerSettings(
        frame_rate="25")).key
    run_job(spec, WindowBackend(), chunk_frames=2)
    stream, times = ffprobe(tmp_path / "job.mp4")
    assert stream["r_frame_rate"] == "24000/1001" and times == [Fraction(1001 * i, 24000) for i in range(5)]


def test_jobs_add_takes_a_folder_of_frames_as_one_job_at_its_rate(make_clip, tmp_path, capsys):
    """A folder of frames and no video was "no videos in folder"; a job file's ``frame-rate`` is the option's."""
    from tests.jobs.test_cli_jobs import TINY as JOB_TINY, added_ids
    from vsr.jobs.spec import JobSpec
    from vsr.jobs.store import JobStore

    folder = frames_of(tmp_path / "shot", ".jpg", 3)
    jf = tmp_path / "batch.toml"
    jf.write_text(f'inputs = ["{folder}"]\nout_dir = "files"\n[upscale]\nframe-rate = 29.97\n')
    store = tmp_path / "q.db"
    for args in ([folder, "--out-dir", tmp_path / "out", "--frame-rate", "30000/1001"], [jf]):
        rc = main(["jobs", "add", *map(str, args), "--store", str(store), *JOB_TINY])
        out = capsys.readouterr()
        assert rc == 0, out.err
        with JobStore(store) as s:
            spec = JobSpec.from_json(s.spec_json(int(added_ids(out.out)[0])))
        assert spec.input == str(folder) and spec.output.endswith("/shot.mkv")  # (ffv1: not MP4)
        assert spec.runner.frame_rate == "30000/1001"
    video = make_clip("in.mp4", width=16, height=12, frames=3)
    assert main(["jobs", "add", str(video), "--out-dir", str(tmp_path / "o"), "--store", str(store), *JOB_TINY,
                 "--frame-rate", "24"]) == 2
    assert "vsr: error: --frame-rate is for a folder of frames" in capsys.readouterr().err
