"""`vsr train` from the command line: flags reach the options, a bad name is one line and exit 2."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]


def vsr_train(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vsr", "train", *map(str, args)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("flag, value, choices", [
    ("--loss", "L1", "charbonnier, l1"),
    ("--weight-init", "identiy", "identity, he, torch"),
])
def test_a_bad_name_is_one_line_and_exit_2(make_clip, tmp_path, flag, value, choices):
    clip = make_clip("c.mp4", width=48, height=40, frames=6)
    out = tmp_path / "run"
    r = vsr_train("--config", "edvr-tiny", "--data", clip, "--iters", 2, "--out", out, flag, value)
    assert r.returncode == 2, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("vsr: error: invalid training option") and repr(value) in line and choices in line
    assert not out.exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without a GPU says so")
@pytest.mark.parametrize("device", ["cuda", "cuda:5"])
def test_a_gpu_that_is_not_here_is_one_line_and_exit_2(make_clip, tmp_path, device):
    """torch's "Torch not compiled with CUDA enabled" traceback, at the trainer's first tensor."""
    clip = make_clip("c.mp4", width=48, height=40, frames=6)
    out = tmp_path / "run"
    r = vsr_train("--config", "edvr-tiny", "--data", clip, "--iters", 2, "--out", out, "--device", device)
    assert r.returncode == 2, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith(f"vsr: error: --device {device}: torch sees no GPU here") and not out.exists()


def test_a_short_run_takes_the_flags(make_clip, tmp_path):
    clip = make_clip("c.mp4", width=48, height=40, frames=6)
    out = tmp_path / "run"
    r = vsr_train("--config", "edvr-tiny", "--data", clip, "--iters", 2, "--out", out, "--batch-size", 1,
                  "--patch", 8, "--loss", "l1", "--weight-init", "he", "--warmup", 1, "--val", "none",
                  "--threads", 1, "--workers", 0, "--no-progress")
    assert r.returncode == 0, r.stderr
    options = torch.load(out / "latest.pth", weights_only=True)["vsr"]["options"]
    assert (options["loss"], options["weight_init"], options["lr_patch"], options["batch_size"]) == ("l1", "he", 8, 1)
    assert options["val"] == [] and "vid4" in options["exclude"] and options["workers"] == 0


def test_flags_left_out_give_the_library_defaults():
    from dataclasses import fields

    from vsr.cli import build_parser
    from vsr.cli.train import train_options
    from vsr.train import TrainOptions

    o = train_options(build_parser().parse_args(["train", "--config", "edvr-tiny", "--data", "d", "--iters", "5"]))
    plain = TrainOptions(config="edvr-tiny", data=("d",), out=o.out, iters=5)
    assert o == plain, [f.name for f in fields(o) if getattr(o, f.name) != getattr(plain, f.name)]
    assert o.out == "runs/edvr-tiny"


def _descendants(pid: int) -> set[int]:
    out = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            kids = {int(k) for k in (task / "children").read_text().split()}
        except OSError:
            continue
        for k in kids:
            out |= {k} | _descendants(k)
    return out


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs /proc to see the worker processes")
@pytest.mark.parametrize("how", ["ctrl-c", "sigterm", "kill"])
def test_the_batch_workers_end_with_the_run(make_clip, tmp_path, how):
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it): one line, exit 130, the workers
    stopped; SIGTERM to the training process alone (``kill``, a service manager) takes Ctrl-C's path; SIGKILL of
    it alone: its fork server and workers end by themselves."""
    import os
    import signal
    import time

    clip = make_clip("c.mp4", width=48, height=40, frames=6)
    p = subprocess.Popen([sys.executable, "-m", "vsr", "train", "--config", "edvr-tiny", "--data", str(clip),
                          "--iters", "100000", "--out", str(tmp_path / "run"), "--batch-size", "1", "--patch", "8",
                          "--val", "none", "--threads", "1", "--workers", "1", "--no-progress"],
                         cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         start_new_session=True,  # Ctrl-C at its default, as from a terminal (see test_worker.py)
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    log, deadline = tmp_path / "run" / "log.jsonl", time.time() + 240
    while time.time() < deadline and p.poll() is None and '"train"' not in (log.read_text() if log.exists() else ""):
        time.sleep(0.2)  # until 10 steps have trained on the worker's batches
    seen = _descendants(p.pid)  # the fork server, its worker (and multiprocessing's resource tracker)
    assert len(seen) >= 2, p.communicate()
    if how == "ctrl-c":
        os.killpg(p.pid, signal.SIGINT)
        assert p.wait(timeout=60) == 130 and p.stderr.read().strip() == "vsr: interrupted"
    elif how == "sigterm":
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=60) == 130 and p.stderr.read().strip() == "vsr: interrupted"
    else:
        p.kill()
        p.wait(timeout=60)
    alive = seen
    while alive and time.time() < deadline:
        time.sleep(0.5)
        alive = [pid for pid in alive if Path(f"/proc/{pid}").exists()
                 and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()]
    for pid in alive:  # leave nothing behind, then fail
        os.kill(pid, signal.SIGKILL)
    assert not alive


def test_on_a_clone_alone_it_trains_without_validation_and_says_so(make_clip, tmp_path):
    """The README's `vsr train --init default --data my.mp4 --iters 200`, on a clone (no Vid4 at hand): one line
    saying there is no validation, exit 0, and no "best validation -inf dB at iteration -1"."""
    import os

    clip = make_clip("my.mp4", width=48, height=40, frames=6)
    env = {**os.environ, "VSR_DATA": str(tmp_path / "nothing")}
    r = subprocess.run([sys.executable, "-m", "vsr", "train", "--init", "default", "--data", str(clip), "--iters", "1",
                        "--batch-size", "1", "--patch", "8", "--threads", "1", "--workers", "0", "--no-progress"],
                       cwd=tmp_path, env={**env, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    notes = [line for line in r.stdout.splitlines() if "no validation" in line]
    assert len(notes) == 2 and "VSR_DATA" in notes[0] and notes[1].startswith("vsr train: stopped at iteration 1;")
    assert "-inf" not in r.stdout and "iteration -1" not in r.stdout
    assert (tmp_path / "runs" / "default" / "latest.pth").is_file()  # where --help says it goes


def test_a_validation_set_named_but_absent_is_an_error(make_clip, tmp_path, monkeypatch):
    from vsr.errors import InputError
    from vsr.train import TrainOptions, Trainer

    monkeypatch.setenv("VSR_DATA", str(tmp_path / "nothing"))
    clip = make_clip("c.mp4", width=48, height=40, frames=6)
    with pytest.raises(InputError, match="validation set 'calendar' not found"):
        Trainer(TrainOptions(config="edvr-tiny", data=(str(clip),), out=str(tmp_path / "run"), iters=1,
                             val=("calendar",)))
    assert not (tmp_path / "run").exists()


def test_help_says_where_the_run_folder_goes():
    from vsr.cli import build_parser
    from vsr.cli.train import train_options

    args = build_parser().parse_args(["train", "--init", "default", "--data", "d", "--iters", "5"])
    assert train_options(args).out == "runs/default"
    out = next(a for a in build_parser(["train"])._subparsers._group_actions[0].choices["train"]._actions
               if "--out" in a.option_strings)
    assert "runs/default for --init default" in out.help


def test_a_run_folder_that_cannot_be_written_is_one_line_and_exit_2(make_clip, tmp_path):
    """The write probe of vsr.outfiles (report --html, preview --out, bench --out), before the model or the data
    are touched: it was a PermissionError at the folder's making, exit 1."""
    if not Path("/sys").is_dir():
        pytest.skip("needs /sys, a folder no file can be created in")
    clip = make_clip("c.mp4", width=48, height=40, frames=6)
    r = vsr_train("--config", "edvr-tiny", "--data", clip, "--iters", 2, "--out", "/sys/x", "--val", "none",
                  "--batch-size", 1, "--patch", 8, "--threads", 1, "--workers", 0, "--no-progress")
    assert r.returncode == 2, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("vsr: error: --out /sys/x cannot be made: no folder can be created in /sys")


def test_the_run_folder_is_printed_escaped(make_clip, tmp_path):
    """A newline or an escape sequence in --out is shown (vsr.errors.printable), never sent to the terminal."""
    clip = make_clip("c.mp4", width=48, height=40, frames=6)
    out = tmp_path / "r\x1b[31m\nx"
    r = vsr_train("--config", "edvr-tiny", "--data", clip, "--iters", 1, "--out", out, "--batch-size", 1,
                  "--patch", 8, "--val", "none", "--threads", 1, "--workers", 0, "--no-progress")
    assert r.returncode == 0, r.stderr
    assert "\x1b" not in r.stdout and (out / "latest.pth").is_file()
    lines = r.stdout.splitlines()
    assert len(lines) == 2 and all("r\\x1b[31m\\nx" in line for line in lines)
    assert "run folder" in lines[0] and "checkpoints in" in lines[1]


def test_an_unknown_validation_set_is_refused_with_the_sets_there(make_clip, tmp_path, monkeypatch):
    from vsr.errors import InputError
    from vsr.train import TrainOptions, Trainer

    for name in ("calendar", "city"):
        (tmp_path / "data" / "sequences" / "vid4" / name / "gt").mkdir(parents=True)
    monkeypatch.setenv("VSR_DATA", str(tmp_path / "data"))
    clip = make_clip("c.mp4", width=48, height=40, frames=6)
    with pytest.raises(InputError) as e:
        Trainer(TrainOptions(config="edvr-tiny", data=(str(clip),), out=str(tmp_path / "run"), iters=1,
                             val=("calender",)))
    assert "validation set 'calender' not found" in str(e.value)
    assert "the sets are calendar, city, city-x264 (Vid4) and holdout" in str(e.value)
    assert "did you mean 'calendar'?" in str(e.value) and not (tmp_path / "run").exists()


def test_training_data_that_is_all_excluded_says_so(tmp_path):
    """Vid4's frames (the validation set) given as --data: they were left out without a word, then "no images or
    videos found" of a folder of PNGs."""
    import cv2
    import numpy as np

    from vsr.errors import InputError
    from vsr.train import TrainOptions
    from vsr.train.data import find_sources

    gt = tmp_path / "vid4" / "calendar" / "gt"
    gt.mkdir(parents=True)
    for i in range(3):
        cv2.imwrite(str(gt / f"{i:08d}.png"), np.zeros((16, 16, 3), np.uint8))
    with pytest.raises(InputError, match=r"the images and videos found there \(3\) are excluded, as their paths "
                                         r"hold 'vid4' \(Vid4 is the validation set, never trained on\)"):
        find_sources([gt], exclude=TrainOptions.exclude)
    with pytest.raises(InputError, match=r"\(--exclude\)"):
        find_sources([gt], exclude=("calendar",))
    # a folder by its path: "their paths hold '/tmp/.../gt'" was untrue of a relative --data
    with pytest.raises(InputError, match=re.escape(f"as they are {str(gt)!r} or under it (--exclude)")):
        find_sources([gt], exclude=(str(gt),))


def test_an_empty_video_is_refused_in_the_words_of_the_other_commands(tmp_path):
    """As vsr bench and vsr preview open it (vsr.video.reading.check_video_file); it was FFmpeg's "[Errno
    1094995529] Invalid data found when processing input"."""
    empty = tmp_path / "empty.mp4"
    empty.touch()
    r = vsr_train("--config", "edvr-tiny", "--data", empty, "--iters", 2, "--out", tmp_path / "run")
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == f"vsr: error: not a video file: {empty} is empty" and not (tmp_path / "run").exists()


@pytest.mark.parametrize("sets", [["none", "calendar"], ["holdout", "none"]])
def test_val_none_beside_a_set_is_refused(make_clip, tmp_path, sets):
    """`--val none calendar` validated on calendar: the 'none' that asked for no validation was dropped."""
    clip = make_clip("c.mp4", width=48, height=40, frames=6)
    out = tmp_path / "run"
    r = vsr_train("--config", "edvr-tiny", "--data", clip, "--iters", 1, "--out", out, "--holdout", 0.2,
                  "--val", *sets, "--batch-size", 1, "--patch", 8, "--threads", 1, "--workers", 0, "--no-progress")
    assert r.returncode == 2, r.stderr
    assert r.stderr.splitlines() == [f"vsr: error: --val none means no validation: give it alone, not with "
                                     f"{[s for s in sets if s != 'none'][0]}"]
    assert not out.exists()


# Ctrl-C the moment the first batch worker has been handed to the fork server, the others not yet started (the
# signal sent from there, so that it lands in that stretch every time)
_STOP_AS_WORKERS_START = """
import os, signal, sys
import multiprocessing.context as context
start = context.ForkServerProcess._Popen
def _popen(process):
    made = start(process)
    os.kill(os.getpid(), signal.SIGINT)
    return made
context.ForkServerProcess._Popen = staticmethod(_popen)
from vsr.cli import entry
sys.argv = ["vsr", *sys.argv[1:]]
entry()
"""


def test_ctrl_c_while_the_batch_workers_start_is_one_line(make_clip, tmp_path):
    """A stop as the workers started left them (``__exit__`` does not run when ``__enter__`` fails): a worker
    still reading its start-up data found the training process's semaphores gone and printed a traceback
    (``FileNotFoundError`` in ``SemLock._rebuild``) after `vsr: interrupted`.  Now the start ends, then the
    stop stops them."""
    clip = make_clip("c.mp4", width=48, height=40, frames=6)
    r = subprocess.run([sys.executable, "-c", _STOP_AS_WORKERS_START, "train", "--config", "edvr-tiny",
                        "--data", str(clip), "--iters", "100000", "--out", str(tmp_path / "run"), "--batch-size",
                        "1", "--patch", "8", "--val", "none", "--threads", "1", "--workers", "2", "--no-progress"],
                       cwd=REPO, capture_output=True, text=True, timeout=120,  # (read until every worker's end)
                       # Ctrl-C at its default, as from a terminal: a background job's is ignored, and so the
                       # signal the child sends itself would be
                       preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert r.returncode == 130, r.stderr
    assert "Traceback" not in r.stderr
    assert r.stderr.splitlines()[-1] == "vsr: interrupted"


def test_ctrl_c_once_the_workers_run_leaves_nothing_in_the_temporary_folder(make_clip, tmp_path):
    """multiprocessing's fork server listens on a socket in a folder of its own in the temporary folder
    (``pymp-*/listener-*``), removed by an exit handler that the interrupted run's quick exit skipped: each Ctrl-C
    of `vsr train --workers N` left one in /tmp for good."""
    import os

    clip = make_clip("c.mp4", width=48, height=40, frames=6)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    r = subprocess.run([sys.executable, "-c", _STOP_AS_WORKERS_START, "train", "--config", "edvr-tiny",
                        "--data", str(clip), "--iters", "100000", "--out", str(tmp_path / "run"), "--batch-size",
                        "1", "--patch", "8", "--val", "none", "--threads", "1", "--workers", "2", "--no-progress"],
                       cwd=REPO, capture_output=True, text=True, timeout=120, env={**os.environ, "TMPDIR": str(tmp)},
                       preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert r.returncode == 130, r.stderr
    assert r.stderr.splitlines()[-1] == "vsr: interrupted"
    assert sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*")) == []


# Ctrl-C as the fork server is started (the signal sent from there, so that it lands in that stretch every time)
_STOP_AS_THE_FORK_SERVER_STARTS = _STOP_AS_WORKERS_START.replace(
    "import multiprocessing.context as context\nstart = context.ForkServerProcess._Popen\n",
    "import multiprocessing.forkserver as forkserver\nstart = forkserver.ensure_running\n").replace(
    "def _popen(process):\n    made = start(process)\n    os.kill(os.getpid(), signal.SIGINT)\n",
    "def _popen():\n    os.kill(os.getpid(), signal.SIGINT)\n    made = start()\n").replace(
    "context.ForkServerProcess._Popen = staticmethod(_popen)", "forkserver.ensure_running = _popen")


def test_ctrl_c_while_the_fork_server_starts_stops_the_run(make_clip, tmp_path):
    """The training process ignored Ctrl-C while it started the fork server (which must start with it ignored):
    a Ctrl-C then was lost, and the run went on to its last iteration.  Now it is held back meanwhile, and
    stops the run once the server is started."""
    assert "forkserver.ensure_running = _popen" in _STOP_AS_THE_FORK_SERVER_STARTS
    clip = make_clip("c.mp4", width=48, height=40, frames=6)
    r = subprocess.run([sys.executable, "-c", _STOP_AS_THE_FORK_SERVER_STARTS, "train", "--config", "edvr-tiny",
                        "--data", str(clip), "--iters", "40", "--out", str(tmp_path / "run"), "--batch-size", "1",
                        "--patch", "8", "--val", "none", "--threads", "1", "--workers", "2", "--no-progress"],
                       cwd=REPO, capture_output=True, text=True, timeout=300,
                       preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert r.returncode == 130, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and r.stderr.splitlines()[-1] == "vsr: interrupted"
    assert "stopped at iteration" not in r.stdout


TINY_RUN = ("--batch-size", 1, "--patch", 8, "--val", "none", "--threads", 1, "--workers", 0, "--no-progress")


def test_an_out_in_a_missing_folder_is_one_line_and_makes_nothing(make_clip, tmp_path):
    """As vsr upscale's output in a missing folder: the folders above --out were made (a typo put a run anywhere)."""
    clip = make_clip("c.mp4", width=48, height=40, frames=6)
    out = tmp_path / "typo" / "deep" / "run"
    r = vsr_train("--config", "edvr-tiny", "--data", clip, "--iters", 1, "--out", out, *TINY_RUN)
    assert r.returncode == 2, r.stderr
    assert r.stderr.splitlines() == [f"vsr: error: --out {out}: the folder {out.parent} does not exist (vsr train "
                                     "makes the run folder, not the folders above it)"]
    assert not (tmp_path / "typo").exists()


def test_a_folder_of_other_files_is_refused_and_a_run_folder_resumes(make_clip, tmp_path):
    """A folder of the user's (photos) was trained into, checkpoints and log mixed among its files; a run folder
    still resumes, with the user's own notes beside its checkpoints."""
    clip = make_clip("c.mp4", width=48, height=40, frames=6)
    photos = tmp_path / "photos"
    photos.mkdir()
    (photos / "holiday.jpg").write_bytes(b"jpeg")
    r = vsr_train("--config", "edvr-tiny", "--data", clip, "--iters", 1, "--out", photos, *TINY_RUN)
    assert r.returncode == 2, r.stderr
    assert r.stderr.splitlines() == [f"vsr: error: --out {photos} holds other files (holiday.jpg): vsr train writes "
                                     "a run into a new or empty folder, or resumes one of its own (latest.pth, "
                                     "log.jsonl); give another --out"]
    assert sorted(p.name for p in photos.iterdir()) == ["holiday.jpg"]
    run = tmp_path / "run"
    (run / "holdout").mkdir(parents=True)  # what a run stopped before its first log line leaves: its own
    r = vsr_train("--config", "edvr-tiny", "--data", clip, "--iters", 1, "--out", run, *TINY_RUN)
    assert r.returncode == 0, r.stderr
    (run / "notes.txt").write_text("lr 1e-4 next time\n")
    r = vsr_train("--config", "edvr-tiny", "--data", clip, "--iters", 2, "--out", run, *TINY_RUN)
    assert r.returncode == 0, r.stderr
    assert "resuming at iteration 1" in r.stdout and "stopped at iteration 2" in r.stdout


def test_an_empty_out_is_one_line_and_trains_nowhere(make_clip, tmp_path):
    """(--out "$DIR" with DIR unset trained into runs/edvr-tiny, a folder the user never named)"""
    clip = make_clip("c.mp4", width=48, height=40, frames=6)
    r = subprocess.run([sys.executable, "-m", "vsr", "train", "--config", "edvr-tiny", "--data", str(clip),
                        "--iters", "1", "--out", "", *map(str, TINY_RUN)], capture_output=True, text=True,
                       cwd=tmp_path, timeout=300)
    assert r.returncode == 2, r.stderr
    assert r.stderr.splitlines() == ["vsr: error: --out is empty: give the run folder's name (or leave --out out for runs/NAME)"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.mp4"]


@pytest.mark.parametrize("name", ["log.jsonl", "holdout"])
def test_a_link_planted_in_the_run_folder_is_one_line_and_nothing_is_written_where_it_points(make_clip, tmp_path,
                                                                                               name):
    """(the held-out frames went where a link at OUT/holdout pointed; a link at the log was an OSError's line)"""
    clip = make_clip("c.mp4", width=48, height=40, frames=12)
    run, target = tmp_path / "run", tmp_path / "target"
    run.mkdir()
    if name == "holdout":
        target.mkdir()
    else:
        target.write_text("mine\n")
    (run / name).symlink_to(target)
    r = vsr_train("--config", "edvr-tiny", "--data", clip, "--iters", 1, "--out", run, *TINY_RUN[:4], "--val",
                  "holdout", "--holdout", 0.25, *TINY_RUN[6:])
    assert r.returncode == 2, r.stderr
    assert r.stderr.splitlines() == [f"vsr: error: --out {run}: its {name} is a symbolic link, and vsr train writes "
                                     "its run's files in the run folder itself, never where a link points; remove "
                                     "the link or give another --out"]
    assert (not any(target.iterdir())) if name == "holdout" else target.read_text() == "mine\n"


def test_an_out_that_is_a_link_to_nothing_says_so(make_clip, tmp_path):
    """(it said "is a file")"""
    clip = make_clip("c.mp4", width=48, height=40, frames=6)
    out = tmp_path / "run"
    out.symlink_to(tmp_path / "gone")
    r = vsr_train("--config", "edvr-tiny", "--data", clip, "--iters", 1, "--out", out, *TINY_RUN)
    assert r.returncode == 2, r.stderr
    assert r.stderr.splitlines() == [f"vsr: error: --out {out} is a symbolic link to nothing: give a folder's name, "
                                     "or make the folder it points to"]
    assert not (tmp_path / "gone").exists()
