"""`vsr report` on the reports of real tiny runs: a split-plan run (every segment and bridge kernel, adding up to
the inference time), its HTML page (one bar per recorded span, drawn by headless Chromium without console
errors), and a whole-plan run beside it."""

from __future__ import annotations

import json
import shutil
import subprocess
from html.parser import HTMLParser

import av
import pytest

from tests.report.conftest import vsr
from vsr.report import render
from vsr.report.html import render_html
from vsr.report.load import load_run
from vsr.report.svg import STAGE_COLOURS


def test_split_run_lists_each_segment_and_bridge_kernel_adding_up_to_inference(runs):
    data = json.loads(runs["split"].read_text())
    res = vsr("report", runs["split"])
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    names = [r["name"] for r in data["backend_steps"]]
    assert any(n.startswith("segment") for n in names) and any(n.startswith("bridge") for n in names)
    for n in names:
        assert any(line.split()[:1] == [n] for line in lines), n
    for s in data["stages"]:
        row = next(line.split() for line in lines if line.split()[:1] == [s["name"]])
        assert row[-6:-2] == [str(s["items"]), f"{s['busy_s']:.3f}", f"{s['wait_in_s']:.3f}", f"{s['wait_out_s']:.3f}"]
        assert row[-1] == f"{100 * s['busy_s'] / data['wall_s']:.1f}%"
    assert f"bottleneck: {data['bottleneck']}" in lines[0]
    summary = render.summary(load_run(runs["split"]))
    infer = next(s["busy_s"] for s in data["stages"] if s["name"] == "infer")
    # (the steps' time is most of the stage's: on this 0.1 s run the Python between them is a few ms, more on a
    # loaded machine -- 94.9 % once, at a load average of 5 on 2 cores)
    assert summary["infer_busy_s"] == infer and 0.90 <= summary["accounted_share_of_infer"] <= 1.05
    as_json = json.loads(vsr("report", runs["split"], "--json").stdout)
    assert [r["busy_s"] for r in as_json["stages"]] == [s["busy_s"] for s in data["stages"]]
    assert [r["step"] for r in as_json["steps"]] == names


class Shapes(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    handle_startendtag = handle_starttag


def test_html_draws_one_bar_per_recorded_span_and_fetches_nothing(runs, tmp_path):
    data = json.loads(runs["split"].read_text())
    page = tmp_path / "r.html"
    assert vsr("report", runs["split"], "--html", page).returncode == 0
    text = page.read_text()
    shapes = Shapes()
    shapes.feed(text)
    spans = sum(len(v["intervals"]) for group in ("stages", "steps") for v in data["timeline"][group].values())
    assert spans >= 5 * 6  # every stage handled every frame at least once
    assert sum(1 for tag, a in shapes.tags if tag == "rect" and a.get("class") == "iv") == spans
    assert {a.get("class") for tag, a in shapes.tags if tag == "svg"} == {"gantt", "bars"}
    assert not any(tag in ("script", "link", "img", "iframe") for tag, _ in shapes.tags)
    assert "https://" not in text and text.count("http://") == text.count('xmlns="http://www.w3.org/2000/svg"')


def test_whole_and_split_side_by_side(runs):
    a, b = (json.loads(runs[k].read_text()) for k in ("whole", "split"))
    res = vsr("report", runs["whole"], runs["split"], "--json")
    assert res.returncode == 0, res.stderr
    c = json.loads(res.stdout)
    wall = next(r for r in c["summary"] if r["what"] == "wall_s")
    assert wall["ratio"] == pytest.approx(b["wall_s"] / a["wall_s"], rel=1e-4)
    for sa, sb, row in zip(a["stages"], b["stages"], c["stages"]):
        assert row["stage"] == sa["name"] == sb["name"]
        assert row["ratio"] == pytest.approx(sb["busy_s"] / sa["busy_s"])
    steps = {r["step"]: r for r in c["steps"]}
    assert steps["run"]["b_total_s"] is None and steps["run"]["ratio"] is None  # the whole model: A only
    assert all(steps[n]["a_total_s"] is None for n in b["backend_steps_s"] if n.startswith(("segment", "bridge")))
    assert c["settings_differ"]["backend"] == [a["settings"]["backend"], b["settings"]["backend"]]
    assert c["note"] is None  # the same frames: totals compare directly
    page = runs["split"].parent / "cmp.html"
    text = vsr("report", runs["whole"], runs["split"], "--html", page).stdout
    shapes = Shapes()
    shapes.feed(page.read_text())
    assert [a.get("class") for tag, a in shapes.tags if tag == "svg"] == ["gantt", "gantt"]
    infer = next(line.split() for line in text.splitlines() if line.startswith("infer "))
    assert infer[-1] == f"{next(r['ratio'] for r in c['stages'] if r['stage'] == 'infer'):.2f}x"


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (apt-get install chromium)")
def test_page_opens_in_headless_chromium_without_console_errors(runs, tmp_path):
    page = tmp_path / "r.html"
    page.write_text(render_html(load_run(runs["split"])))
    shot = tmp_path / "shot.png"
    res = subprocess.run([CHROMIUM, "--headless", "--disable-gpu", "--no-sandbox", f"--user-data-dir={tmp_path / 'p'}",
                          "--enable-logging=stderr", "--v=0", f"--screenshot={shot}", "--window-size=1200,900",
                          page.as_uri()], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and shot.is_file(), res.stderr
    assert "Uncaught" not in res.stderr and "ERROR:CONSOLE" not in res.stderr
    with av.open(str(shot)) as c:
        rgb = next(c.decode(video=0)).to_ndarray(format="rgb24")
    assert rgb.shape == (900, 1200, 3) and rgb.std() > 10  # not blank
    colours = {tuple(p) for p in rgb.reshape(-1, 3)[::7]}
    stages = [st["name"] for st in json.loads(runs["split"].read_text())["stages"]]
    infer = STAGE_COLOURS[stages.index("infer") % len(STAGE_COLOURS)]
    assert tuple(int(infer[i:i + 2], 16) for i in (1, 3, 5)) in colours  # the infer stage's bars in the timeline
    assert (242, 142, 43) in colours  # the bridge kernels' bars in the step chart (#f28e2b)


def test_a_comparison_puts_a_step_above_the_steps_it_holds(tmp_path):
    """``report A B``: the torch backend's whole-model "run" holds its "features" and "windows" (their time is
    in it); the comparison lists it above them, indented as parts, not beside them as steps of their own."""
    from vsr.report import RunReport, StageStats

    def saved(name: str, steps: dict) -> object:
        stage = StageStats("infer", 2, 2.0, 0.0, 0.0, "frames", (), 0)
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(RunReport([stage], {"backend": name}, 2.0, 2, steps).to_dict()))
        return load_run(path)

    a = saved("torch", {"features": 0.5, "run": 1.5, "windows": 0.9})
    b = saved("split", {"segment_0": 0.7, "bridge:dcn": 0.2})
    rows = render.compare(a, b)["steps"]
    assert [(r["step"], r["part_of"]) for r in rows][:3] == [("run", None), ("features", "run"), ("windows", "run")]
    # each share of its run's per-call time counted once: the parent 100 %, its parts within it (they were 50 %,
    # 17 % and 30 %: the parent's time counted twice)
    assert {r["step"]: r["a_share"] for r in rows if r["a_share"] is not None} == pytest.approx({
        "run": 1.0, "features": 0.5 / 1.5, "windows": 0.9 / 1.5}, rel=1e-12)
    assert {r["step"]: r["b_share"] for r in rows if r["b_share"] is not None} == pytest.approx({
        "segment_0": 0.7 / 0.9, "bridge:dcn": 0.2 / 0.9}, rel=1e-12)
    text = render.render_compare_text(a, b)
    lines = [line for line in text.splitlines()  # the step table's rows (kind "other"), not the summary's
             if line.lstrip().startswith(("run ", "features", "windows")) and " other " in line]
    assert lines[0].startswith("run") and lines[1].startswith("  features") and lines[2].startswith("  windows")
