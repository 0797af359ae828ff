"""Help texts say the defaults the code uses (issue 40: `vsr train --help` said runs/<config> and the run wrote
runs/default).  Where an option's help names a default, it is the value the parser or the library really takes."""

from __future__ import annotations

import argparse
import re

import pytest

from vsr.cli import build_parser


def options():
    """``(command, action)`` for every option of every command."""
    return [(path, a) for path, a in _every_option() if a.help]


def _every_option():
    def walk(parser, path):
        for a in parser._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, sub in a.choices.items():
                    yield from walk(sub, f"{path} {name}")
            elif a.option_strings and a.help is not argparse.SUPPRESS:
                yield path, a

    return [o for parser, path in parsers() for o in walk(parser, path)]


def parsers():
    """vsr's parser, and those of the modules run with ``python -m`` (their --help had options with no word:
    vsr.train.ship's --out and --which)."""
    from vsr.train import ship

    return [(build_parser(), "vsr"), (ship.build_parser(), "python -m vsr.train.ship")]


def test_a_default_the_help_names_is_the_parsers():
    bad = []
    for command, a in options():
        if "default" not in a.help or a.default in (None, False, [], argparse.SUPPRESS):
            continue
        if not re.search(rf"(?<![\w.]){re.escape(str(a.default))}(?![\w.])", a.help):
            bad.append(f"{command} {a.option_strings[-1]}: default {a.default!r}, help: {a.help}")
    assert not bad, "\n".join(bad)


def test_an_option_with_a_default_names_it():
    """`vsr upscale --help` said `--plan auto | whole | split` and not which one a run takes unasked (so did
    `vsr train`'s --device, --degrade and --holdout)."""
    quiet = [f"{command} {a.option_strings[-1]}: default {a.default!r}, help: {a.help}" for command, a in options()
             if a.default is not None and a.default is not False and a.default != [] and a.default != argparse.SUPPRESS
             and not isinstance(a, (argparse._StoreTrueAction, argparse._CountAction)) and "default" not in a.help]
    assert not quiet, "\n".join(quiet)


def help_of(command: str, option: str) -> str:
    return next(a.help for c, a in options() if c == command and option in a.option_strings)


def test_the_defaults_the_library_decides_are_the_ones_the_help_names():
    from vsr.jobs.leases import MAX_ATTEMPTS
    from vsr.jobs.chunking import DEFAULT_CHUNK_FRAMES
    from vsr.jobs.spec import JOB_MEMORY_BUDGET_MB
    from vsr.pipeline.memory import AUTO_CAP_MB, AUTO_FLOOR_MB, AUTO_SHARE, AUTO_STEP_MB

    assert f"default {DEFAULT_CHUNK_FRAMES}" in help_of("vsr jobs add", "--chunk-frames")
    assert f"default {MAX_ATTEMPTS}" in help_of("vsr jobs run", "--max-attempts")
    budget = help_of("vsr upscale", "--memory-budget")
    assert AUTO_SHARE == 0.5 and "half of the machine's memory" in budget
    assert f"rounded down to {AUTO_STEP_MB}" in budget and f"{AUTO_FLOOR_MB}..{AUTO_CAP_MB}" in budget
    assert f"vsr jobs: {JOB_MEMORY_BUDGET_MB}" in budget


@pytest.mark.parametrize("argv, out", [
    (["--config", "edvr-tiny"], "runs/edvr-tiny"),
    (["--init", "default"], "runs/default"),
    (["--config", "configs/edvr-m.toml", "--init", "w/ft.pth"], "runs/edvr-m"),
])
def test_train_writes_where_its_help_says(argv, out):
    from vsr.cli.train import train_options

    o = train_options(build_parser().parse_args(["train", *argv, "--data", "d", "--iters", "5"]))
    assert o.out == out
    assert "runs/NAME, NAME being --config's name, else --init's" in help_of("vsr train", "--out")


def test_every_option_says_what_it_does():
    """An option with no help text showed a bare name in --help (vsr train's --batch-size, --seed, ... with no
    word of what they set or their default)."""
    bare = [f"{command} {a.option_strings[-1]}" for command, a in options_all() if not (a.help or "").strip()]
    assert not bare, "\n".join(bare)


def test_a_train_setting_names_its_default():
    """`vsr train --help` names each tuning option's default (they come from TrainOptions, not the parser's
    text)."""
    from vsr.train.options import TrainOptions as T

    for option, value in [("--batch-size", T.batch_size), ("--patch", T.lr_patch), ("--lr", T.lr),
                          ("--min-lr", T.min_lr), ("--warmup", T.warmup), ("--offset-lr-mult", T.offset_lr_mult),
                          ("--grad-clip", T.grad_clip), ("--ema-decay", T.ema_decay), ("--seed", T.seed),
                          ("--video-fraction", T.video_fraction), ("--ckpt-every", T.ckpt_every)]:
        assert f"default {value}" in help_of("vsr train", option), option


def options_all():
    """``(command, action)`` for every option of every command, those without help included (``-h`` left out)."""
    return [(path, a) for path, a in _every_option() if not isinstance(a, argparse._HelpAction)]


def test_the_modules_parsers_are_walked():
    """The tests above cover every parser :func:`parsers` lists, options and arguments alike."""
    assert {"--out", "--which", "--overwrite"} <= {a.option_strings[-1] for c, a in options_all()
                                                   if c == "python -m vsr.train.ship"}
    from vsr.train import ship

    bare = [a.dest for a in ship.build_parser()._actions if not a.option_strings and not (a.help or "").strip()]
    assert not bare, bare


def test_eval_gt_frames_go_in_the_order_its_help_says(tmp_path):
    """`vsr eval --help` said the GT frames were sorted by name, which puts 10.png before 9.png; they go in the
    order their names number them, as vsr upscale reads a folder (EDVR's windows take the neighbours)."""
    import cv2
    import numpy as np

    from vsr.quality.evaluate import list_frames

    for i in (8, 9, 10, 11):
        cv2.imwrite(str(tmp_path / f"{i}.png"), np.zeros((8, 8, 3), np.uint8))
    assert [p.name for p in list_frames(tmp_path, "GT")] == ["8.png", "9.png", "10.png", "11.png"]
    assert "9.png before 10.png" in help_of("vsr eval", "--gt")
