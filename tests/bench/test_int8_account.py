"""`vsr bench --int8-account` on edvr-tiny: every segment, bridge and re-run of the int8 plan beside the fp32 one,
each segment alone against ONNX Runtime's own QDQ int8, and vsr's int8 segments by role."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from vsr.bench.int8_account import ROLE_NAMES, render_account, role


def test_a_profiled_node_has_one_role():
    assert role("max/x", "ReduceMax") == role("min/x", "ReduceMin") == "range pass"
    assert role("conv1/bias_div", "Div") == role("conv1/bias", "QLinearAdd") == "bias"
    assert role("cat/q", "QLinearConcat") == "int8 convs"
    assert role("conv1", "QLinearConv") == "int8 convs" and role("q/x", "QuantizeLinear") == "Q/DQ"
    assert role("t", "Transpose") == "layout" and role("add", "Add") == "fp32 other" and "fp32 other" in ROLE_NAMES


@pytest.fixture(scope="module")
def account(tmp_path_factory):
    out = tmp_path_factory.mktemp("account") / "account.json"
    res = subprocess.run([sys.executable, "-m", "vsr", "bench", "--int8-account", "--config", "edvr-tiny", "--size",
                          "16x24", "--frames", "1", "--runs", "1", "--threads", "1", "--quiet", "--out", str(out)],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    return json.loads(out.read_text()), res


def test_every_step_of_both_plans_is_accounted(account):
    data, res = account
    kinds = {r["step"]: r["kind"] for r in data["steps"]}
    segments = [s for s, k in kinds.items() if k == "segment"]
    assert segments and any(k == "bridge" for k in kinds.values())
    assert all(f"{s}:rerun" in kinds for s in segments)  # the re-runs have rows, timed or not
    for r in data["steps"]:
        if r["kind"] in ("segment", "bridge"):
            assert r["fp32_s"] > 0 and r["int8_s"] > 0, r


def test_each_segment_alone_against_ort_qdq_with_its_roles(account):
    data, res = account
    for r in (r for r in data["steps"] if r["kind"] == "segment"):
        assert r["fp32_alone_s"] > 0 and r["int8_alone_s"] > 0 and r["qdq_s"] > 0, r
        assert set(r["roles"]) == set(ROLE_NAMES)
    assert any(r["roles"]["int8 convs"] > 0 and r["roles"]["range pass"] > 0 for r in data["steps"]
               if r["kind"] == "segment")
    assert data["totals"]["segment_qdq_s"] > 0


def test_the_table_says_the_columns_and_the_totals(account):
    data, res = account
    text = render_account(data)
    assert text == res.stdout.rstrip("\n")
    assert "ORT QDQ" in text and "vsr/QDQ" in text and "segments alone: fp32" in text


def test_it_takes_no_cases():
    res = subprocess.run([sys.executable, "-m", "vsr", "bench", "--int8-account", "--cases", "ort-split-fp32"],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 2 and "takes no --cases" in res.stderr and res.stderr.count("\n") == 1


def test_a_folder_as_out_is_refused_with_the_accounts_own_example_name(tmp_path):
    """Before the plans are built; the example was a preview's (``u/preview.png``)."""
    res = subprocess.run([sys.executable, "-m", "vsr", "bench", "--int8-account", "--config", "edvr-tiny", "--size",
                          "16x24", "--out", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert f"give the account's file name (e.g. {tmp_path / 'account.json'})" in res.stderr


def test_out_dash_prints_the_json():
    """--out - (standard output, as check_file_output reads it): the account's JSON there, not the table."""
    res = subprocess.run([sys.executable, "-m", "vsr", "bench", "--int8-account", "--config", "edvr-tiny", "--size",
                          "16x24", "--frames", "1", "--runs", "1", "--threads", "1", "--quiet", "--out", "-"],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["steps"]
