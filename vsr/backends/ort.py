"""ONNX Runtime backend running the whole exported graph (one session per shape bucket)."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass

import numpy as np

from vsr.backends.base import ModelBackend
from vsr.backends.buckets import pad_to_bucket
from vsr.errors import BackendError

log = logging.getLogger(__name__)

PROVIDER_ORDER = ("TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider")


@dataclass(frozen=True)
class OrtOptions:
    """Knobs of the ONNX Runtime backend.

    threads: intra-op threads (default: all cores); providers: explicit list or best available in
    ``PROVIDER_ORDER``; io_binding: bind inputs/outputs to preallocated buffers (saves a copy per run).
    """

    threads: int | None = None
    providers: tuple[str, ...] | None = None
    io_binding: bool = True


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
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = options.threads or os.cpu_count() or 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    providers = best_providers(options.providers)
    try:
        sess = ort.InferenceSession(str(path), sess_options=so, providers=providers)
    except Exception as e:  # ORT raises its own exception types
        raise BackendError(f"ONNX Runtime could not load {path}: {str(e).splitlines()[0][:200]}") from None
    log.info("ORT session %s on %s", path, sess.get_providers())
    return sess


class OrtBackend(ModelBackend):
    """Whole-graph EDVR on ONNX Runtime.  ``infer((N,T,3,H,W) float32) -> (N,3,4H,4W) float32``."""

    name = "ort"
    scale = 4

    def __init__(self, model, config, options: OrtOptions = OrtOptions(), weights_sha: str | None = None,
                 align: int = 4):
        from vsr.export.onnx import state_checksum

        super().__init__(config)
        self.model = model
        self.options = options
        self.align = align
        self._sha = weights_sha or state_checksum(model)
        self._sessions: dict[tuple[int, int], object] = {}
        self._out_buffers: dict[tuple, np.ndarray] = {}
        self._times = {"export": 0.0, "session": 0.0, "run": 0.0}

    def session(self, hb: int, wb: int):
        """The session of bucket ``hb x wb`` (exported and built on first use)."""
        s = self._sessions.get((hb, wb))
        if s is None:
            from vsr.export.cache import cached_export

            t0 = time.perf_counter()
            path = cached_export(self.model, self.config, hb, wb, self._sha)
            t1 = time.perf_counter()
            s = make_session(path, self.options)
            self._times["export"] += t1 - t0
            self._times["session"] += time.perf_counter() - t1
            self._sessions[(hb, wb)] = s
        return s

    def infer(self, x: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=np.float32)
        n, t, c, h, w = x.shape
        if t != self.num_frame or c != 3:
            raise ValueError(f"expected (N, {self.num_frame}, 3, H, W), got {x.shape}")
        xp, (hb, wb) = pad_to_bucket(x, self.align)
        sess = self.session(hb, wb)
        t0 = time.perf_counter()
        if self.options.io_binding:
            out = self._out_buffers.get((n, hb, wb))
            if out is None:
                out = self._out_buffers[(n, hb, wb)] = np.empty((n, 3, 4 * hb, 4 * wb), np.float32)
            io = sess.io_binding()
            io.bind_cpu_input("lr", xp)
            io.bind_output("hr", "cpu", 0, np.float32, out.shape, out.ctypes.data)
            sess.run_with_iobinding(io)
        else:
            out = sess.run(["hr"], {"lr": xp})[0]
        self._times["run"] += time.perf_counter() - t0
        return out[:, :, : 4 * h, : 4 * w].copy()
