"""`vsr report A.json B.json` on real tiny runs: the ratios it prints per stage, per step kind and per split-plan
step are the ratios of the numbers in the two reports."""

from __future__ import annotations

import json

import pytest

from tests.report.conftest import vsr


def row(text: str, first: str) -> list[str]:
    """The cells of the line of ``text`` whose first cell is ``first``."""
    return next(line.split("  ") for line in text.splitlines() if line.startswith(first + "  ")).copy()


def cells(text: str, first: str) -> list[str]:
    return [c.strip() for c in row(text, first) if c.strip()]


def test_whole_vs_split_prints_stage_and_kind_ratios_of_the_two_reports(runs):
    a, b = (json.loads(runs[k].read_text()) for k in ("whole", "split"))
    res = vsr("report", runs["whole"], runs["split"])
    assert res.returncode == 0, res.stderr
    for sa, sb in zip(a["stages"], b["stages"]):
        assert sa["name"] == sb["name"]
        assert cells(res.stdout, sa["name"])[-1] == f"{sb['busy_s'] / sa['busy_s']:.2f}x"
    calls_a = sum(s["total_s"] for s in a["backend_steps"] if s["kind"] != "build")
    calls_b = sum(s["total_s"] for s in b["backend_steps"] if s["kind"] != "build")
    assert cells(res.stdout, "per call")[1:] == [f"{calls_a:.3f}", f"{calls_b:.3f}", f"{calls_b / calls_a:.2f}x"]
    segments = sum(s["total_s"] for s in b["backend_steps"] if s["kind"] == "segment")
    assert cells(res.stdout, "segment")[1:] == ["-", f"{segments:.3f}", "-"]  # the whole plan has no segments
    for s in b["backend_steps"]:
        if s["kind"] in ("segment", "bridge"):  # each split step: its share of the split run's per-call time
            assert cells(res.stdout, s["name"])[-1] == f"{100 * s['total_s'] / calls_b:.1f}%"


def test_split_vs_split_prints_a_ratio_per_step(runs):
    a, b = (json.loads(runs[k].read_text()) for k in ("split", "split2"))
    res = vsr("report", runs["split"], runs["split2"])
    assert res.returncode == 0, res.stderr
    steps_b = {s["name"]: s for s in b["backend_steps"]}
    split_steps = [s for s in a["backend_steps"] if s["kind"] in ("segment", "bridge")]
    assert len(split_steps) >= 4
    for s in split_steps:
        ratio = steps_b[s["name"]]["total_s"] / s["total_s"]
        assert cells(res.stdout, s["name"])[1:5] == [s["kind"], f"{s['total_s']:.3f}",
                                                     f"{steps_b[s['name']]['total_s']:.3f}", f"{ratio:.2f}x"]
    c = json.loads(vsr("report", runs["split"], runs["split2"], "--json").stdout)
    for r in c["steps"]:
        if r["kind"] in ("segment", "bridge"):
            assert r["ratio"] == pytest.approx(steps_b[r["step"]]["total_s"] / r["a_total_s"])
    assert c["settings_differ"] == {"batch": ["1", "2"]}  # the one setting that differs is named
