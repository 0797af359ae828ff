"""An encoder's own banner (SVT-AV1's ~20 lines, its thread-priority warning) under `vsr jobs run` only with
`vsr -v jobs run`, decided by the worker when it runs: not stored in the job, so `vsr -v jobs add` and
`vsr jobs add` make the same job (the same key, so the same chunks)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from vsr.jobs.spec import JobSpec
from vsr.jobs.store import JobStore

TINY = ["--weights", "random", "--config", "edvr-tiny", "--backend", "torch", "--threads", "1"]
REPO = Path(__file__).resolve().parents[2]


def vsr(*args) -> subprocess.CompletedProcess:
    """``python -m vsr ARGS`` in a real process, SVT_LOG unset (as on a newcomer's machine)."""
    env = {k: v for k, v in os.environ.items() if k != "SVT_LOG"}
    return subprocess.run([sys.executable, "-m", "vsr", *map(str, args)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)


def job_key(store: Path) -> str:
    with JobStore(store, write=False) as s:
        return JobSpec.from_json(s.spec_json(s.jobs()[0].id)).key


def test_verbose_add_makes_the_same_job(make_clip, tmp_path):
    src = make_clip("a.mp4", frames=3)
    keys = []
    for verbose, name in (([], "q1.db"), (["-v"], "q2.db")):
        res = vsr(*verbose, "jobs", "add", src, "--out-dir", tmp_path / "out", "--ext", "webm",
                  "--store", tmp_path / name, *TINY)
        assert res.returncode == 0, res.stderr
        keys.append(job_key(tmp_path / name))
    assert keys[0] == keys[1]


def test_a_webm_job_prints_svt_av1_s_banner_only_under_verbose_run(make_clip, tmp_path):
    src = make_clip("a.mp4", frames=3)
    for verbose in ([], ["-v"]):
        store, out = tmp_path / f"q{len(verbose)}.db", tmp_path / f"out{len(verbose)}"
        # added under -v, run without it, and the other way round: the run decides
        add = vsr(*(["-v"] if not verbose else []), "jobs", "add", src, "--out-dir", out, "--ext", "webm",
                  "--store", store, *TINY)
        assert add.returncode == 0, add.stderr
        run = vsr(*verbose, "jobs", "run", "--until-empty", "--store", store)
        assert run.returncode == 0, run.stderr
        assert (out / "a.webm").is_file()
        assert ("Svt[info]" in run.stderr) == bool(verbose), run.stderr
        assert ("thread priority" in run.stderr) <= bool(verbose)
