"""The machine as this process may use it: its memory (a cgroup's limit where lower) and its cores (the affinity
mask, a cgroup's CPU quota, a worker's share), which vsr's defaults follow (the memory budget, every thread
count) rather than what the whole machine has."""

from __future__ import annotations

import math
import os
from pathlib import Path


def total_memory_mb() -> float | None:
    """The machine's memory in MB: Linux's MemTotal, or a cgroup's limit where it is lower (containers); else the
    physical pages; None where the system says neither."""
    found = []
    try:
        with open("/proc/meminfo") as f:
            found += [int(line.split()[1]) / 1024 for line in f if line.startswith("MemTotal:")]
    except (OSError, ValueError, IndexError):
        pass
    if not found:
        try:
            found.append(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / (1 << 20))
        except (OSError, ValueError, AttributeError):
            pass
    limit = _cgroup_limit_mb()
    if limit is not None:
        found.append(limit)
    return min(found) if found else None


_share: int | None = None  # this process's share of them (share_cores), when several workers split a machine


def share_cores(cores: int | None) -> None:
    """Let this process's threads default to ``cores`` (one of several worker processes that share a machine:
    each taking every core made N times as many threads as cores); None: all it may use."""
    global _share
    _share = None if cores is None else max(1, int(cores))


def usable_cores(cgroup: Path = Path("/sys/fs/cgroup")) -> int:
    """The cores this process may run on: those its affinity mask holds (``taskset``, a cpuset), fewer where its
    cgroup's CPU quota is lower (a container's ``--cpus 2`` on a machine of 64: the quota over the period, rounded
    up), or this process's share of them (:func:`share_cores`).  ``os.cpu_count()`` counts the machine's: 8 ONNX
    Runtime threads on 1 core ran the whole graph 2.7-4.7x slower than 1 (docs/benchmarks.md, "CPU model speed")."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    quota = _cgroup_cpu_quota(cgroup)
    cores = min(cores, math.ceil(quota)) if quota else cores
    return max(1, min(cores, _share) if _share else cores)


def fewer_cores() -> int | None:
    """:func:`usable_cores` where a CPU quota or this process's share makes them fewer than the affinity mask's
    count, which libraries' own defaults follow (FFmpeg's encoders, x264's 1.5 threads a core); else None."""
    mask = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    cores = usable_cores()
    return cores if cores < mask else None


def _cgroup_cpu_quota(root: Path) -> float | None:
    """This process's cgroup CPU quota in cores (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us`` over its period); None:
    none (``max``, -1) or no cgroup file to read."""
    reads = [("cpu.max",), ("cpu/cpu.cfs_quota_us", "cpu/cpu.cfs_period_us"),
             ("cpu,cpuacct/cpu.cfs_quota_us", "cpu,cpuacct/cpu.cfs_period_us")]
    for names in reads:
        try:
            fields = " ".join((root / n).read_text().strip() for n in names).split()
            quota, period = int(fields[0]), int(fields[1])
        except (OSError, ValueError, IndexError):
            continue  # missing, or v2's "max 100000"
        return quota / period if quota > 0 and period > 0 else None
    return None


def _cgroup_limit_mb() -> float | None:
    """This process's cgroup memory limit (v2 ``memory.max``, v1 ``memory.limit_in_bytes``); None: none."""
    for limit in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(limit) as f:
                cap = f.read().strip()
        except OSError:
            continue
        if cap.isdigit() and int(cap) < 1 << 60:  # "max", or v1's "no limit" (a number near 2**63)
            return int(cap) / (1 << 20)
    return None
