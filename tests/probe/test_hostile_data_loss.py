"""Issue 37's hostile run, its data-loss classes (item 6), through the real command line and real files.

1. ``--report`` never replaces a symbolic link (``/dev/stdout`` is one) or a special file, even with
   ``--overwrite``; never a file the run reads (``--weights``, ``--config``, ``--scene-cuts``); ``--report ''``
   is one line, not a run that writes nothing.
2. ``--overwrite`` onto a folder replaces only a folder that carries vsr's marker: a folder of the user's own
   PNG frames stays as it was.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.probe.cli_io import ProbeRunner
from tests.probe.test_probe_data_loss import RUN, clip, nothing_half_written, tree

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def vsr_cli():
    return ProbeRunner()


# ---- 1. what --report may replace --------------------------------------------------------------------------

REFUSED = {
    # the system's /dev/stdout is a link to /proc/self/fd/1: replacing the link broke every later `> /dev/stdout`
    "a link to a regular file": (["--report", "{d}/link.json", "--overwrite"], "is a symbolic link"),
    "a dangling link": (["--report", "{d}/dangling.json", "--overwrite"], "is a symbolic link"),
    "a link, without --overwrite": (["--report", "{d}/link.json"], "is a symbolic link"),
    "a named pipe": (["--report", "{d}/fifo", "--overwrite"], "not a regular file"),
    "the --weights file": (["--report", "{d}/w.pth", "--overwrite", "--weights", "{d}/w.pth"],
                           "is the --weights file"),
    "the --config file": (["--report", "{d}/cfg.toml", "--overwrite", "--config", "{d}/cfg.toml"],
                          "is the --config file"),
    "the --config file, spelt otherwise": (["--report", "{d}/./cfg.toml", "--overwrite", "--config",
                                            "{d}/cfg.toml"], "is the --config file"),
    "the --scene-cuts file": (["--report", "{d}/cuts.txt", "--overwrite", "--scene-cuts", "{d}/cuts.txt"],
                              "is the --scene-cuts file"),
    "an empty name": (["--report", ""], "--report is empty"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_report_never_replaces_a_link_a_special_file_or_a_file_the_run_reads(vsr_cli, tmp_path, case):
    d = tmp_path / "files"
    d.mkdir()
    src = clip(d, "in.mkv", 3)
    (d / "target.json").write_text('{"mine": true}\n')
    (d / "link.json").symlink_to(d / "target.json")
    (d / "dangling.json").symlink_to(d / "nowhere.json")
    os.mkfifo(d / "fifo")
    (d / "w.pth").write_bytes(b"the user's checkpoint\n")
    shutil.copy(REPO / "configs" / "edvr-tiny.toml", d / "cfg.toml")  # a run with it would succeed
    (d / "cuts.txt").write_text("0\n")
    extra, words = REFUSED[case]
    before = tree(d)
    ran = vsr_cli.run(["upscale", src, d / "o.mkv", *RUN, *[a.format(d=d) for a in extra]], tmp_path / "ran")
    assert ran.rc == 2 and "Traceback" not in ran.err, ran.err
    assert len(ran.lines) == 1 and ran.lines[0].startswith("vsr: error: ") and words in ran.lines[0], ran.err
    assert "seeded random weights" not in ran.err  # refused before the model was loaded
    assert tree(d) == before and ran.out == b""
    assert (d / "link.json").is_symlink() and (d / "dangling.json").is_symlink()


def test_the_html_page_refuses_a_link_too(vsr_cli, tmp_path):
    d = tmp_path / "files"
    d.mkdir()
    (d / "run.json").write_text("{}\n")
    (d / "target.html").write_text("mine\n")
    (d / "page.html").symlink_to(d / "target.html")
    before = tree(d)
    ran = vsr_cli.run(["report", d / "run.json", "--html", d / "page.html", "--overwrite"], tmp_path / "ran")
    assert ran.rc == 2 and len(ran.lines) == 1 and "is a symbolic link" in ran.lines[0], ran.err
    assert tree(d) == before


# ---- 3. weights that give garbage --------------------------------------------------------------------------

def test_one_huge_weight_in_the_first_layer_stops_the_run(vsr_cli, tmp_path):
    """The bundled weights with one weight of conv_first set to 1e4: on FFmpeg's test pattern, a block of garbage
    pixels (values of -4 to 6, nothing beyond +-1000, no tile all out of range) was written, exit 0."""
    import torch

    d = tmp_path / "files"
    d.mkdir()
    src = d / "in.mkv"
    subprocess.run(["ffmpeg", "-v", "error", "-f", "lavfi", "-i", "testsrc=size=16x12:rate=10", "-frames:v", "3",
                    "-c:v", "libx264", "-pix_fmt", "yuv420p", src], check=True)
    ck = torch.load(REPO / "vsr" / "weights" / "default.pth", weights_only=True)
    ck["params"]["conv_first.weight"].view(-1)[0] = 1e4
    torch.save(ck, tmp_path / "big.pth")
    before = tree(d)
    ran = vsr_cli.run(["upscale", src, d / "o.mkv", "--weights", tmp_path / "big.pth", "--backend", "torch",
                       "--quiet"], tmp_path / "ran")
    assert ran.rc == 2 and len(ran.lines) == 1, ran.err
    assert "saturated" in ran.lines[0] and "big.pth are broken" in ran.lines[0]
    assert tree(d) == before
    nothing_half_written(d)
