"""A small output (``vsr upscale --report``) on standard output redirected into a file whose disk fills: the
error is said, never a report cut short and exit 0.  The full disk is a real file-size limit (``RLIMIT_FSIZE``:
writes past it fail with EFBIG, as on a full disk with ENOSPC), which needs no mount."""

from __future__ import annotations

import json
import subprocess
import sys

LIMIT = 20000  # bytes standard output's file may hold: less than the report


def test_a_report_on_standard_output_cut_short_by_a_full_disk_is_an_error(tmp_path):
    script = ("import resource, signal, sys\n"
              "from vsr.errors import OutputError\n"
              "from vsr.outfiles import write_file_output\n"
              "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # (else the limit kills the process)\n"
              f"resource.setrlimit(resource.RLIMIT_FSIZE, ({LIMIT}, {LIMIT}))\n"
              "try:\n"
              "    write_file_output(None, sys.argv[1])\n"
              "except OutputError as e:\n"
              "    sys.exit(f'OutputError: {e}')\n")
    report = json.dumps({"frames": list(range(20000))})
    out = tmp_path / "report.json"
    with open(out, "wb") as f:
        done = subprocess.run([sys.executable, "-c", script, report], stdout=f, stderr=subprocess.PIPE, text=True)
    assert out.stat().st_size == LIMIT  # (the part that fitted)
    assert done.returncode == 1, "a report cut short by the full disk was taken as written"
    assert done.stderr == "OutputError: cannot write standard output: File too large\n"
