"""The int8 options: checked where they are made, one-line errors from the CLI."""

from __future__ import annotations

import subprocess
import sys

import pytest

from vsr.backends import SplitOptions, backend_options
from vsr.errors import BackendError


def test_split_options_check_precision_and_scales():
    assert backend_options(precision="int8", int8_scales="static") == SplitOptions(precision="int8",
                                                                                  int8_scales="static")
    with pytest.raises(BackendError, match="precision"):
        SplitOptions(precision="int4")
    with pytest.raises(BackendError, match="int8 scales"):
        SplitOptions(precision="int8", int8_scales="sometimes")
    with pytest.raises(BackendError, match="split plan only"):
        backend_options("torch", precision="int8")


def test_cli_refuses_int8_off_the_split_plan_in_one_line(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    r = subprocess.run([sys.executable, "-m", "vsr", "upscale", str(src), str(tmp_path / "out"), "--precision",
                        "int8", "--plan", "whole"], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "split plan only" in r.stderr


def test_a_checkpoint_from_before_qat_resumes_as_not_qat():
    from vsr.train import TrainOptions

    o = TrainOptions(config="edvr-tiny", data=("d",), out="o", iters=5)
    saved = {k: v for k, v in o.to_dict().items() if k != "qat"}
    assert o.resume_conflicts(saved) == []
    assert TrainOptions(config="edvr-tiny", data=("d",), out="o", iters=5, qat=True).resume_conflicts(saved) == ["qat"]
