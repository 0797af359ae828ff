"""What the ``vsr jobs`` commands share: ``--broker`` and job ids as given, and the Celery module (:mod:`vsr.cli.jobs`,
:mod:`vsr.cli.jobs_show`)."""

from __future__ import annotations

from vsr.errors import InputError

MAX_JOB_ID = 2**63 - 1  # SQLite's integers


def distributed():
    """:mod:`vsr.jobs.distributed` (Celery), imported only for ``--broker``."""
    try:
        from vsr.jobs import distributed as module
    except ModuleNotFoundError as e:
        raise InputError(f"--broker needs the distributed queue (celery[redis]): {e}") from None
    return module


def broker(args) -> str | None:
    """``--broker``: None when not given; an empty one is an error (it never means the local store)."""
    if args.broker is None:
        return None
    if not args.broker.strip():
        raise InputError("--broker is empty: give the broker's URL (redis://HOST:PORT/N), or leave --broker out "
                         "for the local job store")
    return args.broker


def job_id(text: str) -> int:
    try:
        job = int(text)
    except ValueError:
        raise InputError(f"a job id is a number (see vsr jobs list), not {text!r}") from None
    if not 1 <= job <= MAX_JOB_ID:
        raise InputError(f"no job {text}: job ids run from 1 (see vsr jobs list)")
    return job
