"""Reading reports back: an old report (no timeline) still renders; broken or foreign JSON is one error line."""

from __future__ import annotations

import json
from html.parser import HTMLParser

import pytest

from vsr.cli import main
from vsr.errors import InputError
from vsr.outfiles import check_file_output
from vsr.report import render
from vsr.report.load import load_run

# what `vsr upscale --report` wrote before the timeline existed
OLD = {"settings": {"backend": "ort-split", "memory_plan": {"budget_mb": 3072, "tile": None}},
       "frames": 6, "wall_s": 2.0, "fps": 3.0, "bottleneck": "infer",
       "stages": [{"name": "decode", "items": 6, "busy_s": 0.1, "wait_in_s": 0.0, "wait_out_s": 1.8,
                   "unit": "frames", "throughput": 60.0},
                  {"name": "infer", "items": 6, "busy_s": 1.9, "wait_in_s": 0.05, "wait_out_s": 0.0,
                   "unit": "frames", "throughput": 3.16}],
       "backend_steps_s": {"segment00": 0.5, "bridge00_DeformConv": 1.3, "build:plan": 0.08}}


def write(tmp_path, data, name="run.json"):
    p = tmp_path / name
    p.write_text(data if isinstance(data, str) else json.dumps(data))
    return p


def report(capsys, *args) -> tuple[int, str, str]:
    rc = main(["report", *map(str, args)])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_an_old_report_renders_as_tables_without_a_timeline(tmp_path, capsys):
    p = write(tmp_path, OLD)
    rc, out, err = report(capsys, p, "--html", tmp_path / "r.html")
    assert rc == 0 and err == f"vsr: wrote {tmp_path / 'r.html'}\n"
    assert "infer *" in out and "no timeline" in out and "bridge00_DeformConv" in out
    # the builds are the closer accounting here: 0.5 + 1.3 + 0.08 = 1.88 of 1.9 s
    assert "98.9% of the infer stage's busy 1.900 s" in out
    page = (tmp_path / "r.html").read_text()
    assert 'class="iv"' not in page and "without a timeline" in page
    HTMLParser().feed(page)
    run = load_run(p)
    assert [r["calls"] for r in render.step_rows(run)] == [None, None, None] and not run.has_timeline


BROKEN = {
    "truncated": ('{"stages": [', "is not JSON"),
    "a list": ("[1, 2]", "is not a vsr run report"),
    "no stages": ({"frames": 3}, "is not a vsr run report"),
    "another format": ({"format": "chrome-trace/1", "stages": []}, "not a vsr run report"),
    "a stage without busy time": ({**OLD, "stages": [{"name": "decode", "items": 1}]}, "'busy_s'"),
    "negative wall time": ({**OLD, "wall_s": -1}, "'wall_s'"),
    "bad timeline": ({**OLD, "timeline": {"stages": {"decode": {"intervals": [[2.0, 1.0]]}}}}, "ends before"),
    "text timeline": ({**OLD, "timeline": {"stages": {"decode": {"intervals": "soon"}}}}, "'intervals' list"),
}


@pytest.mark.parametrize("kind", BROKEN)
def test_broken_or_foreign_json_is_one_error_line(tmp_path, capsys, kind):
    data, message = BROKEN[kind]
    p = write(tmp_path, data)
    with pytest.raises(InputError, match=message):
        load_run(p)
    rc, out, err = report(capsys, p, "--html", tmp_path / "r.html")
    assert rc == 2 and out == "" and len(err.splitlines()) == 1 and err.startswith("vsr: error: ")
    assert not (tmp_path / "r.html").exists()


def test_missing_report_and_existing_page_are_one_error_line(tmp_path, capsys):
    rc, _, err = report(capsys, tmp_path / "nope.json")
    assert rc == 2 and err.startswith("vsr: error: cannot read run report") and len(err.splitlines()) == 1
    p = write(tmp_path, OLD)
    page = tmp_path / "mine.html"
    page.write_text("not vsr's")
    rc, _, err = report(capsys, p, "--html", page)
    assert rc == 2 and "--overwrite" in err and page.read_text() == "not vsr's"
    assert report(capsys, p, "--html", page, "--overwrite")[0] == 0 and "bridge00_DeformConv" in page.read_text()
    assert sorted(f.name for f in tmp_path.iterdir()) == ["mine.html", "run.json"]  # no temporary left over
    rc, _, err = report(capsys, p, p, p)
    assert rc == 2 and "one report, or two" in err
    rc, out, err = report(capsys, p, "--json", "--html", "-")  # the page was printed, --json dropped silently
    assert rc == 2 and out == "" and err.splitlines() == [
        "vsr: error: --html - puts the page on standard output, where --json would print the tables: give one of "
        "them (or --html FILE)"]


def test_a_page_in_a_missing_folder_is_refused(tmp_path):
    with pytest.raises(InputError, match="folder does not exist"):
        check_file_output(tmp_path / "no" / "r.html", "--html", "page", overwrite=False)


def test_two_reports_side_by_side_give_b_over_a(tmp_path, capsys):
    slower = json.loads(json.dumps(OLD))
    slower["wall_s"] = 4.0
    for s in slower["stages"]:
        s["busy_s"] *= 2
    slower["backend_steps_s"] = {"run": 3.0}
    a, b = write(tmp_path, OLD, "a.json"), write(tmp_path, slower, "b.json")
    rc, out, _ = report(capsys, a, b, "--json")
    c = json.loads(out)
    assert rc == 0 and [r["ratio"] for r in c["stages"]] == [2.0, 2.0] and c["note"] is None
    assert {r["step"]: r["ratio"] for r in c["steps"]} == {"segment00": None, "bridge00_DeformConv": None,
                                                           "build:plan": None, "run": None}
    assert next(r for r in c["summary"] if r["what"] == "fps")["ratio"] == 0.5
    slower["frames"] = 3
    write(tmp_path, slower, "b.json")
    rc, out, _ = report(capsys, a, b)
    assert rc == 0 and "note: A wrote 6 frames and B 3" in out
    assert next(line for line in out.splitlines() if line.startswith("infer ")).split() == ["infer", "1.900", "3.800",
                                                                                          "2.00x"]


def test_names_in_a_report_reach_the_terminal_escaped(tmp_path, capsys):
    data = dict(OLD, settings={**OLD["settings"], "input": "clip\x1b[2J\nname.mp4"})
    rc, out, err = report(capsys, write(tmp_path, data))
    assert rc == 0 and "\x1b" not in out and "clip\\x1b[2J\\nname.mp4" in out
    name = tmp_path / "r\x1b[33m.json"  # the report's own name, shown in its page's title and headline
    write(tmp_path, data, name.name)
    for page in ("-", str(tmp_path / "p.html")):  # the page on standard output (a terminal's), and in a file
        rc, out, _ = report(capsys, name, "--html", page)
        text = out if page == "-" else (tmp_path / "p.html").read_text()
        assert rc == 0 and "\x1b" not in text and "clip\\x1b[2J\\nname.mp4" in text and "r\\x1b[33m.json" in text


@pytest.mark.parametrize("data, words", [
    ({**OLD, "format": "vsr-run-report/3"}, "format vsr-run-report/3, which this vsr cannot read"),
    ({**OLD, "frames": 10**400}, "a number of 401 digits"),
    ({**OLD, "wall_s": 1e300}, "holds 1e+300: beyond any number"),
    ({**OLD, "settings": {"deep": json.loads("[" * 40 + "]" * 40)}}, "nests deeper than 32 levels"),
])
def test_reports_beyond_any_real_one_are_refused_before_rendering(data, words):
    """Also for reports that never were a file (a job's chunk reports, read from its store)."""
    from vsr.report.load import parse_run

    with pytest.raises(InputError) as e:
        parse_run(data, "chunk 3")
    assert words in str(e.value) and "\n" not in str(e.value)
