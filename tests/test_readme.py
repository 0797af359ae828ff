"""The README's and docs/' commands are true (issue 40): every ``vsr`` command they show parses, and the
README's run as written on a clone alone: each command of its ```bash blocks, of its
Commands table and its pipe example, in a folder of its own holding the files it names, with nothing beside the
repository (``VSR_DATA`` names an empty folder) and ``vsr`` being this checkout.

The files the commands read are tiny cuts of the shipped real footage (tests/fixtures/real): ``in.mp4`` is 12
frames of 64x48 at 8 s a frame (96 s: ``--at 1:30`` lands in it), encoded at a rate that gets the ``default``
weights, so that the runs share one plan; ``my.mp4`` a 256x240 real clip to fine-tune on; ``lr/``, ``gt/`` 3 frames.
A command runs changed only where :data:`CHANGED` says why, or not at all where :data:`NOT_RUN` does; a new
command in the README runs as written.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.data import VIDEOS

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"

NOT_RUN = {
    "bash scripts/setup.sh": "it makes the .venv that runs these tests (.ci/run runs it first)",
    "bash scripts/setup.sh && .venv/bin/python -m pytest -q": "the test suite this test is part of",
    "vsr models fetch edvr-m-reds": "a 24 MB download from GitHub; tests/model/test_fetch.py runs it against a "
                                    "local server",
}
CHANGED = {
    "vsr bench --config edvr-m --size 180x320 --frames 3":
        ("vsr bench --config edvr-tiny --size 16x24 --frames 3",
         "EDVR-M at 180x320 on every backend takes minutes on 2 cores; edvr-tiny compares the same backends"),
    "vsr train --init default --data my.mp4 --iters 200":
        ("vsr train --init default --data my.mp4 --iters 1",
         "200 iterations take half an hour on 2 cores; 1 fine-tunes the default weights on the clip all the same"),
}
# What each command leaves in its folder (a command not named here: its exit status alone).
WRITES = {
    ".venv/bin/vsr preview in.mp4": ["preview.png"],
    ".venv/bin/vsr upscale in.mp4 out.mp4": ["out.mp4"],
    "vsr upscale in.mp4 out.mkv --start 1:00 --end 1:30 --report run.json": ["out.mkv", "run.json"],
    "vsr preview in.mp4 --at 1:30 --out preview.png": ["preview.png"],
    "vsr jobs add *.mp4 --out-dir out/ && vsr jobs run --until-empty": ["out/in.mp4"],
    "vsr report run.json --html run.html": ["run.html"],
    "vsr export --weights default --height 180 --width 320 --out m.onnx": ["m.onnx"],
    "vsr train --init default --data my.mp4 --iters 200": ["runs/default/latest.pth"],
    "ffmpeg -i in.mkv -f nut - | vsr upscale - - --format nut -c ffv1 | ffmpeg -i - out.mkv": ["out.mkv"],
}
# A file a command reads that another command of the README writes: made by that one first.
MADE_BY = {"run.json": "vsr upscale in.mp4 out.mkv --start 1:00 --end 1:30 --report run.json"}


def readme_commands(text: str) -> list[str]:
    """The README's commands: each line of its ```bash blocks (comments dropped), the example column of its
    Commands table, and the pipe example, in the README's order, each once."""
    found = []
    for m in re.finditer(r"```bash\n(.*?)```|^\| `\w+` — [^\n]*\| `([^`\n]+)` \|$|^Pipes: `([^`]+)`", text, re.S | re.M):
        if m[1] is not None:
            found += [re.sub(r"\s+#.*$", "", line).strip() for line in m[1].splitlines()]
        else:
            found.append(m[2] or m[3])
    return list(dict.fromkeys(c for c in found if c))


COMMANDS = readme_commands(README.read_text())


def docs_command_lines() -> list[tuple[str, str]]:
    """``(file, command)`` for each ``vsr ...`` command in a fenced block of the README and docs/ (continued lines
    joined, comments dropped, a pipeline's or ``&&`` chain's parts apart); synopses (``[--at TIME]``, ``IN...``)
    and captured output (``vsr bench: ...``) left out."""
    found = []
    for md in [README, *sorted((REPO / "docs").glob("*.md"))]:
        for block in re.findall(r"```[a-z]*\n(.*?)```", md.read_text(), re.S):
            for line in block.replace("\\\n", " ").splitlines():
                line = re.sub(r"\s+#.*$", "", line).strip()
                for part in re.split(r"\s*(?:&&|\||;)\s*", line):
                    part = re.sub(r"^(\.venv/bin/|python -m )", "", part)
                    if part.startswith("vsr ") and not re.search(r"\[|\.\.\.|^vsr \w+:| IN\b", part):
                        found.append((md.name, part))
    return found


def test_every_vsr_command_in_the_readme_and_docs_parses():
    """Each option the README and docs/ show exists and takes what they give it (the cheap half of 'the docs are
    true': the README's commands also run, below)."""
    import contextlib
    import io
    import shlex

    from vsr.cli import build_parser

    lines = docs_command_lines()
    assert len(lines) >= 15
    bad = []
    for where, command in lines:
        argv = shlex.split(command)[1:]
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                build_parser(argv).parse_args(argv)
        except SystemExit as e:
            if e.code:
                bad.append(f"{where}: {command}: {err.getvalue().strip()}")
    assert not bad, "\n".join(bad)


def test_every_option_a_vsr_command_in_the_text_names_exists():
    """The `vsr ...` spans of the README's and docs/' prose (synopses and fragments among them): each ``--option``
    is one the command has."""
    import argparse

    from vsr.cli import build_parser

    def parsers(parser, path=()):
        yield path, parser
        for a in parser._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, sub in a.choices.items():
                    yield from parsers(sub, (*path, name))

    known = dict(parsers(build_parser()))
    bad = []
    for md in [README, *sorted((REPO / "docs").glob("*.md"))]:
        for span in re.findall(r"`(vsr [^`]+)`", re.sub(r"```.*?```", "", md.read_text(), flags=re.S)):
            for part in re.split(r"\s*(?:&&|\|(?![^\[]*\]))\s*", span):
                words = part.replace("\\|", " ").split()
                if words[:1] != ["vsr"]:
                    continue
                path = ()
                while len(path) + 1 < len(words) and (*path, words[len(path) + 1]) in known:
                    path = (*path, words[len(path) + 1])
                options = known[path]._option_string_actions
                for w in words[len(path) + 1:]:
                    option = re.sub(r"[=\]|,.)].*$", "", w.lstrip("["))
                    if option.startswith("--") and option not in options:
                        bad.append(f"{md.name}: `{span}`: {option} is no option of vsr {' '.join(path)}")
    assert not bad, "\n".join(bad)


def test_the_readme_commands_are_found():
    assert len(COMMANDS) >= 12 and all(c in COMMANDS for c in (*NOT_RUN, *CHANGED, *WRITES, *MADE_BY.values()))


@pytest.fixture(scope="module")
def seeds(tmp_path_factory) -> Path:
    """The files the README's commands name, made from the shipped real footage."""
    import cv2
    import numpy as np

    d = tmp_path_factory.mktemp("seeds")
    real = VIDEOS / "h264_aac_320x240_29.97fps_1.2s_realshort.mp4"
    ffmpeg = ["ffmpeg", "-v", "error", "-nostdin"]
    subprocess.run([*ffmpeg, "-i", str(real), "-an", "-vf", "crop=64:48:128:96,setpts=8*N/TB", "-r", "1/8",
                    "-frames:v", "12", "-c:v", "libx264", "-crf", "8", "-pix_fmt", "yuv420p", str(d / "in.mp4")],
                   check=True)
    subprocess.run([*ffmpeg, "-i", str(d / "in.mp4"), "-c:v", "ffv1", str(d / "in.mkv")], check=True)
    shutil.copy(VIDEOS / "h264_256x240_35fps_1s_noaudio.mp4", d / "my.mp4")
    (d / "gt").mkdir()
    (d / "lr").mkdir()
    cap = cv2.VideoCapture(str(real))
    for i in range(3):
        ok, frame = cap.read()
        assert ok
        gt = np.ascontiguousarray(frame[24:216, 32:288])  # 192x256: the LR is 48x64, in.mp4's size
        cv2.imwrite(str(d / "gt" / f"{i:08d}.png"), gt)
        cv2.imwrite(str(d / "lr" / f"{i:08d}.png"), cv2.resize(gt, (64, 48), interpolation=cv2.INTER_AREA))
    cap.release()
    bin_dir = d.parent / f"{d.name}-bin"
    bin_dir.mkdir()
    shim = bin_dir / "vsr"  # `vsr` (and `.venv/bin/vsr`) is this checkout, run by this interpreter
    shim.write_text(f'#!/bin/sh\nPYTHONPATH="{REPO}" exec "{sys.executable}" -m vsr "$@"\n')
    shim.chmod(0o755)
    return d


def named(command: str, seeds: Path) -> list[Path]:
    """The seeds ``command`` names (``*.mp4``: in.mp4 alone, one job: my.mp4 would take minutes)."""
    words = {w.rstrip("/") for w in command.split()} | ({"in.mp4"} if "*.mp4" in command else set())
    return [p for p in seeds.iterdir() if p.name in words]


def run_command(command: str, seeds: Path, folder: Path) -> subprocess.CompletedProcess:
    """``command`` in ``folder`` (holding the seeds it names), as a person types it, on a clone with nothing
    beside it."""
    folder.mkdir()
    for p in named(command, seeds):
        (shutil.copytree if p.is_dir() else shutil.copy)(p, folder / p.name)
    env = {**os.environ, "PATH": f"{seeds.parent / (seeds.name + '-bin')}{os.pathsep}{os.environ['PATH']}",
           "VSR_DATA": str(folder / "no-shared-data"), "XDG_DATA_HOME": str(folder / ".local-share")}
    shell = command.replace(".venv/bin/vsr", "vsr")
    return subprocess.run(["bash", "-c", shell], cwd=folder, env=env, capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs the ffmpeg command (its pipe example, the clips)")
@pytest.mark.parametrize("command", COMMANDS)
def test_a_readme_command_runs_as_written(command, seeds, tmp_path):
    if command in NOT_RUN:
        pytest.skip(f"not run here: {NOT_RUN[command]}")
    for name, maker in MADE_BY.items():
        if re.search(rf"(^| ){re.escape(name)}( |$)", command) and command != maker and not (seeds / name).exists():
            made = run_command(maker, seeds, tmp_path / "maker")
            assert made.returncode == 0, made.stderr
            shutil.copy(tmp_path / "maker" / name, seeds / name)
    run, why = CHANGED.get(command, (command, None))
    r = run_command(run, seeds, tmp_path / "run")
    assert r.returncode == 0, f"{run}{f' ({why})' if why else ''} exited {r.returncode}:\n{r.stderr[-3000:]}"
    for name in WRITES.get(command, ()):
        assert (tmp_path / "run" / name).exists(), f"{run}: no {name}; it said:\n{r.stderr[-2000:]}"
    for name, maker in MADE_BY.items():
        if command == maker and not (seeds / name).exists():
            shutil.copy(tmp_path / "run" / name, seeds / name)


def test_every_option_of_every_command_is_in_docs_cli():
    """docs/cli.md says it has every option: each option of each command is named there (`vsr jobs`'s in
    jobs.md, which cli.md sends them to). `vsr preview --suffix`, `vsr eval --crop-border`, `vsr models fetch
    --timeout` and most of `vsr train`'s were in --help alone; `vsr jobs run --quiet` was in jobs.md's synopsis
    alone (a synopsis names an option, the text says what it does: the synopses' blocks do not count)."""
    import argparse

    from vsr.cli import build_parser

    docs = {name: re.sub(r"```.*?```", "", (REPO / "docs" / name).read_text(), flags=re.S)
            for name in ("cli.md", "jobs.md")}

    def walk(parser, path):
        for a in parser._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, sub in a.choices.items():
                    yield from walk(sub, (*path, name))
            elif a.help is not argparse.SUPPRESS and not isinstance(a, argparse._HelpAction):
                yield path, [o for o in a.option_strings if o.startswith("--")]

    upscale = {n for path, names in walk(build_parser(), ()) if path == ("upscale",) for n in names}
    missing = []
    for path, names in walk(build_parser(), ()):
        text = docs["jobs.md"] if path[:1] == ("jobs",) else docs["cli.md"]
        if path == ("jobs", "add") and set(names) <= upscale:  # "any vsr upscale option": cli.md has them
            text = docs["cli.md"]
        if names and not any(re.search(rf"`[^`\n]*{re.escape(n)}(?![\w-])", text) for n in names):
            missing.append(f"vsr {' '.join(path)} {names[-1]}")
    assert not missing, "in --help, not in docs/cli.md (docs/jobs.md for vsr jobs):\n" + "\n".join(missing)
