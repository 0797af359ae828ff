"""The status line before the first frame (issue 25): a person hears within a second what vsr prepares and for
how long; on a terminal one line rewritten in place, in a log one line per phase; ``--quiet`` says nothing."""

from __future__ import annotations

import fcntl
import io
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from vsr.cli.status import CLEAR, StatusLine

REPO = Path(__file__).resolve().parents[2]
TINY = ["--weights", "random", "--config", "edvr-tiny", "--threads", "1"]
# a fresh process reaches its first status line in ~0.4 s on the 2-core machine under a load of 5 (issue 25):
# the bound leaves room for a busier machine, still far below the ~30 s of silence there was
FIRST_LINE_S = 2.0
# ...what vsr says as it prepares a run on the default backend (the split plan)
PHASES = ("choosing backend", "opening input", "loading model", "exporting ONNX", "building plan",
          "loading sessions", "warming up")
BUILDS = ("exporting ONNX", "building plan")  # said only where the export and the plan are not cached yet


def built(phases) -> list:
    """``phases`` less the two said only for an export and a plan not cached yet (the engine folder is shared)."""
    return [p for p in phases if p not in BUILDS]


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_into_a_log_each_phase_is_one_line_once():
    out = io.StringIO()
    with StatusLine(out) as s:
        for name in ("loading model", "loading model", "warming up"):
            s.phase(name)
    assert out.getvalue() == "vsr: loading model...\nvsr: warming up...\n"


def test_into_a_log_the_checking_phases_are_left_out():
    """A run refused while it checks its input leaves only its error line in a log."""
    out = io.StringIO()
    with StatusLine(out, log_after="loading model") as s:
        for name in ("choosing backend", "opening input", "loading model", "building plan", "warming up"):
            s.phase(name)
    assert out.getvalue() == "vsr: building plan...\nvsr: warming up...\n"
    terminal = FakeTerminal()
    with StatusLine(terminal, log_after="loading model", interval_s=60) as s:
        s.phase("choosing backend")
    assert terminal.getvalue() == f"{CLEAR}vsr: choosing backend... 0 s{CLEAR}"  # shown, then cleared


def test_on_a_terminal_the_line_is_rewritten_with_the_seconds_then_cleared():
    out = FakeTerminal()
    s = StatusLine(out, interval_s=0.05)
    s.phase("building plan")
    time.sleep(0.3)
    s.close()
    text = out.getvalue()
    assert "\n" not in text and text.startswith(f"{CLEAR}vsr: building plan... 0 s") and text.endswith(CLEAR)
    assert text.count(CLEAR) >= 4  # redrawn while the phase lasts (about every interval), and cleared at the end


def test_on_a_terminal_other_output_clears_the_line_first(monkeypatch):
    out = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", out)
    with StatusLine(interval_s=60) as s:
        s.phase("loading model")
        print("vsr: warning: something", file=sys.stderr)
        assert sys.stderr is not out
    assert sys.stderr is out  # given back
    assert out.getvalue() == f"{CLEAR}vsr: loading model... 0 s{CLEAR}vsr: warning: something\n"


def test_quiet_writes_nothing():
    out = FakeTerminal()
    with StatusLine(out, quiet=True) as s:
        s.phase("warming up")
    assert out.getvalue() == ""


def read_pty(fd: int, proc: subprocess.Popen, t0: float) -> list[tuple[float, bytes]]:
    """What the process wrote to the terminal ``fd``, with when it arrived (seconds since ``t0``)."""
    chunks = []
    while True:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                data = os.read(fd, 65536)
            except OSError:  # the process closed its end
                break
            if not data:
                break
            chunks.append((time.monotonic() - t0, data))
        elif proc.poll() is not None:
            break
    return chunks


@pytest.fixture
def small_clip(make_clip):
    return make_clip("in.mp4", width=16, height=12, frames=2)


def test_upscale_on_a_terminal_says_what_it_prepares_within_a_second(small_clip, tmp_path):
    main, tty = pty.openpty()
    fcntl.ioctl(tty, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a terminal has a size
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "vsr", "upscale", small_clip, tmp_path / "out.mp4", *TINY],
                            cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=tty)
    os.close(tty)
    try:
        chunks = read_pty(main, proc, t0)
    finally:
        os.close(main)
    assert proc.wait(timeout=600) == 0
    first_at, first = chunks[0]
    assert first.startswith(f"{CLEAR}vsr: {PHASES[0]}... 0 s".encode()) and first_at < FIRST_LINE_S, chunks[:3]
    text = b"".join(c for _, c in chunks).decode()
    before_bar = text[:text.index("upscale:")]
    assert built(p for p in PHASES if f"{CLEAR}vsr: {p}... " in before_bar) == built(PHASES)
    assert before_bar.rstrip("\r").endswith(CLEAR)  # the status is gone before the progress bar is drawn
    assert "2/2" in text and "bottleneck:" in text  # the bar and the summary follow


def test_upscale_into_a_log_writes_each_phase_once_without_carriage_returns(small_clip, tmp_path):
    p = subprocess.run([sys.executable, "-m", "vsr", "upscale", small_clip, tmp_path / "out.mp4", *TINY], cwd=REPO,
                       capture_output=True, timeout=600)  # bytes: text mode would turn each \r into \n
    err = p.stderr.decode()
    assert p.returncode == 0, err
    before_bar = err[:err.index("upscale:")].removesuffix("\r")  # tqdm's own, before its bar
    lines = [ln for ln in before_bar.splitlines() if not ln.startswith("vsr: warning:")]
    # once the model is loaded: what came before was checking input, options and weights (a refused run logs only
    # its error line)
    assert built(lines) == [f"vsr: {name}..." for name in built(PHASES[3:])] and "\r" not in before_bar


def test_export_and_plan_are_said_only_where_they_are_made(small_clip, tmp_path):
    """A run whose export and plan are cached said "exporting ONNX" and "building plan" all the same (the step
    was named before the cache was looked at): a person waited for an export that never came."""
    env = {**os.environ, "VSR_ENGINE_DIR": str(tmp_path / "engines")}
    said = []
    for run in ("first", "again"):
        p = subprocess.run([sys.executable, "-m", "vsr", "upscale", small_clip, tmp_path / f"{run}.mp4", *TINY],
                           cwd=REPO, capture_output=True, text=True, timeout=600, env=env)
        assert p.returncode == 0, p.stderr
        said.append([ln for ln in p.stderr.splitlines() if ln.startswith("vsr: ") and ln.endswith("...")])
    assert said[0] == [f"vsr: {name}..." for name in PHASES[3:]]
    assert said[1] == [f"vsr: {name}..." for name in built(PHASES[3:])]


def test_upscale_quiet_prints_no_status(small_clip, tmp_path):
    p = subprocess.run([sys.executable, "-m", "vsr", "upscale", small_clip, tmp_path / "out.mp4", *TINY, "--quiet"],
                       cwd=REPO, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    # --weights random warns that its output is meaningless; nothing else is said
    assert [ln for ln in p.stderr.splitlines() if "seeded random weights" not in ln] == []


def test_jobs_run_says_what_each_chunk_prepares(small_clip, tmp_path):
    store, out = tmp_path / "jobs.db", tmp_path / "out"
    out.mkdir()
    add = subprocess.run([sys.executable, "-m", "vsr", "jobs", "add", small_clip, "--out-dir", out, "--store", store,
                          *TINY], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert add.returncode == 0, add.stderr
    p = subprocess.run([sys.executable, "-m", "vsr", "jobs", "run", "--until-empty", "--store", store], cwd=REPO,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if not ln.startswith("vsr: warning:")]
    said = [ln.removeprefix("vsr: job 1 chunk 0: ").removesuffix("...") for ln in lines[:-2]]
    assert built(said) == ["choosing backend", *built(PHASES[2:]), "upscaling frames 0:2"], lines
    assert lines[-2].startswith("vsr: job 1 chunk 0 (frames 0:2) done in ") and lines[-1].startswith("vsr: job 1 done")
    # its time is the preparing and the upscaling, the time `vsr jobs report` shows (it said 103.6 s beside the
    # report's 71.16 s, naming neither)
    took = re.match(r".* done in ([\d.]+) s \(([\d.]+) s preparing: model, export, plan, warm-up; ([\d.]+) s "
                    r"upscaling\); 2/2 frames of job 1, [\d.]+ fps; no other job left$", lines[-2])
    assert took, lines[-2]
    total, preparing, upscaling = map(float, took.groups())
    assert abs(preparing + upscaling - total) <= 0.11 and preparing > 0
    shown = subprocess.run([sys.executable, "-m", "vsr", "jobs", "report", "1", "--json", "--store", store], cwd=REPO,
                           capture_output=True, text=True, timeout=600)
    assert shown.returncode == 0, shown.stderr
    assert f"{json.loads(shown.stdout)['summary']['wall_s']:.1f}" == f"{upscaling:.1f}"
    (tmp_path / "again").mkdir()
    add = subprocess.run([sys.executable, "-m", "vsr", "jobs", "add", small_clip, "--out-dir", tmp_path / "again",
                          "--store", store, *TINY], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert add.returncode == 0, add.stderr
    quiet = subprocess.run([sys.executable, "-m", "vsr", "jobs", "run", "--until-empty", "--quiet", "--store", store],
                           cwd=REPO, capture_output=True, text=True, timeout=600)
    assert quiet.returncode == 0 and (tmp_path / "again" / small_clip.name).is_file()
    assert [ln for ln in quiet.stderr.splitlines() if "seeded random weights" not in ln] == []
