"""A binary file given where vsr reads JSON, TOML or text (a video given for a report) is one plain line naming
the file and what it is not, never the codec's "'utf-8' codec can't decode byte 0x96 in position 42"."""

from __future__ import annotations

import pytest

from vsr.cli import main
from vsr.errors import ConfigError
from vsr.files import load_config
from vsr.model.config import load_config as load_model_config

# the start of an MP4 file: its bytes are not UTF-8
BINARY = b"\x00\x00\x00\x20ftypisom\x00\x00\x02\x00isomiso2avc1mp41\x00\x00\x00\x08free\x96\xff\xfe\x00mdat"


def binary(tmp_path, name):
    p = tmp_path / name
    p.write_bytes(BINARY)
    return p


def one_error(capsys, args) -> str:
    rc = main([str(a) for a in args])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.splitlines()) == 1 and err.startswith("vsr: error: "), err
    assert "codec" not in err and "0x96" not in err and "position" not in err, err
    return err.removeprefix("vsr: error: ").rstrip("\n")


def test_a_video_given_for_a_run_report(tmp_path, capsys):
    p = binary(tmp_path, "in.mp4")
    assert one_error(capsys, ["report", p]) == f"{p} is not a run report (not JSON text)"


def test_a_binary_job_file(tmp_path, capsys):
    p = binary(tmp_path, "jobs.toml")
    err = one_error(capsys, ["jobs", "add", p, "--out-dir", tmp_path / "out", "--store", tmp_path / "jobs.db"])
    assert err == f"{p} is not a job file (not TOML text)"


def test_a_binary_scene_cut_file(tmp_path, capsys, make_clip):
    p = binary(tmp_path, "cuts.txt")
    err = one_error(capsys, ["upscale", make_clip("in.mp4"), tmp_path / "out.mp4", "--weights", "random",
                             "--config", "edvr-tiny", "--scene-cuts", p])
    assert err == f"{p} is not a --scene-cuts file (not text)"
    assert not (tmp_path / "out.mp4").exists()


def test_a_binary_model_config(tmp_path):
    p = binary(tmp_path, "mine.toml")
    with pytest.raises(ConfigError) as e:
        load_model_config(p)
    assert str(e.value) == f"{p}: not a TOML file (not text)"


def test_a_binary_rule_file(tmp_path):
    p = binary(tmp_path, "weights.toml")
    with pytest.raises(ConfigError) as e:
        load_config(p, "pipeline/weights.toml", "weights rule", dict)
    assert str(e.value) == f"{p} is not a weights rule (not TOML text)"
