"""A real full disk and a real read-only file system, each in a private mount namespace (``unshare -m``; as a
normal user ``unshare -rm``): a job whose output's disk is full waits (state ``waiting``, saying why) and
finishes once there is room, instead of failing for good; a store on a read-only file system can be listed."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from vsr.jobs.store import JobStore

REPO = Path(__file__).resolve().parents[2]
TINY = ["--weights", "random", "--config", "edvr-tiny", "--backend", "torch", "--codec", "ffv1", "--threads", "1"]


def namespace() -> list[str] | None:
    """The unshare command that gives this process a mount namespace it may mount in, or None."""
    if shutil.which("unshare") is None:
        return None
    for cmd in (["unshare", "-m"], ["unshare", "-rm"]):
        if subprocess.run([*cmd, "true"], capture_output=True).returncode == 0:
            return cmd
    return None


pytestmark = pytest.mark.skipif(namespace() is None, reason="no mount namespace here (unshare -m / -rm)")

FULL_DISK = """
import json, os, subprocess, sys, threading, time
from pathlib import Path
from vsr.cli import main
from vsr.jobs.store import JobStore
from vsr.jobs.worker import WorkerSettings, work

clip, out, store = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "vsr-test", str(out)], check=True)
assert main(["jobs", "add", str(clip), "--out-dir", str(out), "--ext", "mkv", "--store", str(store),
             *sys.argv[4:]]) == 0
filler = out / "filler"
fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
try:  # every byte the disk has
    while True:
        os.write(fd, bytes(4096))
except OSError:
    pass
os.close(fd)
os.truncate(filler, os.path.getsize(filler) - 8192)  # room for the chunk folder's marker, not for a chunk
done = threading.Event()
worker = threading.Thread(target=lambda: (work(store, WorkerSettings(poll_s=0.05, until_empty=True, quiet=True,
                                                                      disk_wait_s=0.5)), done.set()))
worker.start()
seen, log = None, []
deadline = time.monotonic() + 120
while time.monotonic() < deadline and seen is None:
    with JobStore(store) as s:
        row = s.job(1)
    if row.state == "waiting":
        seen = row.to_dict()
        log = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    time.sleep(0.05)
filler.unlink()  # room again
worker.join(300)
with JobStore(store) as s:
    final = s.job(1).to_dict()
print(json.dumps({"waiting": seen, "final": final, "outputs": sorted(os.listdir(out)), "log": log}))
"""


def test_a_full_disk_makes_the_job_wait_not_fail(make_clip, tmp_path):
    clip = make_clip("a.mp4", width=24, height=16, frames=4)
    out = tmp_path / "out"
    out.mkdir()
    script = tmp_path / "full_disk.py"
    script.write_text(textwrap.dedent(FULL_DISK))
    res = subprocess.run([*namespace(), sys.executable, script, clip, out, tmp_path / "q.db", *TINY],
                         capture_output=True, text=True, timeout=600, cwd=REPO)
    assert res.returncode == 0, res.stderr
    result = json.loads(res.stdout.splitlines()[-1])
    waiting = result["waiting"]
    assert waiting is not None, result
    assert waiting["state"] == "waiting" and waiting["error"].startswith("no space left on the output's disk")
    assert "the job waits and is tried again every 0.5 s" in waiting["error"]
    assert result["final"]["state"] == "done" and result["final"]["error"] is None
    assert result["outputs"] == ["a.mkv"]  # and no chunk folder, no partial file left
    assert "No space left on device" in waiting["error"] and any(p.endswith("/.vsr-job") for p in result["log"])
    # the file it could not write, named where the user finds it (not through the worker's open folder)
    assert f"cannot write {out}/.vsr-chunks/" in waiting["error"] and "/proc/self/fd" not in waiting["error"]


def test_a_store_on_a_read_only_file_system_can_be_listed(make_clip, tmp_path, capsys):
    from vsr.cli import main

    clip = make_clip("a.mp4", frames=3)
    folder = tmp_path / "stores"
    folder.mkdir()
    assert main(["jobs", "add", str(clip), "--out-dir", str(tmp_path / "out"), "--store", str(folder / "q.db"),
                 *TINY]) == 0
    with JobStore(folder / "q.db") as s:
        assert s.job(1).state == "queued"
    read_only = f"mount --bind {folder} {folder} && mount -o remount,ro,bind {folder} && "
    res = subprocess.run([*namespace(), "sh", "-c", read_only + f"{sys.executable} -m vsr jobs list --json "
                          f"--store {folder / 'q.db'}; touch {folder}/x 2>/dev/null || echo read-only >&2"],
                         capture_output=True, text=True, timeout=120, cwd=REPO)
    assert res.returncode == 0 and res.stderr.strip() == "read-only", res.stderr
    assert [(r["id"], r["state"], r["input"]) for r in json.loads(res.stdout)] == [(1, "queued", str(clip))]
    res = subprocess.run([*namespace(), "sh", "-c", read_only + f"{sys.executable} -m vsr jobs cancel 1 "
                          f"--store {folder / 'q.db'}"], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert res.returncode == 2 and len(res.stderr.splitlines()) == 1 and "cannot be written here" in res.stderr
