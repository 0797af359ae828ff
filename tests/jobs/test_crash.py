"""Crash safety: `kill -9` of `vsr jobs run` at random moments, then a restart, a few times (the full 20 kills
are scripts/crash_jobs.py, docs/benchmarks.md "Batch jobs"): every job done, outputs frame-exact
to a single pass, no chunk computed twice, never a partial file at an output path, the store intact."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def crash_script():
    spec = importlib.util.spec_from_file_location("crash_jobs", REPO / "scripts" / "crash_jobs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("workers, kills, lengths", [(1, 3, (14, 9)), (2, 2, (10,))])
def test_kill_9_at_random_moments_loses_nothing(make_clip, tmp_path, workers, kills, lengths):
    clips = [make_clip(f"v{i}.mp4", width=32, height=24, frames=n, seed=i) for i, n in enumerate(lengths)]
    work = tmp_path / "work"
    work.mkdir()
    script = crash_script()
    s = script.crash_run(clips, work, kills=kills, chunk_frames=3, workers=workers, seed=1, max_wait_s=2.0,
                         options=[*script.OPTIONS, "--backend", "torch"])
    assert s["states"] == ["done"] * len(clips) and not s["errors"], s
    assert s["kills_while_working"] >= 1  # seed 1: the first kill comes 0.27 s after the first claim
    assert s["frame_exact"] == {f"v{i}.mkv": True for i in range(len(clips))}
    assert s["max_computed"] <= 1 and s["partial_outputs_seen"] == 0
    assert s["left_in_out_dir"] == [] and s["integrity_check"] == "ok"


def test_an_input_replaced_between_runs_fails_its_job_and_never_mixes_two_versions(make_clip, tmp_path):
    """The first clip is replaced (same length, mirrored pictures) after the first kill, with chunks of it
    committed: its job fails with one line naming the file, leaves no output and no chunks; the other job is
    done, frame-exact."""
    clips = [make_clip(f"v{i}.mp4", width=32, height=24, frames=n, seed=i) for i, n in enumerate((12, 6))]
    work = tmp_path / "work"
    work.mkdir()
    script = crash_script()
    s = script.crash_run(clips, work, kills=1, chunk_frames=3, seed=1, max_wait_s=2.0, replace_after=1,
                         options=[*script.OPTIONS, "--backend", "torch"])
    assert s["cycles"][0]["chunks_done"] >= 1, s  # the kill came after a chunk of the first clip was committed
    replaced = s["replaced"]
    assert replaced["state"] == "failed" and not replaced["output_exists"], s
    assert replaced["error"].startswith(f"the input {clips[0]} changed since the job was added"), s
    assert s["states"] == ["failed", "done"] and s["frame_exact"]["v1.mkv"] and not s["frame_exact"]["v0.mkv"]
    assert s["final_run_exit"] == 1  # it ran a job that failed: the exit status says so
    assert s["left_in_out_dir"] == [] and s["integrity_check"] == "ok" and script.passed(s)
