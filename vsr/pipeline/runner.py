"""The frame-queue runner: decode -> windows -> batches -> backend -> post-processing -> encode.

Each stage runs in its own thread and talks to its neighbours through bounded queues, so a slow stage
holds the others back (back-pressure) and memory stays bounded whatever the video's length: at most
``queue`` items wait between two stages, plus the ``4 * radius + 1`` source frames the window assembler
keeps.  numpy, PyAV, ONNX Runtime and torch release the GIL in their heavy loops, so the stages overlap.

    decode      source frames, float32 RGB (3, H, W)
    window      FrameWindow: the T frames around each output frame (clip ends padded as configured)
    batch       up to ``batch`` (window, tile) items stacked into (N, T, 3, h, w), or what is ready
                after ``batch_wait_s``
    infer       backend.infer -> (N, 3, 4h, 4w) float32
    post        tile cores -> output planes (colour matrix, quantisation) of whole HR frames, written into
                the sink's own frame buffers, then finished there (chroma subsampling, colour tags)
    encode      sink.write (PyAV encoder + muxer, or PNG files)
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

import numpy as np

from vsr.pipeline.memory import MemoryPlan, plan_memory
from vsr.pipeline.tiles import Tile, tile_grid
from vsr.pipeline.windows import window_indices
from vsr.report import RunReport, StageTimer

log = logging.getLogger(__name__)

_END = object()
_POLL_S = 0.1
INFER_THREAD = "vsr-infer"


def infer_still_running() -> bool:
    """True while an abandoned inference call is still running (see ``FrameQueueRunner._wind_down``).

    A process must not run its normal interpreter shutdown then: the native libraries' global state would be
    torn down under the running call.  The CLI ends such a process with ``os._exit`` after its cleanup.
    """
    return any(t.name == INFER_THREAD and t.is_alive() for t in threading.enumerate())


@dataclass(frozen=True)
class RunnerSettings:
    """Knobs of the runner.

    batch: items (windows, or tiles of windows) per backend call; tile: LR tile side (None: automatic, the
    largest that keeps the whole process within ``memory_budget_mb``, see :mod:`vsr.pipeline.memory`; 0: never
    tile); overlap: LR pixels of context around each tile's core;
    frames: output frames ``start:stop`` (Python slice semantics, neighbours outside still feed windows);
    queue: items between two stages; batch_wait_s: how long the batcher waits to fill a batch;
    stop_grace_s: how long a stop waits for a backend call in progress before leaving it behind.
    """

    batch: int = 1
    tile: int | None = None
    overlap: int = 16
    memory_budget_mb: int = 3072
    frames: tuple[int, int | None] = (0, None)
    queue: int = 2
    batch_wait_s: float = 0.02
    stop_grace_s: float = 2.0


@dataclass(frozen=True)
class FrameWindow:
    """The ``T`` source frames (float32 ``(3, H, W)``) that make output frame ``index``."""

    index: int
    pts: int
    duration: int
    frames: tuple[np.ndarray, ...]
    sources: tuple[int, ...]


@dataclass(frozen=True)
class _Slot:
    """Where a result goes: output frame ``index`` with its timestamp."""

    index: int
    pts: int
    duration: int


@dataclass
class _HrFrame:
    index: int
    pts: int
    duration: int
    planes: object  # sink.new_planes() while tiles arrive, then what sink.finish() made of it
    tiles_left: int


class Cancelled(Exception):
    """A stage was told to stop because another failed or the user interrupted."""


class _Stage:
    def __init__(self, name: str, stop: threading.Event, unit: str = "frames"):
        self.timer = StageTimer(name, unit)
        self.stop = stop

    def get(self, q: queue.Queue, timeout: float | None = None):
        with self.timer.waiting_in():
            deadline = None if timeout is None else time.perf_counter() + timeout
            while True:
                if self.stop.is_set():
                    raise Cancelled()
                wait = _POLL_S if deadline is None else min(_POLL_S, deadline - time.perf_counter())
                if wait <= 0:
                    raise queue.Empty
                try:
                    return q.get(timeout=wait)
                except queue.Empty:
                    continue

    def put(self, q: queue.Queue, item) -> None:
        with self.timer.waiting_out():
            while True:
                if self.stop.is_set():
                    raise Cancelled()
                try:
                    q.put(item, timeout=_POLL_S)
                    return
                except queue.Full:
                    continue


class FrameQueueRunner:
    """Runs one source through a backend into one sink.  Library object; the CLI only wires it up.

    ``backend``: a :class:`vsr.backends.base.Backend` with ``num_frame``, ``scale``, ``infer`` and (optionally)
    ``config.padding``; ``source``/``sink`` from :mod:`vsr.video`.
    """

    def __init__(self, backend, settings: RunnerSettings = RunnerSettings()):
        self.backend = backend
        self.settings = settings
        cfg = getattr(backend, "config", None)
        self.padding = getattr(cfg, "padding", "reflection_circle")
        self.num_feat = getattr(cfg, "num_feat", 64)
        self.num_frame = backend.num_frame
        self.radius = self.num_frame // 2
        self.scale = getattr(backend, "scale", 4)

    def _wind_down(self, threads: list[threading.Thread]) -> None:
        """After a stop: wait until no stage touches the source or the sink any more.

        Every stage but ``infer`` finishes its current item within moments (one frame decoded, one tile
        converted, one frame encoded) and then sees the stop, so they are always waited for: only then may the
        caller close the containers.  ``infer`` may be inside a backend call that lasts minutes on a CPU; it
        touches neither the source nor the sink, so it gets ``stop_grace_s`` and is otherwise left to finish on
        its own (a daemon thread; :func:`infer_still_running` tells a process that is about to exit).  A second
        Ctrl-C does not cut this short: closing a container under a running encoder corrupts the heap.
        """
        grace_end = time.monotonic() + self.settings.stop_grace_s
        for t in threads:
            infer = t.name == INFER_THREAD
            while t.is_alive():
                try:
                    t.join(_POLL_S)
                except KeyboardInterrupt:
                    pass
                if infer and time.monotonic() >= grace_end:
                    log.info("inference is still inside a backend call; not waiting for it")
                    break

    def plan_tile(self, height: int, width: int, sink=None) -> tuple[int | tuple[int, int] | None, MemoryPlan | None]:
        """The LR tile (a side, ``(h, w)``, or None: whole frames) and, for an automatic tile, the memory plan."""
        s = self.settings
        if s.tile == 0:
            return None, None
        if s.tile is not None:
            return (s.tile if (height > s.tile or width > s.tile) else None), None
        estimate = getattr(sink, "memory_estimate_mb", None)
        dtype = np.dtype(sink.plane_dtype()) if sink is not None and hasattr(sink, "plane_dtype") else np.dtype(np.uint8)
        plan = plan_memory(budget_mb=s.memory_budget_mb, height=height, width=width, scale=self.scale,
                           num_frame=self.num_frame, batch=s.batch, queue=s.queue, overlap=s.overlap,
                           encoder_mb=estimate() if estimate else 0.0, hr_bytes_per_pixel=3 * dtype.itemsize)
        return plan.tile, plan

    def run(self, source, sink, progress: Callable[[int], None] | None = None,
            settings_for_report: dict | None = None, on_start: Callable[[], None] | None = None) -> RunReport:
        """Upscale every frame of ``source`` in ``settings.frames`` into ``sink``; returns the timings.

        ``on_start()`` is called once the backend is prepared for the tile shape, just before the first frame.

        The sink is neither committed nor aborted here: the caller owns the output file's fate.
        """
        s = self.settings
        info = source.info
        start, stop_at = s.frames
        tile, memory = self.plan_tile(info.height, info.width, sink)
        tiles = tile_grid(info.height, info.width, tile, s.overlap)
        pix_fmt, spec = sink.planes_format()
        dtype = sink.plane_dtype()
        # a sink may assemble frames in its own buffers and finish them (e.g. chroma subsampling) here in
        # post-processing; a minimal sink takes (3, H, W) integer planes as they are
        new_planes = getattr(sink, "new_planes", None) or (lambda h, w: np.empty((3, h, w), dtype))
        finish = getattr(sink, "finish", None) or (lambda planes: planes)
        from vsr.video.colour import encode_planes

        stop = threading.Event()
        q_frames = queue.Queue(max(s.queue, 1))
        q_windows = queue.Queue(max(s.queue, 1))
        q_batches = queue.Queue(1)
        q_results = queue.Queue(1)
        q_hr = queue.Queue(max(s.queue, 1))
        unit = "tiles" if len(tiles) > 1 else "frames"
        st_dec, st_win = _Stage("decode", stop), _Stage("window", stop)
        st_bat, st_inf = _Stage("batch", stop, unit), _Stage("infer", stop, unit)
        st_post, st_enc = _Stage("post", stop), _Stage("encode", stop)
        r = self.radius
        first_needed = max(start - 2 * r, 0)
        decode_stop = None if stop_at is None else stop_at + 2 * r
        written = [0]
        seen_total = [0]

        def decode():
            it = iter(source.frames(first_needed))
            while True:
                with st_dec.timer.busy():
                    f = next(it, None)
                if f is None:
                    break
                seen_total[0] = f.index + 1
                if decode_stop is not None and f.index >= decode_stop:
                    seen_total[0] = -1  # stopped early: the clip goes on beyond
                    break
                if f.index < first_needed:
                    continue
                st_dec.timer.count()
                st_dec.put(q_frames, f)
                f = None
            st_dec.put(q_frames, _END)

        def assemble():
            buf: dict[int, object] = {}
            center = start
            total = None
            huge = 1 << 62
            while True:
                item = st_win.get(q_frames)
                if item is _END:
                    total = seen_total[0] if seen_total[0] >= 0 else huge
                else:
                    buf[item.index] = item
                    item = None
                while stop_at is None or center < stop_at:
                    if total is not None and center >= total:
                        break
                    with st_win.timer.busy():
                        idx = window_indices(center, total or huge, self.num_frame, self.padding)
                        if not all(j in buf for j in idx):
                            if total is not None:
                                raise RuntimeError(f"internal: window {idx} of frame {center} incomplete")
                            w = None
                        else:
                            c = buf[center]
                            w = FrameWindow(center, c.pts, c.duration, tuple(buf[j].rgb for j in idx), tuple(idx))
                            for k in [k for k in buf if k < center + 1 - 2 * r]:
                                del buf[k]
                    if w is None:
                        break
                    st_win.timer.count()
                    st_win.put(q_windows, w)
                    w = c = None
                    center += 1
                if total is not None:
                    break
            st_win.put(q_windows, _END)

        def batcher():
            done = False
            pending: list[tuple[FrameWindow, Tile]] = []
            while True:
                while len(pending) < s.batch and not done:
                    try:
                        w = st_bat.get(q_windows, timeout=None if not pending else s.batch_wait_s)
                    except queue.Empty:
                        break
                    if w is _END:
                        done = True
                    else:
                        pending.extend((w, t) for t in tiles)
                if not pending:
                    break
                items, pending = pending[: s.batch], pending[s.batch:]
                with st_bat.timer.busy():
                    t0 = items[0][1]
                    x = np.empty((len(items), self.num_frame, 3, t0.y1 - t0.y0, t0.x1 - t0.x0), np.float32)
                    for n, (w, t) in enumerate(items):
                        for k, f in enumerate(w.frames):
                            x[n, k] = f[:, t.y0:t.y1, t.x0:t.x1]
                    # downstream needs where each result goes, not the LR frames: let them go now
                    items = [(_Slot(w.index, w.pts, w.duration), t) for w, t in items]
                    w = None
                st_bat.timer.count(len(items))
                st_bat.put(q_batches, (items, x))
                x = items = None
            st_bat.put(q_batches, _END)

        def infer():
            while True:
                item = st_inf.get(q_batches)
                if item is _END:
                    break
                items, x = item
                with st_inf.timer.busy():
                    y = self.backend.infer(x)
                st_inf.timer.count(len(items))
                st_inf.put(q_results, (items, y))
            st_inf.put(q_results, _END)

        sc = self.scale

        def post():
            current: _HrFrame | None = None
            while True:
                item = st_post.get(q_results)
                if item is _END:
                    break
                items, y = item
                for n, (w, t) in enumerate(items):
                    with st_post.timer.busy():
                        if current is None or current.index != w.index:
                            current = _HrFrame(w.index, w.pts, w.duration, new_planes(info.height * sc, info.width * sc),
                                               len(tiles))
                        core = y[n, :, sc * (t.cy0 - t.y0): sc * (t.cy1 - t.y0), sc * (t.cx0 - t.x0): sc * (t.cx1 - t.x0)]
                        encode_planes(core, pix_fmt, spec,
                                      out=current.planes[:, sc * t.cy0: sc * t.cy1, sc * t.cx0: sc * t.cx1])
                        current.tiles_left -= 1
                    if current.tiles_left == 0:
                        with st_post.timer.busy():
                            current.planes = finish(current.planes)
                        st_post.timer.count()
                        st_post.put(q_hr, current)
                        current = None
            st_post.put(q_hr, _END)

        def encode():
            while True:
                item = st_enc.get(q_hr)
                if item is _END:
                    break
                with st_enc.timer.busy():
                    sink.write(item.planes, item.pts, item.duration)
                st_enc.timer.count()
                written[0] += 1
                if progress is not None:
                    progress(1)

        stages = [(st_dec, decode), (st_win, assemble), (st_bat, batcher), (st_inf, infer), (st_post, post),
                  (st_enc, encode)]
        errors: list[BaseException] = []

        def guard(fn):
            def body():
                try:
                    fn()
                except Cancelled:
                    pass
                except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
                    errors.append(e)
                    stop.set()
            return body

        self.backend.prepare(max(t.y1 - t.y0 for t in tiles), max(t.x1 - t.x0 for t in tiles), s.batch)
        if on_start is not None:
            on_start()
        t0 = time.perf_counter()
        threads = [threading.Thread(target=guard(fn), name=f"vsr-{st.timer.name}", daemon=True) for st, fn in stages]
        for t in threads:
            t.start()
        try:
            for t in threads:
                while t.is_alive():
                    t.join(_POLL_S)
        except BaseException:
            stop.set()
            self._wind_down(threads)
            raise
        if errors:
            raise errors[0]
        wall = time.perf_counter() - t0
        if written[0] == 0:
            from vsr.errors import InputError

            raise InputError(f"zero frames to write: the source has {seen_total[0]} frames, "
                             f"--frames asked for {start}:{'' if stop_at is None else stop_at}")
        if stop_at is not None and written[0] < stop_at - start:
            log.warning("the source ends after %d frames: wrote %d", seen_total[0], written[0])
        steps = {}
        try:
            steps = dict(self.backend.timings())
        except Exception:  # timings are optional for foreign backends
            steps = {}
        settings = dict(settings_for_report or {})
        settings.update(tile=tile, tiles_per_frame=len(tiles), overlap=s.overlap, batch=s.batch, queue=s.queue,
                        padding=self.padding, num_frame=self.num_frame,
                        memory_plan=memory.to_dict() if memory is not None else None)
        return RunReport([st.timer.stats() for st, _ in stages], settings, wall, written[0], steps)
