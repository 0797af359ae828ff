"""This machine's record of the jobs it sent to a Celery broker (``vsr jobs add --broker``,
:mod:`vsr.jobs.distributed`).

A Redis that keeps nothing on disk (no append-only file; or snapshots only, for what came after the last one)
forgets every job when it restarts: its record, its queued chunks, its owner of an output.  The machine that
added a job keeps what it sent, one file per job in ``$XDG_DATA_HOME/vsr/broker-jobs/<id>.json`` (a folder of
this user's, mode 0700; each file created by vsr, never through a planted link, then renamed into place): the
broker (its URL with the password masked), the job's spec and chunks, when it was sent, and its output as it was
then.  ``vsr jobs list --broker`` on that machine, naming the broker any way that names the same Redis database
(:func:`vsr.jobs.records.broker_key`), shows a job the broker no longer knows as ``lost``, and
``vsr jobs retry --broker ID`` sends it again under its id (its committed chunks are kept: they are files beside
the output).  A file goes once the job is seen done, or its output was written after it was sent (a join the
broker forgot), or the job is cancelled while lost.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

from vsr.errors import BrokerError
from vsr.files import create_new, private_folder, user_data_dir
from vsr.jobs.records import broker_key, safe_url
from vsr.leftovers import PARTIAL, remove_old_partials_of, remove_partials_of

FOLDER = "broker-jobs"
_ID = re.compile(r"[0-9a-f]{32}")  # the ids submit gives (uuid4 hex): nothing else names a file here


def folder() -> Path:
    return user_data_dir() / FOLDER


def keep(broker: str, job_id: str, spec_json: str, chunks: list[dict], output: str) -> None:
    """Record a job sent to ``broker`` (before its chunks are sent: a crash then leaves a job to retry)."""
    data = {"broker": safe_url(broker), "id": job_id, "spec": spec_json, "chunks": chunks,
            "submitted": time.time(), "output_before": _stat(output)}
    try:
        where = private_folder(folder(), "the record of the jobs sent to a broker")
        remove_partials_of(where, _ID.pattern + r"\.json")  # (what runs killed outright left, of any job)
        remove_old_partials_of(where, _ID.pattern, ".tmp")  # (and older vsr's: .ID.PID.tmp)
        tmp = where / f".{job_id}.json{PARTIAL}{os.getpid()}"
        fd = create_new(tmp, 0o600)
        try:
            with open(fd, "wb", closefd=False) as f:
                f.write(json.dumps(data).encode())
            os.fsync(fd)  # a record that a power cut empties would lose the job it is there to keep
        finally:
            os.close(fd)
        os.replace(tmp, where / f"{job_id}.json")
    except OSError as err:  # (nothing is sent: the job would have no record but the broker's)
        raise BrokerError(f"cannot keep this machine's record of the jobs sent to the broker in {folder()}: "
                          f"{err.strerror or err}") from None


def drop(job_id: str) -> None:
    if _ID.fullmatch(job_id):
        (folder() / f"{job_id}.json").unlink(missing_ok=True)


def entries(broker: str) -> list[dict]:
    """The jobs this machine sent to ``broker`` and still keeps, oldest first (a file vsr cannot read is
    skipped)."""
    found = []
    try:
        names = sorted(p.name for p in folder().iterdir() if _ID.fullmatch(p.stem) and p.suffix == ".json")
    except (FileNotFoundError, NotADirectoryError):
        return []
    for name in names:
        entry = _read(folder() / name)
        if entry is not None and _same(entry, broker):
            found.append(entry)
    return sorted(found, key=lambda e: e["submitted"])


def find(broker: str, job_id: str) -> dict | None:
    """The record of ``job_id`` sent to ``broker``, or None."""
    if not _ID.fullmatch(job_id):
        return None
    entry = _read(folder() / f"{job_id}.json")
    return entry if entry is not None and _same(entry, broker) else None


def _same(entry: dict, broker: str) -> bool:
    """Whether ``entry`` was sent to ``broker``, however either names it (:func:`broker_key`: its URL with the
    password masked names the same database)."""
    return isinstance(entry.get("broker"), str) and broker_key(entry["broker"]) == broker_key(broker)


def joined(entry: dict) -> bool:
    """Whether the job's output was written after the job was sent (by its join: the job is done)."""
    now = _stat(output_of(entry))
    return now is not None and now != entry.get("output_before")


def output_of(entry: dict) -> str:
    """The output path of an entry's job (its spec read as JSON only: a file of this machine's own)."""
    return str(json.loads(entry["spec"])["output"])


def _read(path: Path) -> dict | None:
    try:
        with open(path, "rb", opener=lambda p, flags: os.open(p, flags | os.O_NOFOLLOW)) as f:
            entry = json.loads(f.read(1 << 24))
        output_of(entry)
        if isinstance(entry.get("id"), str) and isinstance(entry.get("chunks"), list):
            entry["submitted"] = float(entry["submitted"])
            return entry
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def _stat(path: str) -> list[int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_ino, st.st_size, st.st_mtime_ns]
