"""The machine as this process may use it: its memory (a cgroup's limit where lower) and its cores (the affinity
mask, a cgroup's CPU quota, a worker's share), which vsr's defaults follow (the memory budget, every thread
count) rather than what the whole machine has."""

from __future__ import annotations

import math
import os
from pathlib import Path, PurePosixPath

CGROUP = Path("/sys/fs/cgroup")  # where Linux mounts the cgroup file systems


def total_memory_mb() -> float | None:
    """The machine's memory in MB: Linux's MemTotal, or a cgroup's limit where it is lower (a container, a Slurm
    job, a systemd service: :func:`cgroup_folders`); else the physical pages; None where the system says neither."""
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


def usable_cores(cgroup: Path = CGROUP, own: str | None = None) -> int:
    """The cores this process may run on: those its affinity mask holds (``taskset``, a cpuset), fewer where its
    cgroup's CPU quota is lower (a container's ``--cpus 2`` on a machine of 64: the quota over the period, rounded
    up), or this process's share of them (:func:`share_cores`).  ``os.cpu_count()`` counts the machine's: 8 ONNX
    Runtime threads on 1 core ran the whole graph 2.7-4.7x slower than 1 (docs/benchmarks.md, "CPU model speed")."""
    cores = _mask()
    quota = _cgroup_cpu_quota(cgroup, own)
    cores = min(cores, math.ceil(quota)) if quota else cores
    return max(1, min(cores, _share) if _share else cores)


def _mask() -> int:
    """The cores this process's affinity mask holds (what libraries' own defaults follow)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def fewer_cores() -> int | None:
    """:func:`usable_cores` where a CPU quota or this process's share makes them fewer than the affinity mask's
    count, which libraries' own defaults follow (FFmpeg's encoders, x264's 1.5 threads a core); else None."""
    mask = _mask()
    cores = usable_cores()
    return cores if cores < mask else None


def cgroup_folders(controller: str, root: Path = CGROUP, own: str | None = None) -> list[Path]:
    """The cgroup folders whose limits bound this process for ``controller`` (``memory``, ``cpu``): its own cgroup
    and each above it, as /proc/self/cgroup (or ``own``) names them -- v2's ``0::PATH`` under ``root``, v1's
    ``N:CONTROLLERS:PATH`` under ``root/CONTROLLERS`` -- where they are there (a container's mount starts at its
    own cgroup), then ``root``'s own.  A systemd service's ``MemoryMax``, a Slurm job's or a container's
    limits: each is set on a folder of its own, not at the mount's root, the only one read before."""
    if own is None:
        try:
            own = Path("/proc/self/cgroup").read_text()
        except OSError:
            own = ""
    found: list[Path] = []
    for line in own.splitlines():
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        hierarchy, names, path = fields
        if names == "" and hierarchy == "0":
            bases = [root]
        elif controller in names.split(","):
            bases = [root / names, root / controller]
        else:
            continue
        rel = PurePosixPath(path.strip().lstrip("/"))
        found += [base / p for base in bases for p in (rel, *rel.parents) if (base / p).is_dir()]
    found += [d for d in (root, root / controller) if d.is_dir()]
    return list(dict.fromkeys(found))


def _cgroup_cpu_quota(root: Path = CGROUP, own: str | None = None) -> float | None:
    """This process's cgroup CPU quota in cores, the lowest of its cgroup's and those above it (v2 ``cpu.max``, v1
    ``cpu.cfs_quota_us`` over its period); None: none (``max``, -1) or no cgroup file to read."""
    quotas = []
    for folder in cgroup_folders("cpu", root, own):
        for names in (("cpu.max",), ("cpu.cfs_quota_us", "cpu.cfs_period_us")):
            try:
                fields = " ".join((folder / n).read_text().strip() for n in names).split()
                quota, period = int(fields[0]), int(fields[1])
            except (OSError, ValueError, IndexError):
                continue  # missing, or v2's "max 100000"
            if quota > 0 and period > 0:
                quotas.append(quota / period)
    return min(quotas, default=None)


def _cgroup_limit_mb(root: Path = CGROUP, own: str | None = None) -> float | None:
    """This process's cgroup memory limit, the lowest of its cgroup's and those above it (v2 ``memory.max``, v1
    ``memory.limit_in_bytes``); None: none."""
    caps = []
    for folder in cgroup_folders("memory", root, own):
        for name in ("memory.max", "memory.limit_in_bytes"):
            try:
                cap = (folder / name).read_text().strip()
            except OSError:
                continue
            if cap.isdigit() and int(cap) < 1 << 60:  # "max", or v1's "no limit" (a number near 2**63)
                caps.append(int(cap) / (1 << 20))
    return min(caps, default=None)
