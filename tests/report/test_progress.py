"""Progress into a log file: plain lines at a modest rate, no ``\\r`` redraws; on a terminal the tqdm bar."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

from vsr.report.progress import LineProgress, progress_bar

REPO = Path(__file__).resolve().parents[2]


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_into_a_log_a_line_at_most_every_30_s_and_one_at_the_end():
    log, clock = io.StringIO(), Clock()
    bar = LineProgress(total=480, desc="upscale", unit="frame", stream=log, every_s=30, clock=clock)
    for _ in range(100):  # 100 frames at 2 frames/s: 50 s
        clock.t += 0.5
        bar.update(1)
    bar.close()
    bar.close()
    assert log.getvalue().splitlines() == ["upscale: 60/480 frame (12%), 2 frame/s, ETA 03:30",
                                           "upscale: 100/480 frame (21%), 2 frame/s, ETA 03:10"]
    assert "\r" not in log.getvalue()


def test_the_postfix_a_written_line_and_disable():
    log, clock = io.StringIO(), Clock()
    with LineProgress(total=None, desc="train", unit="it", stream=log, clock=clock) as bar:
        clock.t = 4
        bar.update(8)
        bar.set_postfix(loss="0.0123", refresh=False)
        bar.write("iter 8: validated")
    assert log.getvalue().splitlines() == ["iter 8: validated", "train: 8 it, 2 it/s, loss=0.0123"]
    quiet = io.StringIO()
    with progress_bar(total=3, desc="x", unit="it", disable=True, stream=quiet) as bar:
        bar.update(3)
    assert quiet.getvalue() == ""


def test_a_terminal_gets_the_bar():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    from tqdm import tqdm

    with progress_bar(total=3, desc="x", unit="it", stream=Tty()) as bar:
        assert isinstance(bar, tqdm)
    assert isinstance(progress_bar(total=3, desc="x", unit="it", stream=io.StringIO()), LineProgress)


def test_an_upscale_run_into_a_log_file_writes_no_carriage_return(make_clip, tmp_path):
    """Issue 40: `vsr upscale ... 2> run.log` filled the log with the bar's `\\r` redraws."""
    src = make_clip("in.mp4", frames=4)
    log = tmp_path / "run.log"
    with open(log, "w") as f:
        r = subprocess.run([sys.executable, "-m", "vsr", "upscale", str(src), str(tmp_path / "out.mkv"),
                            "--weights", "random", "--config", "edvr-tiny", "--threads", "1"],
                           cwd=REPO, stderr=f, stdout=subprocess.DEVNULL, timeout=300)
    text = log.read_text()
    assert r.returncode == 0, text
    assert "\r" not in text and "\x1b" not in text
    assert "upscale: 4/4 frame (100%)" in text  # the last line says it is done
