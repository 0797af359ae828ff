"""What a person reads when a command is wrong: one ``vsr: error:`` line (the prefix once, the subcommand named
inside it), and for a misspelt weights or config name the closest real one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.data import VIDEOS, need
from vsr.errors import did_you_mean

REPO = Path(__file__).resolve().parents[2]


def vsr(*args, cwd: Path = REPO) -> tuple[int, list[str]]:
    """``python -m vsr ARGS`` in a real process: its exit code and its stderr lines."""
    p = subprocess.run([sys.executable, "-m", "vsr", *map(str, args)], cwd=cwd, capture_output=True, text=True,
                       timeout=300)
    assert p.stdout == ""
    return p.returncode, p.stderr.splitlines()


@pytest.mark.parametrize("args, command", [(["upscale", "a.mp4", "b.mp4", "--foo"], "upscale"),
                                           (["jobs", "add", "a.mp4", "--foo"], "jobs add"),
                                           (["jobs", "list", "--foo"], "jobs list")])
def test_an_unknown_option_is_one_line_naming_the_subcommand(args, command):
    rc, lines = vsr(*args)
    assert rc == 2 and lines == [f"vsr: error: {command}: unrecognized arguments: --foo "
                                 f"(see 'vsr {command} --help')"]


def test_the_top_level_error_has_the_prefix_once():
    rc, lines = vsr("--foo")
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("vsr: error: ") and lines[0].count("vsr: error") == 1
    assert "vsr: error: vsr" not in lines[0] and "(see 'vsr --help')" in lines[0]


def test_a_missing_argument_names_the_subcommand():
    rc, lines = vsr("upscale")
    assert rc == 2 and lines == ["vsr: error: upscale: the following arguments are required: input, output "
                                 "(see 'vsr upscale --help')"]


CLIP = VIDEOS / "h264_256x240_35fps_1s_noaudio.mp4"


@pytest.mark.parametrize("option, expected", [
    (["--weights", "reel", "--config", "edvr-tiny"], "vsr: error: weights file not found: reel (did you mean 'real'?)"),
    (["--weights", "random", "--config", "edvr-tinyy"], "vsr: error: unknown config 'edvr-tinyy' (did you mean "
                                                        "'edvr-tiny'?) (known: ")])
def test_a_misspelt_name_gets_the_closest_one(tmp_path, option, expected):
    need(CLIP)
    rc, lines = vsr("upscale", CLIP, tmp_path / "out.mp4", *option)
    assert rc == 2 and len(lines) == 1 and lines[0].startswith(expected), lines
    assert not (tmp_path / "out.mp4").exists()


def test_a_path_gets_no_guess():
    from vsr.errors import ConfigError, InputError
    from vsr.model.config import load_config
    from vsr.model.weights import read_checkpoint

    with pytest.raises(ConfigError) as e:
        load_config("nowhere/edvr-tiny.toml")
    with pytest.raises(InputError) as w:
        read_checkpoint("nowhere/real.pth")
    assert "did you mean" not in str(e.value) and "did you mean" not in str(w.value)


def test_did_you_mean_says_nothing_when_nothing_is_close():
    assert did_you_mean("reel", ["default", "real", "random"]) == " (did you mean 'real'?)"
    assert did_you_mean("edvr-mm", ["edvr-l", "edvr-m", "edvr-s"]) == " (did you mean 'edvr-m'?)"
    assert did_you_mean("zzzz", ["default", "real", "random"]) == ""


def test_a_misspelt_official_checkpoint_gets_the_closest_one():
    rc, lines = vsr("models", "fetch", "edvr-m-red")
    assert rc == 2 and len(lines) == 1, lines
    assert lines[0].startswith("vsr: error: unknown official checkpoint 'edvr-m-red' (did you mean 'edvr-m-reds'?) "
                               "(known: edvr-m-reds, ")


def test_eval_seed_without_degrade_is_refused_in_one_line(tmp_path):
    """--seed draws --degrade's random choices; alone it would be taken and do nothing."""
    rc, lines = vsr("eval", "--gt", tmp_path, "--seed", "3")
    assert rc == 2 and lines == ["vsr: error: --seed draws --degrade's random choices: give --degrade too (without "
                                 "it the LR frames are a fixed bicubic reduction of the GT or --lr's)"]


def test_models_prints_a_weights_folder_escaped(tmp_path):
    import os

    folder = str(tmp_path / "w\x1b[31m\nx")
    p = subprocess.run([sys.executable, "-m", "vsr", "models"], cwd=REPO, capture_output=True, text=True,
                       timeout=300, env=dict(os.environ, VSR_WEIGHTS_DIR=folder))
    assert p.returncode == 0, p.stderr
    assert "\x1b" not in p.stdout and f"put it in {tmp_path}/w\\x1b[31m\\nx under" in p.stdout


def test_models_says_a_weights_folder_that_is_a_file_is_not_one(tmp_path):
    """`vsr models fetch` refuses a VSR_WEIGHTS_DIR that is a file; the listing told the user to put weights "in" it."""
    import os

    plain = tmp_path / "weights"
    plain.write_text("not a folder")
    p = subprocess.run([sys.executable, "-m", "vsr", "models"], cwd=REPO, capture_output=True, text=True,
                       timeout=300, env=dict(os.environ, VSR_WEIGHTS_DIR=str(plain)))
    assert p.returncode == 0, p.stderr
    assert "put it in" not in p.stdout
    assert f"The weights folder {plain} is not a folder: set VSR_WEIGHTS_DIR to one" in p.stdout


def test_a_librarys_warning_paragraph_is_one_line_of_words_and_vsrs_own_names_stay_escaped(capsys):
    """Celery warns a worker run as root in a paragraph: it came out as one line full of '\\n'.  A name in vsr's own
    warnings keeps its escapes (a newline in a file name must not start a line of its own)."""
    import vsr.video.sink as ours
    from vsr.cli import _warning_line

    _warning_line("You're running the worker with superuser privileges: this is\nabsolutely not recommended!\n\n"
                  "Please specify a different user", Warning, "/usr/lib/python3/site-packages/celery/platforms.py", 1)
    _warning_line("cannot keep a\nb.mp4", UserWarning, ours.__file__, 1)
    assert capsys.readouterr().err.splitlines() == [
        "vsr: warning: You're running the worker with superuser privileges: this is absolutely not recommended! "
        "Please specify a different user",
        "vsr: warning: cannot keep a\\nb.mp4"]
