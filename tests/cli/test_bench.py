"""`vsr bench` on edvr-tiny: a report per case that `vsr report` reads, every case timed on the same frames with
warm-up left out, ratios paired with the baseline, and one-line errors for bad input."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import Clip, write_clip
from vsr.bench import PRECISIONS, bench_cases
from vsr.report.load import load_run

FRAMES = 2
TINY = ["--config", "edvr-tiny", "--size", "16x24", "--frames", str(FRAMES), "--threads", "1", "--quiet"]


def vsr(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vsr", *map(str, args)], capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def bench(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """One bench of every case on a real 3-frame clip (shorter than the 4 frames two windows need)."""
    d = tmp_path_factory.mktemp("bench")
    clip = write_clip(d / "in.mp4", Clip(width=24, height=16, frames=3))
    res = vsr("bench", *TINY, "--input", clip, "--out", d / "out", "--html")
    assert res.returncode == 0, res.stderr
    return d / "out", res


def test_every_case_has_a_report_that_vsr_report_reads(bench):
    out, res = bench
    summary = json.loads((out / "summary.json").read_text())
    assert summary["format"] == "vsr-bench/1"
    names = [c.name for c in bench_cases() if c.kind == "frames"]  # upscale- cases run only when named
    assert [c["case"] for c in summary["cases"]] == names
    for case in summary["cases"]:
        run = load_run(out / case["report"])
        assert run.frames == FRAMES and run.settings["bench"] == case["case"]
        assert [s.name for s in run.stages] == ["infer"] and run.stages[0].items == FRAMES
        assert run.stages[0].busy_s == pytest.approx(sum(case["times_s"])) and all(t > 0 for t in case["times_s"])
        assert (out / f"{case['case']}.html").is_file()
        assert vsr("report", out / case["report"]).returncode == 0
        assert case["case"] in res.stdout  # the terminal table's row
    # the warm-up window and one per timed frame: 3 windows of 3 frames
    assert "in.mp4 frames 0-2 (played back and forth to 5)" in summary["settings"]["input"]


def test_warm_up_is_left_out_of_the_step_records(bench):
    out, _ = bench
    run = load_run(out / "ort-split-fp32.json")
    per_call = [s for s in run.steps if s.kind in ("segment", "bridge")]
    assert per_call and all(s.calls == FRAMES for s in per_call)  # the untimed run is not among them
    assert 0.5 * run.infer_busy_s < sum(s.total_s for s in run.call_steps) <= run.infer_busy_s  # inside the calls
    spans = run.stages[0].intervals
    assert all(a >= 0 for a, _ in spans) and len(spans) == FRAMES


def test_ratios_are_paired_with_the_baseline(bench):
    out, _ = bench
    summary = json.loads((out / "summary.json").read_text())
    cases = {c["case"]: c for c in summary["cases"]}
    base = cases[summary["baseline"]]
    assert summary["baseline"] == "ort-whole-fp32"
    assert base["time_ratio"] == 1.0 and base["speedup"] == 1.0 and base["max_abs_diff"] == 0.0
    for c in cases.values():
        pairs = [t / b for t, b in zip(c["times_s"], base["times_s"])]
        assert c["time_ratio"] == pytest.approx(statistics.median(pairs))
        assert c["median_s"] == pytest.approx(statistics.median(c["times_s"]))
        if c["precision"] == "fp32":
            assert c["max_abs_diff"] < 1e-3  # every fp32 backend computes the same frames


def test_existing_reports_are_kept_without_overwrite(bench):
    out, _ = bench
    before = (out / "summary.json").read_text()
    res = vsr("bench", *TINY, "--input", "random", "--cases", "ort-whole-fp32", "--out", out)
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "--overwrite" in res.stderr
    assert (out / "summary.json").read_text() == before


@pytest.mark.parametrize("out, overwrite, words", [
    ("/sys/b", False, "--out /sys/b cannot be made: no folder can be created in /sys"),
    ("/sys/b.json", False, "--out folder is not writable: /sys"),
    ("{d}/d.json", True, "d.json is a folder: give the summary's file name"),  # a folder named like a summary
    ("", False, "--out is empty"),  # (it wrote into the current folder)
])
def test_an_out_that_cannot_be_written_is_refused_before_the_bench(tmp_path, out, overwrite, words):
    """Checked before any model loads, by vsr.outfiles' rules and write probe (as report --html, preview --out):
    one line, exit 2, nothing written; it ran the whole bench, then FileNotFoundError or IsADirectoryError, exit 1."""
    if out.startswith("/sys") and not Path("/sys").is_dir():
        pytest.skip("needs /sys, a folder no file can be created in")
    (tmp_path / "d.json").mkdir()
    before = sorted(tmp_path.rglob("*"))
    res = vsr("bench", "--config", "edvr-tiny", "--size", "16x16", "--frames", "1", "--cases", "ort-whole-fp32",
              "--out", out.format(d=tmp_path), *(["--overwrite"] if overwrite else []))
    assert res.returncode == 2, res.stderr
    (line,) = res.stderr.splitlines()  # no progress line: nothing ran
    assert line.startswith("vsr: error:") and words in line
    assert sorted(tmp_path.rglob("*")) == before and not Path("summary.json").exists()


def test_a_symbolic_link_among_the_files_is_not_replaced_even_with_overwrite(tmp_path):
    """As report --html and preview --out: the rename would replace the link, not write through it."""
    out, target = tmp_path / "out", tmp_path / "elsewhere.json"
    out.mkdir()
    target.write_text("{}\n")
    (out / "summary.json").symlink_to(target)
    res = vsr("bench", *TINY, "--input", "random", "--cases", "ort-whole-fp32", "--out", out, "--overwrite")
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert "summary.json: it is a symbolic link" in res.stderr and "standard output" not in res.stderr
    assert (out / "summary.json").is_symlink() and target.read_text() == "{}\n"
    assert sorted(p.name for p in out.iterdir()) == ["summary.json"]


def test_overwrite_removes_the_earlier_benchs_files_the_new_summary_does_not_list(bench, tmp_path):
    """The earlier bench's reports and pages of cases not run again (and its page of a case run again without
    --html) would sit beside a summary that does not list them; the user's own files stay, also those named
    like a case's report that the earlier summary does not list."""
    import shutil

    out = tmp_path / "out"
    shutil.copytree(bench[0], out)
    mine = {"notes.txt": "mine", "upscale-ort-whole-fp32.json": "{}", "ort-whole-fp32.txt": "mine"}
    for name, text in mine.items():
        (out / name).write_text(text)
    res = vsr("bench", *TINY, "--input", "random", "--cases", "ort-whole-fp32", "--out", out, "--overwrite")
    assert res.returncode == 0, res.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert [c["report"] for c in summary["cases"]] == ["ort-whole-fp32.json"]
    assert sorted(p.name for p in out.iterdir()) == sorted(["summary.json", "ort-whole-fp32.json", *mine])
    assert all((out / name).read_text() == text for name, text in mine.items())


def test_the_table_shows_a_name_with_control_characters_escaped(bench):
    """--input (and a config file's name) are printed as vsr.errors.printable shows them: an escape sequence or a
    newline in a file name is not sent to the terminal."""
    from vsr.bench import render_table

    data = json.loads((bench[0] / "summary.json").read_text())
    data["settings"]["input"] = "v\x1b[31m\nx.mp4"
    data["config"] = "c\x1b]0;t\x07.toml"
    text = render_table(data)
    assert "\x1b" not in text and "\x07" not in text
    assert "input: v\\x1b[31m\\nx.mp4" in text and "c\\x1b]0;t\\x07.toml" in text


@pytest.mark.parametrize("frames, said", [(1, "1 timed frame per case"), (3, "3 timed frames per case")])
def test_the_table_says_one_timed_frame_in_the_singular(bench, frames, said):
    """`vsr bench --frames 1` said "1 timed frames per case" (and "medians of the 1 per-frame pairs")."""
    from vsr.bench import render_table

    data = json.loads((bench[0] / "summary.json").read_text())
    data["settings"]["frames"] = frames
    text = render_table(data)
    assert f", {said}, " in text and ("1 per-frame pair with it" in text) == (frames == 1), text


@pytest.mark.parametrize("args, words", [
    (["--config", "no-such-model"], "no-such-model"),
    (["--size", "16"], "--size"),
    (["--size", "0x24"], "--size"),
    (["--frames", "0"], "--frames"),
    (["--threads", "two"], "--threads"),
    (["--input", "/no/such/clip.mp4"], "/no/such/clip.mp4"),
    (["--cases", "ort-whole-fp64"], "ort-whole-fp64"),
    (["--cases", "ort-split-fp32", "--baseline", "torch-eager-fp32"], "torch-eager-fp32"),
    (["--html"], "--html"),
    (["--out", "/no/such/folder/x.json"], "/no/such/folder"),
    # the frames are held in memory: these ran into the kernel's OOM killer (24 GB), or a MemoryError's line
    (["--frames", "99999999999"], "--frames 99999999999: at most 1000000"),
    (["--size", "99999x99999"], "a side is at most 4096"),
    (["--size", "4000x4000", "--frames", "999999"], "more than half of this machine's"),
])
def test_bad_input_is_one_line(args, words):
    res = vsr("bench", "--config", "edvr-tiny", "--size", "16x24", "--frames", "1", "--quiet", *args)
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith("vsr: error:") and res.stderr.count("\n") == 1 and words in res.stderr


def test_one_case_list_covers_every_backend_plan_and_precision():
    cases = bench_cases(threads=1)
    assert [(c.backend, c.plan, c.precision) for c in cases][:1] == [("torch", "eager", "fp32")]
    # the whole graph runs in fp32 only; the split plan in every precision, with each frame's features kept or not
    assert {(c.plan, c.precision, c.streams) for c in cases if c.backend == "ort"} == {("whole", "fp32", False)} | {
        ("split", p, s) for p in PRECISIONS for s in (True, False)}
    frames = [c for c in cases if c.kind == "frames"]
    assert [c.name for c in cases if c.kind == "upscale"] == ["upscale-" + c.name for c in frames]
    assert "ort-split-fp32-nostream" in {c.name for c in frames} and "torch-eager-fp32-nostream" in {
        c.name for c in frames}
    assert "int8" in PRECISIONS
    assert len({c.name for c in cases}) == len(cases) and all(c.options.threads == 1 for c in cases)


def test_an_upscale_case_times_a_whole_process_with_its_warm_up_apart(tmp_path):
    out = tmp_path / "out"
    res = vsr("bench", *TINY, "--input", "random", "--cases", "torch-eager-fp32,upscale-torch-eager-fp32",
              "--baseline", "torch-eager-fp32", "--out", out)
    assert res.returncode == 0, res.stderr
    summary = json.loads((out / "summary.json").read_text())
    row = next(c for c in summary["cases"] if c["case"] == "upscale-torch-eager-fp32")
    run = load_run(out / row["report"])
    assert run.frames == FRAMES + 3  # the bench's frames, each an output frame (edvr-tiny: 3-frame windows)
    assert row["times_s"] == [pytest.approx(run.wall_s / run.frames)]  # per frame after warm-up
    assert row["process_s"] > row["build_s"] > 0 and row["process_s"] == pytest.approx(row["build_s"] + run.wall_s)
    assert row["time_ratio"] is None  # a process is not paired with per-frame calls
    assert run.settings["bench"] == row["case"] and run.settings["backend"] == "torch"
    assert vsr("report", out / row["report"]).returncode == 0 and "upscale-torch-eager-fp32" in res.stdout
