"""What the ``vsr jobs`` commands share: ``--broker`` and job ids as given, and the Celery module (:mod:`vsr.cli.jobs`,
:mod:`vsr.cli.jobs_show`)."""

from __future__ import annotations

import os

from vsr.errors import InputError

BROKER_ENV = "VSR_BROKER"
MAX_JOB_ID = 2**63 - 1  # SQLite's integers


def distributed():
    """:mod:`vsr.jobs.distributed` (Celery), imported only for ``--broker``."""
    try:
        from vsr.jobs import distributed as module
    except ModuleNotFoundError as e:
        raise InputError(f"--broker needs the distributed queue (celery[redis]): {e}") from None
    return module


def broker(args) -> str | None:
    """``--broker``, else ``$VSR_BROKER`` unless ``--store`` is given (the URL holds the broker's password: in
    the environment no other user sees it, as ``ps`` shows them a command line); None: the local store.  An
    empty ``--broker`` is an error (it never means the local store); an empty ``$VSR_BROKER`` is no broker."""
    if args.broker is None:
        env = os.environ.get(BROKER_ENV, "").strip()
        return env if env and getattr(args, "store", None) is None else None
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
