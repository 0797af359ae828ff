"""Issue 37's hostile run, its traceback classes (item 6): each is one ``vsr: error:`` line now.

- an output named as one picture (``single.png``, ``x.jpg``): FFmpeg's image2 muxer, given a name without a
  ``%d`` pattern, failed at the first frame with a PyAV traceback;
- a TOML file nested 5,000 deep (``--config``, job files, ``--degrade``/``--degrade-config``, vsr's own config
  files): a RecursionError from tomllib.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from vsr.errors import VsrError
from tests.probe.cli_io import ProbeRunner
from tests.probe.test_probe_data_loss import RUN, clip, tree

DEEP = "a = " + "[" * 5000 + "]" * 5000 + "\n"


@pytest.fixture(scope="module")
def vsr_cli():
    return ProbeRunner()


@pytest.mark.parametrize("name", ["single.png", "x.jpg", "frame.TIFF"])
def test_an_output_named_as_one_picture_is_one_line_before_any_work(vsr_cli, tmp_path, name):
    d = tmp_path / "files"
    d.mkdir()
    src = clip(d, "in.mkv", 3)
    before = tree(d)
    ran = vsr_cli.run(["upscale", src, d / name, *RUN], tmp_path / "ran")
    assert ran.rc == 2 and "Traceback" not in ran.err, ran.err
    assert len(ran.lines) == 1 and "is the name of one picture" in ran.lines[0], ran.err
    assert "without suffix for a folder" in ran.lines[0] and "seeded random weights" not in ran.err
    assert tree(d) == before


def test_a_config_nested_5000_deep_is_one_line_through_the_command_line(vsr_cli, tmp_path):
    d = tmp_path / "files"
    d.mkdir()
    src = clip(d, "in.mkv", 3)
    (d / "deep.toml").write_text(DEEP)
    ran = vsr_cli.run(["upscale", src, d / "o.mkv", *RUN, "--config", d / "deep.toml"], tmp_path / "ran")
    assert ran.rc == 2 and "Traceback" not in ran.err, ran.err
    assert len(ran.lines) == 1 and "deep.toml: not a TOML file (arrays or tables nested too deeply" in ran.lines[0]


def _model_config(p: Path):
    from vsr.model.config import load_config
    return load_config(p)


def _job_file(p: Path):
    from vsr.jobs.jobfile import read_job_file
    return read_job_file(p)


def _degradation(p: Path):
    from vsr.train.degrade import load_degrade
    return load_degrade(p)


def _pipeline_config(p: Path):
    from vsr.files import load_config
    return load_config(p, "pipeline/scenes.toml", "scene-cut settings", dict)


@pytest.mark.parametrize("read", [_model_config, _job_file, _degradation, _pipeline_config])
def test_every_toml_reader_says_a_deep_file_is_malformed_in_one_line(tmp_path, read):
    p = tmp_path / "deep.toml"
    p.write_text(DEEP)
    with pytest.raises(VsrError, match="nested too deeply") as e:
        read(p)
    assert "\n" not in str(e.value) and "deep.toml" in str(e.value)
