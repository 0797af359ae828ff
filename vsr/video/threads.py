"""No thread of vsr's process at a real-time priority.

SVT-AV1 (``.webm``'s encoder) starts its ~70 worker threads under SCHED_FIFO at priority 99 when the process may
(as root), with no option to say otherwise: a busy encoder then starves every other program on the machine, and a
``vsr preview`` estimate timed beside such a run comes out several times too low.  :func:`normal_policy` puts
every thread of the process that runs under a real-time policy back to the normal one (SCHED_OTHER), once its
encoder has started them.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)

REAL_TIME = tuple(getattr(os, name) for name in ("SCHED_FIFO", "SCHED_RR") if hasattr(os, name))


def thread_policies() -> dict[int, int]:
    """``{thread id: scheduling policy}`` of this process's threads (Linux; {} elsewhere)."""
    out = {}
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return out
    for tid in tids:
        try:
            out[tid] = os.sched_getscheduler(tid)
        except OSError:  # the thread ended meanwhile
            continue
    return out


def normal_policy() -> int:
    """Every real-time thread of this process back to SCHED_OTHER (nice 0); returns how many were changed."""
    if not REAL_TIME or not hasattr(os, "sched_setscheduler"):
        return 0
    changed = 0
    for tid, policy in thread_policies().items():
        if policy in REAL_TIME:
            try:
                os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
                changed += 1
            except OSError:  # ended meanwhile, or not ours to change
                continue
    if changed:
        log.info("%d encoder threads ran at a real-time priority: put back to the normal policy", changed)
    return changed
