"""`vsr jobs` as a person meets it (issue 25): the store in the user's data folder, named by add; add, cancel
and retry saying what they did; `--frames A:B` as upscale; outputs whose container keeps timestamps; encoder
settings refused at add, not hours later; names shown escaped; progress, fps and ETA while a runner works."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import av
import pytest

from vsr.cli import main

from tests.conftest import Audio
from tests.jobs.helpers import added_ids
from tests.jobs.test_chunks import decoded

REPO = Path(__file__).resolve().parents[2]
TINY = ["--weights", "random", "--config", "edvr-tiny", "--backend", "torch", "--threads", "1"]


def jobs(capsys, *args) -> tuple[int, str, str]:
    rc = main(["jobs", *map(str, args)])
    out = capsys.readouterr()
    return rc, out.out, out.err


def run_queue(store: Path | None = None) -> None:
    from vsr.jobs.store import store_path
    from vsr.jobs.worker import WorkerSettings, work

    work(store_path(store), WorkerSettings(poll_s=0.05, until_empty=True, quiet=True))


def test_the_store_is_in_the_user_data_folder_and_add_cancel_retry_say_what_they_did(make_clip, tmp_path, capsys,
                                                                                      monkeypatch):
    src = make_clip("a.mp4", frames=7)
    out = tmp_path / "out"
    rc, text, err = jobs(capsys, "add", src, "--out-dir", out, "--ext", "mkv", "--chunk-frames", 3, *TINY)
    store = tmp_path / "xdg-data" / "vsr" / "jobs.db"  # $XDG_DATA_HOME, set for every jobs test
    assert rc == 0 and store.is_file(), err
    assert text.splitlines() == [f"job 1: {src} -> {out / 'a.mkv'} (7 frames in 3 chunks)",
                                 f"queued 1 job in the job store {store}; `vsr jobs run` works through them"]
    rc, text, _ = jobs(capsys, "cancel", 1)
    assert rc == 0 and text.strip() == (f"cancelled job 1: {src} -> {out / 'a.mkv'} (0 of 3 chunks done; a chunk "
                                        "in progress finishes, none starts)")
    rc, text, _ = jobs(capsys, "retry", 1)
    assert rc == 0 and text.strip() == (f"job 1 queued again: {src} -> {out / 'a.mkv'} (0 of 3 chunks kept, 3 to "
                                        "compute)")
    other = tmp_path / "elsewhere.db"
    for variable in ("VSR_JOBS", "VSR_JOBS_STORE"):  # the older name still works; the newer one wins
        monkeypatch.setenv(variable, str(other))
        rc, text, _ = jobs(capsys, "add", make_clip(f"{variable}.mp4", frames=3), "--out-dir", out, *TINY)
        assert rc == 0 and f"in the job store {other};" in text
    assert [r["input"] for r in json.loads(jobs(capsys, "list", "--json")[1])] == \
        [str(tmp_path / "VSR_JOBS.mp4"), str(tmp_path / "VSR_JOBS_STORE.mp4")]
    monkeypatch.setenv("VSR_JOBS_STORE", "")
    rc, _, err = jobs(capsys, "list")
    assert rc == 2 and err == "vsr: error: VSR_JOBS_STORE is empty: it names the job store's file\n"


def test_frames_a_to_b_is_the_upscale_of_those_frames(make_clip, tmp_path, capsys):
    """`jobs add --frames 3:10` in chunks of 3 decodes to exactly what `vsr upscale --frames 3:10` writes:
    frames, timestamps moved back to the clip's start, and the audio of those frames."""
    src = make_clip("a.mkv", width=24, height=16, frames=14, audio=[Audio()])
    rc, text, err = jobs(capsys, "add", src, "--out-dir", tmp_path / "out", "--frames", "3:10", "--chunk-frames", 3,
                         "--store", tmp_path / "q.db", "--codec", "ffv1", *TINY)
    assert rc == 0 and "(7 frames in 3 chunks)" in text, err
    run_queue(tmp_path / "q.db")
    assert main(["upscale", str(src), str(tmp_path / "single.mkv"), "--frames", "3:10", "--codec", "ffv1", "--quiet",
                 *TINY]) == 0
    got, want = decoded(tmp_path / "out" / "a.mkv"), decoded(tmp_path / "single.mkv")
    assert got == want and len(want[0]["items"]) == 7 and want[1]["type"] == "audio"


def source_times(path: Path) -> list[Fraction]:
    with av.open(str(path)) as c:
        return [f.pts * f.time_base for f in c.decode(video=0)]


def ffprobe_times(path: Path) -> list[str]:
    out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v", "-show_entries", "frame=pts_time",
                          "-of", "csv=p=0", str(path)], capture_output=True, text=True, check=True).stdout
    return [t.strip(",") for t in out.split()]


def test_an_avi_input_gives_an_output_that_keeps_its_timestamps(make_clip, tmp_path, capsys):
    """AVI cannot store H.264's B-frame timestamps (ffprobe reads N/A for every frame of such an output): a job
    of an AVI input writes MP4 when its streams fit MP4, Matroska when not (PCM audio here), with the frame
    times of the source."""
    from tests.conftest import Clip, write_clip

    rate = Fraction(30000, 1001)
    plain = write_clip(tmp_path / "plain.avi", Clip(width=24, height=16, frames=8, codec="mpeg4", rate=rate))
    with_pcm = write_clip(tmp_path / "pcm.avi", Clip(width=24, height=16, frames=8, codec="mpeg4", rate=rate,
                                                     audio=[Audio(codec="pcm_s16le")]))
    store, out = tmp_path / "q.db", tmp_path / "out"
    rc, text, err = jobs(capsys, "add", plain, with_pcm, "--out-dir", out, "--store", store, *TINY)
    assert rc == 0, err
    assert f"-> {out / 'plain.mp4'} (" in text and f"-> {out / 'pcm.mkv'} (" in text
    run_queue(store)
    assert source_times(out / "plain.mp4") == source_times(plain)  # exactly: MP4 keeps the 1001/30000 base
    ms = [abs(a - b) for a, b in zip(source_times(out / "pcm.mkv"), source_times(with_pcm))]
    assert len(ms) == 8 and max(ms) <= Fraction(1, 1000)  # Matroska's millisecond clock
    if shutil.which("ffprobe"):
        assert ffprobe_times(out / "plain.mp4") == ffprobe_times(plain)
        assert "N/A" not in ffprobe_times(out / "pcm.mkv")


@pytest.mark.parametrize("option, message, suffix", [
    (["--crf", "99"], "--crf 99 is out of range for libx264 (0..51)", ".mp4"),
    (["-x", "bogus=1"], "libx264 has no option 'bogus' (-x bogus=1)", ".mp4"),
    (["--codec", "nosuch"], "unknown codec 'nosuch'", ".mp4"),
    (["--ext", "webm", "--codec", "libx264"], "webm cannot hold libx264 video", ".webm"),
])
def test_encoder_settings_upscale_refuses_are_refused_at_add(make_clip, tmp_path, capsys, option, message, suffix):
    """Issue 23: `jobs add` took them and the job failed hours later.  The same words as `vsr upscale`."""
    src = make_clip("a.mp4", frames=3)
    rc, text, err = jobs(capsys, "add", src, "--out-dir", tmp_path / "out", "--store", tmp_path / "q.db", *TINY,
                         *option)
    assert rc == 2 and text == "" and len(err.splitlines()) == 1 and message in err, err
    assert not (tmp_path / "q.db").exists() and not (tmp_path / "out").exists()
    upscale = [o for o in option if o not in ("--ext", "webm")]
    rc = main(["upscale", str(src), str(tmp_path / f"u{suffix}"), *TINY, *upscale, "--quiet"])
    assert message in capsys.readouterr().err and rc == 2


def test_names_are_listed_escaped(make_clip, tmp_path, capsys):
    """Issue 23: a file name's terminal escapes and newlines reached the terminal raw in `vsr jobs list`."""
    name = "evil\x1b[2J\x1b]0;owned\x07\nname.mp4"
    src = make_clip(name, frames=3)
    store = tmp_path / "q.db"
    rc, text, err = jobs(capsys, "add", src, "--out-dir", tmp_path / "out", "--store", store, *TINY)
    assert rc == 0 and "\x1b" not in text and "evil\\x1b[2J\\x1b]0;owned\\x07\\nname" in text, err
    rc, text, _ = jobs(capsys, "list", "--store", store)
    assert rc == 0 and "\x1b" not in text and "\x07" not in text and len(text.splitlines()) == 2
    assert "evil\\x1b[2J\\x1b]0;owned\\x07\\nname.mp4" in text.splitlines()[1]
    rc, _, err = jobs(capsys, "add", src, "--out-dir", tmp_path / "out", "--store", store, *TINY)
    assert rc == 2 and "\x1b" not in err and len(err.splitlines()) == 1  # "... is already the output of job 1"


def test_list_shows_progress_fps_and_eta_while_a_runner_works_and_interrupted_after(make_clip, tmp_path, capsys):
    src = make_clip("a.mp4", width=64, height=48, frames=40)
    store = tmp_path / "q.db"
    rc = jobs(capsys, "add", src, "--out-dir", tmp_path / "out", "--chunk-frames", 40, "--store", store, *TINY)[0]
    assert rc == 0
    p = subprocess.Popen([sys.executable, "-m", "vsr", "jobs", "run", "--store", str(store), "--lease", "1",
                          "--quiet"], cwd=REPO, stderr=subprocess.PIPE, text=True)
    try:
        deadline, row = time.monotonic() + 180, {}
        while time.monotonic() < deadline and p.poll() is None:
            row = json.loads(jobs(capsys, "list", "--json", "--store", store)[1])[0]
            if row["state"] == "running" and 0 < row["frames_done"] < 40 and row["eta_s"]:
                break
            time.sleep(0.1)
        assert row["state"] == "running" and 0 < row["frames_done"] < 40, row
        assert row["fps"] > 0 and row["eta_s"] > 0 and 0 < row["progress"] < 1
        text = jobs(capsys, "list", "--store", store)[1].splitlines()[1].split()
        assert text[1] == "running" and text[2].endswith("%") and text[4] == "0/1" and text[6].count(":") == 2
    finally:
        p.kill()  # kill -9: nothing gives the chunk back
        p.wait()
    row = json.loads(jobs(capsys, "list", "--json", "--store", store)[1])[0]
    assert row["state"] == "interrupted" and row["eta_s"] is None
