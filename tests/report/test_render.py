"""Rendering a report whose backend kept per-call step records: calls and percentiles in the tables, a timeline
row per step in the page."""

from __future__ import annotations

import json
from html.parser import HTMLParser

from vsr.report import RunReport, StageStats, StepTimes
from vsr.report import render
from vsr.report.html import render_html
from vsr.report.load import escaped, parse_run
from vsr.report.svg import nice_step


def recorded_run() -> dict:
    """Two stages and two steps over 4 calls at exact, known times (``perf_counter`` values made up)."""
    starts = [100.0 + i for i in range(4)]
    decode = StageStats("decode", 4, 0.4, 0.0, 0.0, intervals=tuple((t, t + 0.1) for t in starts), intervals_seen=4)
    infer = StageStats("infer", 4, 3.2, 0.0, 0.0, intervals=tuple((t + 0.1, t + 0.9) for t in starts),
                       intervals_seen=4)
    steps = StepTimes(["segment00", "bridge00_DeformConv"])
    for i, t in enumerate(starts):
        steps.add("segment00", t + 0.1, t + 0.3 + 0.01 * i)
        steps.add("bridge00_DeformConv", t + 0.3 + 0.01 * i, t + 0.9)
    report = RunReport([decode, infer], {"backend": "ort-split"}, 4.0, 4, steps.totals(), started=100.0,
                       step_stats=steps.stats())
    return json.loads(json.dumps(report.to_dict()))


def test_tables_show_calls_and_percentiles_and_steps_add_up():
    run = parse_run(recorded_run(), "run.json")
    rows = {r["step"]: r for r in render.step_rows(run)}
    seg = rows["segment00"]
    assert seg["calls"] == 4 and abs(seg["p50_s"] - 0.215) < 1e-9 and abs(seg["p95_s"] - 0.2285) < 1e-9
    assert abs(rows["bridge00_DeformConv"]["share"] + seg["share"] - 1.0) < 1e-6
    text = render.render_text(run)
    line = next(x for x in text.splitlines() if x.startswith("segment00")).split()
    assert line == ["segment00", "segment", "4", "0.860", "215.00", "215.00", "228.50", "26.9%"]
    assert "100.0% of the infer stage's busy 3.200 s" in text and "no timeline" not in text


class Rects(HTMLParser):
    def __init__(self):
        super().__init__()
        self.iv: list[dict] = []
        self.texts: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "rect" and dict(attrs).get("class") == "iv":
            self.iv.append(dict(attrs))

    handle_startendtag = handle_starttag

    def handle_data(self, data):
        self.texts.append(data.strip())


def test_page_draws_every_stage_and_step_span_in_time_order():
    page = Rects()
    page.feed(render_html(parse_run(recorded_run(), "run.json")))
    assert len(page.iv) == 2 * 4 + 2 * 4 and "segment00" in page.texts
    decode_x = [float(r["x"]) for r in page.iv[:4]]
    assert decode_x == sorted(decode_x) and decode_x[0] == 170.0  # the run's start is the plot's left edge


def test_axis_steps_are_round_numbers():
    assert [nice_step(s) for s in (36.0, 0.96, 8.0, 0.0)] == [5.0, 0.2, 1.0, 1.0]


def test_the_encoder_line_names_the_rate_option_the_encoder_ran_with():
    """x264's CRF is ``crf``; NVENC's constant quality (``rc=vbr cq=N``, its own scale) is ``cq``, not a CRF."""
    def line(settings):
        return RunReport([], settings, 1.0, 1, {}).encoder_line()

    assert line({"codec": "libx264", "crf": 23, "preset": "medium", "pix_fmt": "yuv420p"}) == \
        "encoder: libx264, crf 23, preset medium, yuv420p"
    assert line({"codec": "hevc_nvenc", "crf": 27.5, "preset": "p4", "pix_fmt": "yuv420p"}) == \
        "encoder: hevc_nvenc, cq 27.5, preset p4, yuv420p"
    assert line({"codec": "h264_nvenc", "crf": None, "preset": "p4"}) == "encoder: h264_nvenc, preset p4"


def test_a_report_of_no_wall_time_says_its_rate_is_not_known():
    """`wall_s: 0` (a hand-edited report, a run of no frames) printed "0.00 fps", a B/A of 0.00x beside another
    run, and shares of an infer stage busy 0 s taken of the steps' sum instead; a stage marked the bottleneck
    where none was busy.  Every ratio of a zero denominator is shown as not known, in text, --json and the page."""
    from vsr.report.html import render_compare_html

    data = recorded_run()
    data["wall_s"] = 0
    run = parse_run(data, "zero.json")
    text = render.render_text(run)
    assert text.splitlines()[0] == "zero.json: 4 frames in 0.00 s, fps not known (no wall time); bottleneck: infer"
    assert "0.00 fps" not in text and render.to_json(run)["summary"]["fps"] is None
    page = render_html(run)
    assert "4 frames in 0.00 s, fps not known (no wall time)" in page and "0.00 fps" not in page
    fps = next(r for r in render.compare(parse_run(recorded_run(), "a.json"), run)["summary"] if r["what"] == "fps")
    assert fps["a"] == 1.0 and fps["b"] is None and fps["ratio"] is None
    fps_line = next(x for x in render.render_compare_text(parse_run(recorded_run(), "a.json"), run).splitlines()
                    if x.startswith("fps"))
    assert fps_line.split() == ["fps", "1.00", "-", "-"]
    both = render_compare_html(parse_run(recorded_run(), "a.json"), run)
    assert "<td>fps</td><td class=n>1.00</td><td class=n>-</td><td class=n>-</td>" in both

    for s in data["stages"]:  # a run of no frames: no stage busy, the infer stage's 0 s divides nothing
        s["items"], s["busy_s"] = 0, 0.0
    data["frames"] = 0
    idle = parse_run(data, "idle.json")
    text = render.render_text(idle)
    assert text.splitlines()[0] == "idle.json: 0 frames in 0.00 s, fps not known (no wall time); bottleneck: -"
    assert all(r["share"] is None and r["items_per_s"] is None and not r["bottleneck"]
               for r in render.stage_rows(idle))
    assert [r["share"] for r in render.step_rows(idle)] == [None, None]
    assert "backend steps 3.200 s; the infer stage was busy 0 s; one-off builds 0.000 s" in text
    page = Rects()
    page.feed(render_html(idle))
    assert "0.860 s" in page.texts and not any(t.endswith("%)") for t in page.texts)  # a bar's label: no share


def test_the_source_colour_is_named_in_the_tables_and_the_page_and_kept_as_numbers_in_json():
    """The matrix was named (smpte170m) while its primaries and transfer showed FFmpeg's codes (6, 6)."""
    data = recorded_run()
    data["settings"]["source"] = {"colour": {"matrix": "bt2020nc", "range": "tv", "primaries": 9, "transfer": 16,
                                             "guessed": []}}
    run = parse_run(data, "run.json")
    rows = [ln.split() for ln in render.render_text(run).splitlines()]
    assert ["source.colour.primaries", "bt2020"] in rows and ["source.colour.transfer", "smpte2084"] in rows
    page = render_html(run)
    assert "<td>source.colour.primaries</td><td>bt2020</td>" in page
    assert "<td>source.colour.transfer</td><td>smpte2084</td>" in page
    settings = render.to_json(run)["settings"]
    assert (settings["source.colour.primaries"], settings["source.colour.transfer"]) == ("9", "16")
    data["settings"]["source"]["colour"].update(primaries=6, transfer=18)
    text = render.render_text(parse_run(data, "run.json"))
    assert "smpte170m" in text and "arib-std-b67" in text
    data["settings"]["source"]["colour"].update(primaries=99)  # no name: the number, as it came
    rows = [ln.split() for ln in render.render_text(parse_run(data, "run.json")).splitlines()]
    assert ["source.colour.primaries", "99"] in rows


def test_an_input_that_ended_early_or_is_damaged_is_said_under_the_headline():
    """(they were rows deep in the settings table: `vsr report` of a run that lost frames read as a clean run's)"""
    data = recorded_run()
    clean = render.render_text(parse_run(data, "run.json")).splitlines()
    assert not any(line.startswith("input ") for line in clean)
    data["settings"]["input_ended_early"] = {"frames_written": 9, "frames_decoded": 9, "frames_declared": 25,
                                             "detail": "its header declares 25 frames"}
    data["settings"]["input_damaged"] = {"frames_with_errors": 1, "error_lines": 3, "first_s": 0.42,
                                         "first_error": "error while decoding MB 5 7\x1b[31m"}
    lines = render.render_text(escaped(parse_run(data, "run.json"))).splitlines()  # (as vsr report shows it)
    assert lines[1:3] == ["input ended early: its header declares 25 frames; 9 frames decoded, 9 written",
                          "input damaged: 1 frames decoded with errors, 3 FFmpeg errors (first: error while "
                          "decoding MB 5 7\\x1b[31m), first near 0.42 s"]
