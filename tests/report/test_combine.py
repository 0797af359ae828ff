"""One job's chunk reports combined into one report that `vsr report`'s renderer reads."""

from __future__ import annotations

import pytest

from vsr.errors import InputError
from vsr.report import render
from vsr.report.combine import combine_reports
from vsr.report.load import parse_run


def chunk(frames: int, wall: float, infer: float, calls: int, p95: float) -> dict:
    return {
        "format": "vsr-run-report/2", "settings": {"input": "in.mp4", "frames": "x", "batch": 1},
        "frames": frames, "wall_s": wall, "fps": frames / wall, "bottleneck": "infer",
        "stages": [{"name": "decode", "items": frames + 2, "busy_s": 0.1, "wait_in_s": 0.0, "wait_out_s": 0.5,
                    "unit": "frames", "throughput": 1.0},
                   {"name": "infer", "items": frames, "busy_s": infer, "wait_in_s": 0.01, "wait_out_s": 0.0,
                    "unit": "windows", "throughput": 1.0}],
        "backend_steps_s": {"segment0": infer / 2, "build:plan": 0.3},
        "backend_steps": [{"name": "segment0", "kind": "segment", "total_s": infer / 2, "calls": calls,
                           "mean_s": infer / 2 / calls, "p50_s": 0.01, "p95_s": p95},
                          {"name": "build:plan", "kind": "build", "total_s": 0.3, "calls": None, "mean_s": None,
                           "p50_s": None, "p95_s": None}],
        "timeline": {"origin": "run start", "unit": "s",
                     "stages": {"infer": {"seen": 2, "intervals": [[0.1, 0.2], [0.3, 0.4]]},
                                "decode": {"seen": 1, "intervals": [[0.0, 0.05]]}},
                     "steps": {"segment0": {"seen": 1, "intervals": [[0.1, 0.15]]}}},
    }


def test_chunks_sum_into_one_report():
    data = combine_reports([chunk(8, 2.0, 1.5, 8, 0.02), chunk(4, 1.0, 0.7, 4, 0.05)],
                           {"input": "/abs/in.mp4", "frames": "0:12"})
    assert data["frames"] == 12 and data["wall_s"] == 3.0 and data["fps"] == 4.0
    assert data["settings"] == {"input": "/abs/in.mp4", "frames": "0:12", "batch": 1, "chunks": 2}
    infer = next(s for s in data["stages"] if s["name"] == "infer")
    assert infer["items"] == 12 and infer["busy_s"] == pytest.approx(2.2) and data["bottleneck"] == "infer"
    seg, build = data["backend_steps"]
    assert seg["calls"] == 12 and seg["total_s"] == pytest.approx(1.1) and seg["mean_s"] == pytest.approx(1.1 / 12, abs=1e-6)
    assert seg["p95_s"] is None and build["calls"] is None and build["total_s"] == pytest.approx(0.6)
    # the second chunk's timeline starts where the first chunk's wall time ends
    spans = [[0.1, 0.2], [0.3, 0.4], [2.1, 2.2], [2.3, 2.4]]
    assert data["timeline"]["stages"]["infer"] == {"seen": 4, "intervals": spans}
    run = parse_run(data, "job 1")
    text = render.render_text(run)
    assert text.startswith("job 1: 12 frames in 3.00 s = 4.00 fps; bottleneck: infer") and "chunks" in text
    assert render.to_json(run)["summary"]["frames"] == 12


def test_one_chunk_keeps_its_percentiles():
    data = combine_reports([chunk(8, 2.0, 1.5, 8, 0.02)], {"frames": "0:8"})
    assert data["backend_steps"][0]["p95_s"] == 0.02 and data["settings"]["chunks"] == 1


def test_nothing_to_combine_is_one_line():
    with pytest.raises(InputError, match="no chunk of the job is done yet"):
        combine_reports([])


def test_a_jobs_scene_cuts_are_every_chunks():
    # each chunk records the cuts in its own frames: the job's report listed chunk 0's alone ("none")
    rule = {"mode": "auto", "threshold": 3.0, "min_score": 15.0}
    reports = [chunk(10, 1.0, 0.5, 10, 0.01) for _ in range(3)]
    for r, cuts in zip(reports, ([], [25], [37, 50])):
        r["settings"]["scene_cuts"] = {**rule, "cuts": cuts}
    data = combine_reports(reports, {"frames": "0:60"})
    assert data["settings"]["scene_cuts"] == {**rule, "cuts": [25, 37, 50]}
    assert "scene cuts (auto, threshold 3.0): 3, before frames 25, 37, 50" in render.render_text(
        parse_run(data, "job 1"))
    off = [chunk(10, 1.0, 0.5, 10, 0.01) for _ in range(2)]
    for r in off:
        r["settings"]["scene_cuts"] = {"mode": "off"}
    assert combine_reports(off, {"frames": "0:20"})["settings"]["scene_cuts"] == {"mode": "off"}


def test_an_input_that_ended_early_in_a_later_chunk_is_in_the_jobs_report():
    """Each chunk's settings record its own input's early end; the job's report took the first chunk's settings
    alone, so a later chunk's short input (the usual place: the last) was not in it (``vsr jobs list`` said so)."""
    first, last = chunk(8, 2.0, 1.5, 8, 0.02), chunk(4, 1.0, 0.7, 4, 0.05)
    early = {"frames_declared": 20, "frames_decoded": 12}
    last["settings"] = {**last["settings"], "input_ended_early": early}
    assert combine_reports([first, last])["settings"]["input_ended_early"] == early
    assert "input_ended_early" not in combine_reports([first, chunk(4, 1.0, 0.7, 4, 0.05)])["settings"]
