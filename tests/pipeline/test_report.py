"""StageTimer and RunReport: busy/wait accounting, bottleneck, JSON and table."""

from __future__ import annotations

import json
import time

from vsr.report import RunReport, StageTimer


def test_timer_splits_busy_and_waiting_and_names_the_bottleneck():
    fast, slow = StageTimer("decode"), StageTimer("infer")
    for _ in range(3):
        with fast.busy():
            time.sleep(0.002)
        with fast.waiting_out():
            time.sleep(0.02)
        fast.count()
        with slow.waiting_in():
            time.sleep(0.001)
        with slow.busy():
            time.sleep(0.02)
        slow.count()
    a, b = fast.stats(), slow.stats()
    assert a.items == b.items == 3
    assert a.busy_s < b.busy_s and a.wait_out_s > a.busy_s and b.wait_in_s > 0
    assert a.throughput > b.throughput
    report = RunReport([a, b], {"batch": 1}, wall_s=0.1, frames=3, steps={"run": 0.05})
    assert report.bottleneck.name == "infer"
    d = json.loads(json.dumps(report.to_dict()))
    assert d["bottleneck"] == "infer" and d["settings"] == {"batch": 1} and d["backend_steps_s"] == {"run": 0.05}
    assert [s["name"] for s in d["stages"]] == ["decode", "infer"] and d["fps"] == 30.0
    table = report.table()
    assert "infer" in table.splitlines()[2] and table.splitlines()[2].endswith("*")
    assert "bottleneck: infer" in table


def test_the_end_table_says_the_rate_is_not_known_without_a_wall_time():
    """``vsr upscale``'s closing table printed ``= 0.00 fps`` for a wall time of 0, and frames over a time below
    the report's microseconds (``wall_s`` 0 in the JSON) a rate of millions; ``vsr report`` says not known."""
    for wall in (0.0, 1e-7):
        report = RunReport([], {}, wall_s=wall, frames=3, steps={})
        line = report.table().splitlines()[-1]
        assert line == "3 frames in 0.00 s, fps not known (no wall time); bottleneck: -", line
        d = json.loads(json.dumps(report.to_dict()))
        assert d["wall_s"] == 0.0 and d["fps"] is None
    assert RunReport([], {}, wall_s=0.5, frames=3, steps={}).table().splitlines()[-1].startswith(
        "3 frames in 0.50 s = 6.00 fps;")
