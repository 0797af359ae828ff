"""``upscale(src, dst, ...)``: the whole job (check, open, run, commit) as one library call."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable

from vsr.pipeline.runner import FrameQueueRunner, RunnerSettings
from vsr.errors import InputError
from vsr.report import RunReport
from vsr.video import EncoderSettings, check_output, open_sink, open_source

log = logging.getLogger(__name__)


def upscale(src: str | Path, dst: str | Path, *, backend=None, weights: str = "default", config=None,
            backend_name: str = "auto", plan: str = "auto", threads: int | None = None,
            encoder: EncoderSettings = EncoderSettings(), runner: RunnerSettings = RunnerSettings(),
            overwrite: bool = False, progress: Callable[[int | None], Callable[[int], None]] | None = None
            ) -> RunReport:
    """Upscale ``src`` (video file or PNG folder) into ``dst`` (container from its suffix, or a PNG folder).

    ``backend``: a ready backend, else one is opened from ``weights``/``config``/``backend_name``/``plan``.
    ``progress(total_frames_or_None)`` returns a per-frame callback.  The output appears only when
    everything succeeded; on any error or interrupt the temporary output is removed.
    """
    src, dst = Path(src), Path(dst)
    source = open_source(src)
    try:
        check_output(dst, src, overwrite)
        start, stop = runner.frames
        trim = start > 0 or stop is not None
        # the sink first: a wrong codec or container is reported before minutes of model loading
        sink = open_sink(dst, source.info, encoder, scale=getattr(backend, "scale", 4), trim=trim)
        try:
            if backend is None:
                from vsr.backends import open_backend

                backend = open_backend(weights=weights, config=config, backend=backend_name, plan=plan,
                                       threads=threads)
                if backend.scale != 4:
                    raise InputError(f"the model upscales x{backend.scale}; vsr upscale writes x4 outputs")
            total = source.info.frames_estimate
            if total is not None:
                total = max(0, min(total, stop if stop is not None else total) - start)
            elif stop is not None:
                total = stop - start
            tick = progress(total) if progress is not None else None
            settings = {
                "input": str(src), "output": str(dst), "weights": str(weights), "config": getattr(
                    getattr(backend, "config", None), "name", config), "backend": getattr(backend, "name", "?"),
                "plan": plan, "codec": getattr(sink, "codec", "png"), "crf": encoder.crf, "preset": encoder.preset,
                "pix_fmt": getattr(sink, "pix_fmt", None), "encoder_options": dict(encoder.options),
                "frames": f"{start}:{'' if stop is None else stop}", "source": {
                    "width": source.info.width, "height": source.info.height, "pix_fmt": source.info.pix_fmt,
                    "time_base": str(source.info.time_base), "colour": source.info.colour.describe(),
                    "rotation": source.info.rotation}}
            report = FrameQueueRunner(backend, runner).run(source, sink, tick, settings)
            sink.commit()  # inside the guard: an interrupt while the encoder flushes must not leave the temporary
        except BaseException:
            sink.abort()
            raise
        return report
    finally:
        source.close()
