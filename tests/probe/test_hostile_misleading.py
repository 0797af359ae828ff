"""Issue 37's hostile run, its misleading classes (item 6): what vsr says, and its exit status, name the real
cause."""

from __future__ import annotations

import pytest

from vsr.jobs.store import JobStore
from tests.jobs.test_worker import queue, spec_for
from tests.probe.cli_io import ProbeRunner


@pytest.fixture(scope="module")
def vsr_cli():
    return ProbeRunner()


def test_jobs_run_until_empty_exits_non_zero_when_a_job_it_ran_failed(vsr_cli, make_clip, tmp_path):
    """Every job failed, exit 0: a script (or CI) read the run as a success."""
    a, b = make_clip("a.mp4", frames=3, seed=1), make_clip("b.mp4", frames=3, seed=2)
    with JobStore(tmp_path / "q.db", create=True) as store:
        queue(store, spec_for(a, tmp_path / "a.mkv"), spec_for(b, tmp_path / "b.mkv"))
    a.unlink()
    ran = vsr_cli.run(["jobs", "run", "--until-empty", "--store", tmp_path / "q.db"], tmp_path / "ran")
    assert ran.rc == 1 and "Traceback" not in ran.err, ran.err
    assert any("job 1 failed" in ln for ln in ran.lines) and (tmp_path / "b.mkv").is_file()
    with JobStore(tmp_path / "q.db") as store:
        assert [r.state for r in store.jobs()] == ["failed", "done"]
    again = vsr_cli.run(["jobs", "run", "--until-empty", "--store", tmp_path / "q.db"], tmp_path / "again")
    assert again.rc == 0, again.err  # nothing run now: the earlier failure is not this run's
