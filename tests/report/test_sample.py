"""Bounded records: the reservoir keeps a uniform sample of fixed size, step times keep exact totals, and a
run's JSON holds its timeline relative to the run's start."""

from __future__ import annotations

import json
import time

import pytest

from vsr.report import REPORT_FORMAT, Reservoir, RunReport, StageTimer, StepTimes, merge_step_stats, step_kind
from vsr.report.sample import percentile


def test_reservoir_keeps_its_bound_and_samples_the_whole_stream():
    r = Reservoir(100)
    for i in range(10_000):
        r.add(i)
    assert r.seen == 10_000 and len(r.items) == 100 and len(set(r.items)) == 100
    # uniform over the stream: as many kept from each half, give or take the sampling noise
    late = sum(1 for i in r.items if i >= 5_000)
    assert 30 <= late <= 70 and max(r.items) > 9_000
    empty = Reservoir(0)
    for i in range(10):
        empty.add(i)
    assert empty.seen == 10 and empty.items == []


def test_percentile_interpolates_between_ranks():
    assert percentile([], 50) is None and percentile([3.0], 95) == 3.0
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5
    assert percentile(range(101), 95) == 95.0 and percentile([1.0, 2.0], 100) == 2.0


def test_step_times_keep_exact_totals_and_calls_and_bounded_samples():
    times = StepTimes(["segment00", "bridge00_DeformConv"], samples=8, intervals=4)
    for i in range(20):
        times.add("segment00", 10.0 + i, 10.0 + i + 0.001 * (i + 1))
    times.add("bridge00_DeformConv", 50.0, 50.5)
    assert times.totals() == pytest.approx({"segment00": 0.001 * 210, "bridge00_DeformConv": 0.5})
    st = times.stats()
    seg = st["segment00"]
    assert seg.calls == 20 and len(seg.samples) == 8 and len(seg.intervals) == 4 and seg.intervals_seen == 20
    assert seg.mean_s == pytest.approx(0.0105) and 0.001 <= seg.p50_s <= seg.p95_s <= 0.020
    assert list(seg.intervals) == sorted(seg.intervals)
    merged = merge_step_stats([st, st], samples=8, intervals=4)
    assert merged["segment00"].calls == 40 and merged["segment00"].total_s == pytest.approx(0.42)
    assert len(merged["segment00"].samples) == 8 and merged["bridge00_DeformConv"].intervals_seen == 2


def test_step_kinds_follow_the_plan_names():
    assert [step_kind(n) for n in ("segment03", "bridge01_DeformConv", "build:plan", "export", "pad", "run")] == \
        ["segment", "bridge", "build", "build", "other", "other"]


def test_run_json_holds_a_timeline_relative_to_the_run_start():
    started = time.perf_counter()
    decode, infer = StageTimer("decode"), StageTimer("infer", intervals=3)
    for _ in range(5):
        with decode.busy():
            time.sleep(0.001)
        with infer.busy():
            time.sleep(0.002)
    steps = StepTimes()
    t0 = time.perf_counter()
    steps.add("segment00", t0, t0 + 0.25)
    report = RunReport([decode.stats(), infer.stats()], {"batch": 1}, time.perf_counter() - started, 5,
                       steps.totals(), started=started, step_stats=steps.stats())
    d = json.loads(json.dumps(report.to_dict()))
    assert d["format"] == REPORT_FORMAT and d["backend_steps_s"] == {"segment00": 0.25}
    assert set(d["stages"][0]) == {"name", "items", "busy_s", "wait_in_s", "wait_out_s", "unit", "throughput"}
    tl = d["timeline"]["stages"]
    assert tl["decode"]["seen"] == 5 and len(tl["decode"]["intervals"]) == 5
    assert tl["infer"]["seen"] == 5 and len(tl["infer"]["intervals"]) == 3
    spans = tl["decode"]["intervals"] + tl["infer"]["intervals"]
    assert all(0 <= a <= b <= d["wall_s"] for a, b in spans)
    assert sum(b - a for a, b in tl["decode"]["intervals"]) == pytest.approx(d["stages"][0]["busy_s"], abs=1e-5)
    row = d["backend_steps"][0]
    assert row["name"] == "segment00" and row["kind"] == "segment" and row["calls"] == 1
    assert row["p50_s"] == row["p95_s"] == row["mean_s"] == 0.25
    assert d["timeline"]["steps"]["segment00"]["intervals"][0][1] - \
        d["timeline"]["steps"]["segment00"]["intervals"][0][0] == pytest.approx(0.25)


def test_a_run_without_recorded_spans_has_no_timeline():
    timer = StageTimer("decode", intervals=0)
    with timer.busy():
        pass
    d = RunReport([timer.stats()], {}, 0.1, 1, {"run": 0.05}).to_dict()
    assert d["timeline"] is None and d["backend_steps"][0] == {
        "name": "run", "kind": "other", "total_s": 0.05, "calls": None, "mean_s": None, "p50_s": None, "p95_s": None}
