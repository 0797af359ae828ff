"""A listing's reader that leaves early (``vsr models | head -1``): vsr stops quietly, exit 0, whatever the
listing's length.  ``vsr models`` exited 141 while ``vsr report`` and ``vsr jobs list``, one write each that the
pipe's buffer took whole, exited 0: the status said how long the listing was, not whether it failed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from vsr.jobs.store import JobStore

REPO = Path(__file__).resolve().parents[2]
# what `vsr upscale --report` wrote before the timeline existed: enough for the tables
REPORT = {"settings": {"backend": "ort-split"}, "frames": 6, "wall_s": 2.0, "fps": 3.0, "bottleneck": "infer",
          "stages": [{"name": "infer", "items": 6, "busy_s": 1.9, "wait_in_s": 0.05, "wait_out_s": 0.0,
                      "unit": "frames", "throughput": 3.16}], "backend_steps_s": {"segment00": 0.5}}


@pytest.mark.parametrize("args", [["models"], ["models", "--json"], ["--help"], ["jobs", "--help"],
                                  ["report", "{report}"], ["report", "{report}", "--json"],
                                  ["jobs", "list", "--store", "{store}"],
                                  ["jobs", "list", "--store", "{store}", "--json"]])
def test_a_listing_whose_reader_left_ends_quietly_with_exit_0(tmp_path, args):
    report, store = tmp_path / "run.json", tmp_path / "q.db"
    report.write_text(json.dumps(REPORT))
    JobStore(store, create=True).close()
    argv = [a.format(report=report, store=store) for a in args]
    proc = subprocess.Popen([sys.executable, "-m", "vsr", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=REPO)
    proc.stdout.close()  # its reader gone before the first line: the first write meets the closed pipe
    err = proc.stderr.read().decode()
    assert proc.wait(120) == 0 and err == "", err
