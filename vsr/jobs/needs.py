"""What a job asks of the machine whose worker runs its chunks (a GPU, TensorRT), and whether this machine has it.

In a fleet that shares one store (or one broker) a worker leaves alone the jobs it cannot run: a CPU-only worker
that claimed a ``--backend cuda`` chunk would fail the job, which a GPU worker could have run.  :func:`job_need`
reads the need from the job's JSON as it is stored (not from an opened backend), so ``vsr jobs list`` and the
store's claims import nothing of torch; :class:`Machine` probes what this machine has, once, when a job first
asks for it (torch's import, seconds, only where a job needs a GPU).

What a backend needs, as :mod:`vsr.backends` opens it:

* the CUDA runtime (``CudaOptions``): a GPU torch sees (``device``, None: ``cuda``, GPU 0 or any) and a GPU
  kernel launcher, cupy or pycuda (:func:`vsr.backends.cuda.options.cuda_available`); TensorRT too where its
  segments are ``tensorrt`` (int8 is).  On ``cpu`` (the emulation) nothing;
* torch eager (``TorchOptions``): a GPU where its ``device`` names one; None runs on the CPU where there is none;
* ONNX Runtime (``OrtOptions``, ``SplitOptions``): nothing, but the execution providers an ``OrtOptions`` names.

A worker with a device (``vsr jobs run --devices``) runs a job of torch or the CUDA runtime on that device
(:meth:`vsr.backends.BackendRequest.on_device`): its need is the job's on that device.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import subprocess
import sys
import time
from dataclasses import dataclass

__all__ = ["QUEUES", "Machine", "Need", "Waiting", "job_need", "queue_name", "queue_of", "waiting_line",
           "worker_queues"]

log = logging.getLogger(__name__)
_ON_DEVICE = ("CudaOptions", "TorchOptions")  # the options a worker's device moves (BackendRequest.on_device)
_GPU_LAUNCHERS = ("cupy", "pycuda")


@dataclass(frozen=True)
class Need:
    """What a job needs beyond a CPU: ``backend`` (its ``--backend`` name, for the messages); ``gpu``: the index
    of the GPU its model runs on (None: it needs none); ``launchers``: GPU kernel launchers, any one of which
    will do; ``tensorrt``: the TensorRT package; ``providers``: ONNX Runtime execution providers, every one."""

    backend: str
    gpu: int | None = None
    launchers: tuple[str, ...] = ()
    tensorrt: bool = False
    providers: tuple[str, ...] = ()

    def text(self) -> str:
        """``a GPU (backend cuda)``: what a worker must have, as the messages say it."""
        parts = []
        if self.gpu is not None:
            parts.append("a GPU" if self.gpu == 0 else f"GPU cuda:{self.gpu}")
        if self.tensorrt:
            parts.append("TensorRT")
        if self.providers:
            parts.append("ONNX Runtime's " + ", ".join(self.providers))
        return f"{' and '.join(parts)} (backend {self.backend})"


def job_need(spec: str | dict, device: str | None = None) -> Need | None:
    """The need of a job (its spec: JSON text or data, :meth:`vsr.jobs.spec.JobSpec.to_dict`) on a worker of
    ``device`` (None: the job's own device); None where any machine runs it, and for data that is not a job's
    (running it fails it with its own message)."""
    try:
        data = json.loads(spec) if isinstance(spec, str) else spec
        options = data["backend"]["options"]
        kind = options["type"]
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(options, dict):
        return None
    where = device if device is not None and kind in _ON_DEVICE else options.get("device")
    if kind == "CudaOptions":
        gpu = _gpu_index(where or "cuda")
        tensorrt = options.get("segments") == "tensorrt" or options.get("precision") == "int8"
        if gpu is None and not tensorrt:
            return None  # the CPU emulation (TensorRT's engines have none)
        launcher = options.get("launcher")
        return Need("cuda", gpu or 0, (launcher,) if launcher in _GPU_LAUNCHERS else _GPU_LAUNCHERS, tensorrt)
    if kind == "TorchOptions":
        gpu = _gpu_index(where) if where else None
        return None if gpu is None else Need("torch", gpu)
    if kind == "OrtOptions":
        providers = tuple(p for p in options.get("providers") or () if p != "CPUExecutionProvider")
        return Need("ort", providers=providers) if providers else None
    return None


def _gpu_index(device) -> int | None:
    """The GPU index of a torch device name (``cuda`` and ``cuda:0``: 0); None for the CPU and other names."""
    if not isinstance(device, str) or device.split(":")[0] != "cuda":
        return None
    index = device.partition(":")[2]
    return int(index) if index.isdigit() else 0


class Machine:
    """What this machine runs, for a worker of ``device`` (``--devices``; None: the jobs' own): each part probed
    once, the first time a job asks for it.  ``forks``: this process forks the workers that use the GPU (a Celery
    worker's pool), so torch is asked in a process of its own: ``torch.cuda.is_available()`` initialises CUDA
    (unless NVML answers), and a forked child then cannot use it."""

    def __init__(self, device: str | None = None, forks: bool = False):
        self.device, self.forks = device, forks
        self._gpus: int | None = None
        self._providers: tuple[str, ...] | None = None
        self._jobs: dict = {}  # job id -> its need where this machine cannot run it, else None

    def probe(self) -> "Machine":
        """Probe everything now (a worker, before its first claim: torch's import must not happen inside the
        store's write lock)."""
        self.gpus()
        self.providers()
        return self

    def fits(self, job, spec) -> bool:
        """Whether this machine runs job ``job``; ``spec()`` gives its JSON, asked once per job (a job's spec
        never changes)."""
        return self.need_of(job, spec) is None

    def need_of(self, job, spec) -> Need | None:
        """:meth:`runs` of job ``job`` (``spec``: its JSON, or a function that gives it), asked once per job."""
        if job not in self._jobs:
            self._jobs[job] = self.runs(spec() if callable(spec) else spec)
        return self._jobs[job]

    def lacks(self, need: Need | None) -> str | None:
        """None where this machine runs a job of ``need``; else what it lacks, in words."""
        if need is None:
            return None
        if need.gpu is not None:
            gpus = self.gpus()
            if need.gpu >= gpus:
                return "torch sees no CUDA GPU here" if not gpus else f"torch sees {gpus} GPU{'s' * (gpus != 1)} here"
        if need.launchers and all(importlib.util.find_spec(m) is None for m in need.launchers):
            return f"no GPU kernel launcher ({' or '.join(need.launchers)}) here"
        if need.tensorrt and importlib.util.find_spec("tensorrt") is None:
            return "TensorRT (the tensorrt package) is not installed here"
        missing = [p for p in need.providers if p not in self.providers()]
        if missing:
            return f"ONNX Runtime has no {', '.join(missing)} here"
        return None

    def runs(self, spec: str | dict) -> Need | None:
        """None where this machine runs the job of ``spec``; else the job's need (what it waits for)."""
        need = job_need(spec, self.device)
        return None if self.lacks(need) is None else need

    def gpus(self) -> int:
        """How many CUDA GPUs torch sees (0 without torch)."""
        if self._gpus is None:
            self._gpus = 0
            if importlib.util.find_spec("torch") is None:
                return self._gpus
            if self.forks:
                self._gpus = _gpus_elsewhere()
                return self._gpus
            try:
                import torch

                self._gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
            except (ImportError, OSError, RuntimeError) as e:  # a torch whose CUDA libraries do not load
                log.warning("torch cannot tell its GPUs here (%s): this worker runs the jobs without one", e)
        return self._gpus

    def providers(self) -> tuple[str, ...]:
        if self._providers is None:
            self._providers = ()
            if importlib.util.find_spec("onnxruntime") is not None:
                import onnxruntime

                self._providers = tuple(onnxruntime.get_available_providers())
        return self._providers


# A Celery broker routes a job by its need: each need its own queue (vsr.jobs.distributed), and a worker consumes
# the queues whose jobs its machine runs.  A queue's need is the least of its jobs' (a GPU 0, any launcher).
QUEUES = {"gpu": Need("torch", 0), "cuda": Need("cuda", 0, _GPU_LAUNCHERS),
          "tensorrt": Need("cuda", 0, _GPU_LAUNCHERS, True)}


def queue_of(need: Need | None) -> str | None:
    """The name (of :data:`QUEUES`) of the queue of a job of ``need``; None: the queue every worker consumes.
    Execution providers are not routed (ONNX Runtime's whole graph names none unless a job file's JSON does)."""
    if need is None or need.gpu is None:
        return None
    return "tensorrt" if need.tensorrt else "cuda" if need.launchers else "gpu"


def queue_name(base: str, need: str | None) -> str:
    """The Celery queue of the jobs of a need (a name of :data:`QUEUES`; None: no need): ``vsr``, ``vsr.gpu``,
    ``vsr.cuda``, ``vsr.tensorrt`` for ``base`` vsr."""
    return base if need is None else f"{base}.{need}"


def worker_queues(base: str, machine: Machine) -> tuple[list[str], list[str]]:
    """The queues a Celery worker on ``machine`` consumes, and those it leaves to others, each with why."""
    queues, left = [base], []
    for name, need in QUEUES.items():
        lacks = machine.lacks(need)
        if lacks is None:
            queues.append(queue_name(base, name))
        else:
            left.append(f"queue {queue_name(base, name)} ({lacks})")
    return queues, left


def _gpus_elsewhere() -> int:
    """How many GPUs torch sees, asked in a child process (:class:`Machine`'s ``forks``); 0 where it cannot say."""
    code = "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)"
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
        return int(out.stdout.split()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        log.warning("torch could not be asked for its GPUs: this worker runs the jobs without one")
        return 0


def waiting_line(left: list[tuple[int | str, Need]], most: int = 10) -> str:
    """``job 3 waits for a worker with a GPU (backend cuda); jobs 4, 5 wait for ...``: the jobs left for other
    workers, grouped by need, at most ``most`` ids named per need."""
    groups: dict[str, list] = {}
    for job, need in left:
        groups.setdefault(need.text(), []).append(job)
    parts = []
    for text, jobs in groups.items():
        named = ", ".join(str(j) for j in jobs[:most]) + (f" and {len(jobs) - most} more" if len(jobs) > most else "")
        parts.append(f"job {named} waits for a worker with {text}" if len(jobs) == 1
                     else f"jobs {named} wait for a worker with {text}")
    return "; ".join(parts)


class Waiting:
    """What an idle worker (one that polls for new jobs) says of the jobs it leaves to other machines: a line
    where they change, looked at most every ``every_s`` seconds while it has nothing to claim; else it would
    wait in silence beside a queue of GPU jobs."""

    def __init__(self, machine: Machine, every_s: float = 60.0):
        self.machine, self.every_s = machine, every_s
        self._said: frozenset = frozenset()
        self._next = 0.0

    def line(self, store) -> str | None:
        """The line to say now (``store``: a :class:`~vsr.jobs.store.JobStore`), or None."""
        now = time.monotonic()
        if now < self._next:
            return None
        self._next = now + self.every_s
        left = [(job, need) for job, spec in store.unfinished()
                if (need := self.machine.need_of(job, spec)) is not None]
        said, self._said = self._said, frozenset(job for job, _ in left)
        return f"waiting for jobs this machine can run; {waiting_line(left)}" if left and self._said != said else None
