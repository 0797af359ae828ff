"""ONNX Runtime backend running the whole exported graph (one session per shape bucket)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from vsr.backends.base import ModelBackend, announce
from vsr.backends.buckets import BucketPolicy
from vsr.backends.registry import BackendKind, needs, register
from vsr.errors import BackendError


@dataclass(frozen=True)
class OrtOptions:
    """The whole exported graph in one ONNX Runtime session per bucket.

    threads: intra-op threads (default: all cores); providers: explicit list or the best available (TensorRT EP,
    CUDA EP, CPU EP); io_binding: bind inputs/outputs to preallocated buffers (saves a copy per run).
    """

    threads: int | None = None
    providers: tuple[str, ...] | None = None
    io_binding: bool = True
    buckets: BucketPolicy | None = None


PROVIDER_ORDER = ("TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider")


def best_providers(requested: tuple[str, ...] | None = None) -> list[str]:
    import onnxruntime as ort

    avail = ort.get_available_providers()
    if requested:
        missing = [p for p in requested if p not in avail]
        if missing:
            raise BackendError(f"ONNX Runtime providers not available here: {', '.join(missing)} "
                               f"(available: {', '.join(avail)})")
        return list(requested)
    return [p for p in PROVIDER_ORDER if p in avail]


def make_session(path, options: OrtOptions = OrtOptions()):
    """An ``InferenceSession`` with explicit threading and full graph optimisation."""
    from vsr.plan.segments import open_session, session_options

    return open_session(path, session_options(options.threads), best_providers(options.providers))


class OrtBackend(ModelBackend):
    """Whole-graph EDVR on ONNX Runtime.  ``infer((N,T,3,H,W) float32) -> (N,3,4H,4W) float32``."""

    name = "ort"
    scale = 4

    def __init__(self, model, config, options: OrtOptions = OrtOptions(), weights_sha: str | None = None):
        from vsr.export.onnx import state_checksum

        super().__init__(config, options.buckets)
        self.model = model
        self.options = options
        self._sha = weights_sha or state_checksum(model)
        self._sessions: dict[tuple[int, int], object] = {}
        self._out_buffers: dict[tuple, np.ndarray] = {}
        self._times = {"export": 0.0, "session": 0.0, "warmup": 0.0, "run": 0.0}
        self._warm: set[tuple[int, int, int]] = set()

    def session(self, hb: int, wb: int, phase: Callable[[str], None] | None = None):
        """The session of bucket ``hb x wb`` (exported and built on first use, each step announced to ``phase``)."""
        s = self._sessions.get((hb, wb))
        if s is None:
            from vsr.export.cache import announcing, cached_export

            t0 = time.perf_counter()
            with announcing(lambda: announce(phase, "exporting ONNX")):  # said only where it exports: not cached
                path = cached_export(self.model, self.config, hb, wb, self._sha)
            t1 = time.perf_counter()
            announce(phase, "loading sessions")
            s = make_session(path, self.options)
            self._times["export"] += t1 - t0
            self._times["session"] += time.perf_counter() - t1
            self._sessions[(hb, wb)] = s
        return s

    def prepare(self, height: int, width: int, batch: int, phase: Callable[[str], None] | None = None,
                planes=None) -> None:
        """Session and output buffer of the bucket, then one warm-up run on zeros (a session's first run is
        slower: its allocations), timed as ``warmup`` rather than ``run``."""
        hb, wb = self.buckets.bucket(height, width)
        if (batch, hb, wb) in self._warm:
            return
        self.session(hb, wb, phase)
        announce(phase, "warming up")
        run_s = self._times["run"]
        t0 = time.perf_counter()
        self.infer(np.zeros((batch, self.num_frame, 3, hb, wb), np.float32))
        self._times["run"] = run_s
        self._times["warmup"] += time.perf_counter() - t0
        self._warm.add((batch, hb, wb))

    def _out_buffer(self, n: int, hb: int, wb: int) -> np.ndarray:
        out = self._out_buffers.get((n, hb, wb))
        if out is None:
            out = self._out_buffers[(n, hb, wb)] = np.empty((n, 3, 4 * hb, 4 * wb), np.float32)
        return out

    def infer(self, x: np.ndarray) -> np.ndarray:
        x = self.check_input(x)
        n, _, _, h, w = x.shape
        xp, (hb, wb) = self.buckets.pad(x)
        sess = self.session(hb, wb)
        t0 = time.perf_counter()
        if self.options.io_binding:
            out = self._out_buffer(n, hb, wb)
            io = sess.io_binding()
            io.bind_cpu_input("lr", xp)
            io.bind_output("hr", "cpu", 0, np.float32, out.shape, out.ctypes.data)
            sess.run_with_iobinding(io)
        else:
            out = sess.run(["hr"], {"lr": xp})[0]
        self._times["run"] += time.perf_counter() - t0
        return out[:, :, : 4 * h, : 4 * w].copy()


def _make(threads: int | None = None, **_others) -> OrtOptions:
    return OrtOptions(threads=threads)


register(BackendKind("ort-whole", "ort", "whole", OrtOptions, OrtBackend, _make, available=needs("onnxruntime"),
                     auto=2, default=False))
