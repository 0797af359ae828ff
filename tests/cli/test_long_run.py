"""A `vsr upscale` run estimated at over an hour is told, once, that a stop loses all of it (its output is a
temporary file renamed at the end) and how `vsr jobs` would keep each chunk done.  The estimate is fed in: no
test waits an hour."""

from __future__ import annotations

import time

import pytest

import vsr.cli.upscale as upscale_cli
from vsr.cli import main
from vsr.cli.upscale import LONG_RUN_S, _LongRun, long_run_line

TINY = ["--weights", "random", "--config", "edvr-tiny", "--backend", "torch", "--threads", "1"]


def test_a_run_over_an_hour_names_the_jobs_that_would_keep_it(make_clip, tmp_path):
    src = make_clip("my clip.mp4", frames=2)
    line = long_run_line(str(src), str(tmp_path / "out" / "x.mkv"), 5.2 * 3600, 5 * 3600)
    assert line == (f"vsr: about 5 h to go, and a stop (a kill, a reboot) loses the whole run: `vsr jobs add '{src}' "
                    f"--out-dir {tmp_path / 'out'} --ext mkv` with this run's options, then `vsr jobs run "
                    "--until-empty`, keeps each chunk done and resumes after one")
    assert "about 50 min to go" in long_run_line(str(src), "x.mp4", 3700, 3000)
    assert long_run_line(str(src), "x.mp4", LONG_RUN_S, 3000) is None  # an hour or less: nothing


@pytest.mark.parametrize("src, dst", [("-", "x.mkv"), ("IN", "-"), ("IN", "frames"), ("IN", "x.gif"),
                                      ("FRAMES", "x.mkv")])
def test_where_jobs_cannot_take_the_run_nothing_is_said(make_clip, tmp_path, src, dst):
    """A stream in or out (nothing keeps a pipe's run), PNG frames in or out, an animation: jobs refuse them."""
    (tmp_path / "in").mkdir()
    src = {"IN": str(make_clip("a.mp4", frames=2)), "FRAMES": str(tmp_path / "in")}.get(src, src)
    assert long_run_line(src, str(tmp_path / dst) if dst != "-" else dst, 5 * 3600, 5 * 3600) is None


def test_the_line_comes_once(make_clip, tmp_path, capsys):
    said = _LongRun(str(make_clip("a.mp4", frames=2)), str(tmp_path / "o.mkv"))
    said.start()
    said.since = time.monotonic() - 600  # (10 minutes for 3 frames of 1000: about 55 h)
    said.update(2, 1000)  # too few frames to trust a rate
    assert capsys.readouterr().err == ""
    said.update(1, 1000)
    said.update(1, 1000)
    assert capsys.readouterr().err.count("a stop (a kill, a reboot) loses the whole run") == 1


@pytest.mark.parametrize("quiet", [False, True])
def test_a_run_says_it_once_and_not_under_quiet(make_clip, tmp_path, capsys, monkeypatch, quiet):
    """--quiet promises warnings and errors alone: this is advice, as the lines naming a default are."""
    monkeypatch.setattr(upscale_cli, "LONG_RUN_S", 0.0)  # any run is long
    src = make_clip("a.mp4", frames=5)
    rc = main(["upscale", str(src), str(tmp_path / "o.mkv"), *TINY, *(["--quiet"] if quiet else [])])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert err.count("loses the whole run") == (0 if quiet else 1), err
