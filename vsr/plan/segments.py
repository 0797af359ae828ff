"""Segment backends: what runs the ONNX segments of a plan.

A segment backend loads a segment model once (``load(path) -> SegmentRunner``); a runner is bound to fixed,
preallocated input and output buffers (``bind(inputs, outputs) -> run``) and then runs many times without
allocating.  ONNX Runtime sessions implement it now (IO binding to the arena's buffers); a TensorRT engine fits
the same shape: build/deserialise in ``load``, ``set_tensor_address`` in ``bind``, ``execute_async_v3`` in run.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

import numpy as np

from vsr.errors import BackendError
from vsr.machine import usable_cores

log = logging.getLogger(__name__)


class SegmentRunner(Protocol):
    def bind(self, inputs: dict[str, np.ndarray], outputs: dict[str, np.ndarray]) -> Callable[[], None]: ...


class SegmentBackend(Protocol):
    name: str  # e.g. "onnxruntime"; with ``version``, part of a plan's cache key
    version: str
    precision: str
    device: str  # bridge kernels are looked up for this device

    def load(self, path: Path) -> SegmentRunner: ...


@dataclass(frozen=True)
class OrtSegmentBackend:
    """ONNX Runtime CPU sessions, one per segment.

    threads: intra-op threads (default: the cores this process may use).  spin: let ORT's idle worker threads
    busy-wait for the next op (ORT's default).  Off here: between segments a bridge kernel runs on the same
    cores, and spinning threads of the session that just finished would take CPU time from it.  mem_pattern:
    ORT's memory pattern (see ``session_options``).
    """

    threads: int | None = None
    spin: bool = False
    mem_pattern: bool = False
    providers: tuple[str, ...] = ("CPUExecutionProvider",)
    name: str = "onnxruntime"
    precision: str = "fp32"
    device: str = "cpu"

    @property
    def version(self) -> str:
        import onnxruntime as ort

        return ort.__version__

    def load(self, path: Path) -> "OrtSegmentRunner":
        so = session_options(self.threads, spin=self.spin, shared_arena=_shared_cpu_arena(),
                             mem_pattern=self.mem_pattern)
        return OrtSegmentRunner(open_session(path, so, list(self.providers)))


def session_options(threads: int | None = None, spin: bool | None = None, shared_arena: bool = False,
                    mem_pattern: bool = True):
    """The ``SessionOptions`` of every ONNX Runtime session vsr opens.

    threads: intra-op threads (default: the cores this process may use), with one inter-op thread and sequential
    execution (vsr's graphs are chains); full graph optimisation.  spin: whether idle workers busy-wait for the next op
    (None: ONNX Runtime's default).  shared_arena: allocate from the environment's CPU arena (see
    ``_shared_cpu_arena``).  mem_pattern: ORT's memory pattern (its default): after the first run it allocates the
    recorded pattern as one block per run.  The split plan's segment sessions turn it off (``OrtSegmentBackend``): with
    the shared arena that block lands beside the arena the first run grew, doubling the model's memory (EDVR-S at
    240x256 LR: 2310 MiB on, 1319 MiB off).  Speed is the same within the noise of the shared 2-core machine
    (scripts/bench_mem_pattern.py, 7 paired runs: median pair ratio on/off 0.99 at 180x320 and 240x256, i.e. off 1 %
    slower; two earlier runs gave 0.85-1.00).
    """
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads or usable_cores()
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if spin is not None:
        so.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
    if shared_arena:
        so.add_session_config_entry("session.use_env_allocators", "1")
    so.enable_mem_pattern = mem_pattern
    return so


def open_session(path: Path, options, providers: list[str]):
    """An ``InferenceSession`` of the model at ``path``; a BackendError (one line) when ONNX Runtime refuses it."""
    import onnxruntime as ort

    try:
        sess = ort.InferenceSession(str(path), sess_options=options, providers=providers)
    except Exception as e:  # ORT raises its own exception types
        raise BackendError(f"ONNX Runtime could not load {path}: {str(e).splitlines()[0][:200]}") from None
    log.info("ORT session %s on %s", path, sess.get_providers())
    return sess


_SHARED_ARENA: list[bool] = []


def _shared_cpu_arena() -> bool:
    """Register one CPU arena with ONNX Runtime's environment, once per process, for all segment sessions.

    Each session otherwise grows its own arena to its own peak and keeps it: the segments of a plan run one
    after another, yet their arenas add up (EDVR-S: ~105 KB per LR pixel of a tile, against ~55 KB for the
    whole graph in one session).  With one shared arena they reuse the same memory.
    """
    if not _SHARED_ARENA:
        import onnxruntime as ort

        try:
            info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
            ort.create_and_register_allocator(info, ort.OrtArenaCfg(0, -1, -1, -1))
            _SHARED_ARENA.append(True)
        except Exception as e:  # an older ORT without the API: each session keeps its own arena
            log.info("no shared ONNX Runtime arena: %s", e)
            _SHARED_ARENA.append(False)
    return _SHARED_ARENA[0]


class OrtSegmentRunner:
    def __init__(self, session):
        self.session = session

    def bind(self, inputs: dict[str, np.ndarray], outputs: dict[str, np.ndarray]) -> Callable[[], None]:
        io = self.session.io_binding()
        for name, arr in inputs.items():
            io.bind_input(name, "cpu", 0, arr.dtype.type, list(arr.shape), arr.ctypes.data)
        for name, arr in outputs.items():
            io.bind_output(name, "cpu", 0, arr.dtype.type, list(arr.shape), arr.ctypes.data)
        sess = self.session

        def run() -> None:
            sess.run_with_iobinding(io)

        return run
