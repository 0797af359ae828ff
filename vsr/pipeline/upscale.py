"""``upscale(src, dst, ...)``: the whole job (check, open, run, commit) as one library call."""

from __future__ import annotations

import logging
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Callable

from vsr.backends import Backend, BackendRequest, OrtOptions, SplitOptions
from vsr.backends.base import announce
from vsr.errors import InputError, printable, tell
from vsr.model.choice import AUTO, WeightsChoice, choose_for
from vsr.pipeline.runner import FrameQueueRunner, RunnerSettings
from vsr.report import RunReport
from vsr.video import EncoderSettings, check_output, open_sink, open_source
from vsr.video.output import is_picture_out, is_stream
from vsr.video.timecode import starting_at

log = logging.getLogger(__name__)


def upscale(src: str | Path, dst: str | Path, *, backend: Backend | BackendRequest = BackendRequest(),
            encoder: EncoderSettings = EncoderSettings(), runner: RunnerSettings = RunnerSettings(),
            overwrite: bool = False, progress: Callable[[int | None], Callable[[int], None]] | None = None,
            on_start: Callable[[], None] | None = None, on_weights: Callable[[WeightsChoice], None] | None = None,
            on_phase: Callable[[str], None] | None = None, notices: bool = True) -> RunReport:
    """Upscale ``src`` (video file, PNG folder, or ``-``: a stream on standard input) into ``dst`` (container
    from its suffix, a PNG folder, or ``-``: a stream on standard output in ``encoder.container``).

    ``backend``: a ready backend, or a :class:`~vsr.backends.BackendRequest` (weights, config, options) that is
    opened once the output is known to be writable.  ``progress(total_frames_or_None)`` returns a per-frame
    callback; ``on_start()`` is called once the backend is warm (export, plan, sessions), just before the first
    frame, so a progress clock can leave the warm-up out.  ``backend.weights == "auto"``: the weights are chosen
    for the source (:mod:`vsr.model.choice`), ``on_weights(choice)`` hears which and why, the report's
    settings record it (``weights``, ``weights_choice``).  ``on_phase(name)`` hears each step before the first
    frame as it starts ("opening input", "choosing weights", "loading model", then the backend's: "exporting
    ONNX", "building plan", "loading sessions", "warming up"), so a caller can say what the wait is for.
    ``notices``: a default the run chose for this source (a deep source's codec) is said in one line; False
    (``--quiet``): not said, warnings still are.  The output appears only when everything succeeded;
    on any error or interrupt the temporary output is removed.
    """
    src, dst = Path(src), Path(dst)
    announce(on_phase, "opening input")
    held, source = HeldWarnings(), None
    try:
        source = _open_input(src, dst, runner)
        if not is_stream(dst):  # standard output: written as it goes, nothing to check or replace
            check_output(dst, src, overwrite)
        start, stop = runner.frames
        _check_start(source.info, start, stop)
        trim = start > 0 or stop is not None
        # the sink first: a wrong codec or container is reported before minutes of model loading
        request = backend if isinstance(backend, BackendRequest) else None
        encoder = run_encoder(backend, encoder)
        # (a trimmed output's timecode is its frame A's)
        sink = open_sink(dst, starting_at(source.info, start), encoder, scale=4 if request else backend.scale,
                         trim=trim, frames=(start, stop))
        try:
            choice = None
            if request is not None:
                request.check()  # a refusal (no GPU) before the weights are measured or the model loads
            held.release(getattr(getattr(sink, "choice", None), "default_line", None) if notices else None)
            if request is not None and request.weights == AUTO:
                announce(on_phase, "choosing weights")
                choice = choose_for(source)
                request = replace(request, weights=choice.weights)
                if on_weights is not None:
                    on_weights(choice)
            if request is not None:
                announce(on_phase, "loading model")
                backend = request.open()
                if backend.scale != 4:
                    raise InputError(f"the model upscales x{backend.scale}; vsr upscale writes x4 outputs")
            tick = progress(_total(source.info, start, stop)) if progress is not None else None
            settings = {
                "input": str(src), "output": str(dst), "weights": str(request.weights if request else "default"),
                "config": getattr(getattr(backend, "config", None), "name", request and request.config),
                "backend": backend.name, "plan": _plan_name(request), "codec": getattr(sink, "codec", "png"),
                # the encoder's own defaults where none were given (the sink knows them): what it really ran with
                "crf": getattr(sink, "crf", encoder.crf), "q": getattr(sink, "quantiser", None),
                "preset": getattr(sink, "preset", encoder.preset),
                "pix_fmt": getattr(sink, "pix_fmt", None), "encoder_options": dict(encoder.options),
                "size": f"{sink.width}x{sink.height}", "scale": str(encoder.scale or 4),
                "dolby_vision": _dolby_vision(sink),
                "frames": f"{start}:{'' if stop is None else stop}", "source": _source_settings(source.info)}
            if choice is not None:
                settings["weights_choice"] = choice.to_dict()
            if request is not None and request.precision is not None:  # what --precision decided, and why
                settings["precision"] = request.precision.precision
                settings["precision_choice"] = request.precision.to_dict()
            report = FrameQueueRunner(backend, runner).run(source, sink, tick, settings, on_start=on_start,
                                                           on_phase=on_phase)
            sink.commit()  # inside the guard: an interrupt while the encoder flushes must not leave the temporary
        except BaseException:
            sink.abort()
            raise
        return report
    finally:
        held.drop()
        if source is not None:
            source.close()


def _open_input(src: Path, dst: Path, runner: RunnerSettings):
    """``src`` as ``runner`` reads it (deinterlaced, a folder at its frame rate); one picture for a picture
    (``photo.jpg -> big.png``: :func:`~vsr.video.output.is_picture_out`) as a folder of that one frame."""
    return open_source(src, deinterlace=runner.deinterlace, frame_rate=runner.frame_rate,
                       picture=is_picture_out(dst, src))


class HeldWarnings:
    """The warnings said while a run is checked (its source, output, encoder, backend), said once every check
    passed: a refused run says its error alone (a subtitle's conversion was said before `-x bogus=1`'s error)."""

    def __init__(self):
        self._held = warnings.catch_warnings(record=True)
        self._caught = self._held.__enter__()

    def release(self, line: str | None = None) -> None:
        """Stop holding and say what was held, then ``line`` (a default the run chose: ``vsr: line``)."""
        if self._held is not None:
            self.drop()
            for w in self._caught:
                warnings.showwarning(w.message, w.category, w.filename, w.lineno)
            if line:
                tell(printable(f"vsr: {line}"))

    def drop(self) -> None:
        """Stop holding; what was held is not said (the run was refused)."""
        if self._held is not None:
            self._held.__exit__(None, None, None)
            self._held = None


# Sources whose frame count is exact before decoding: an MP4/MOV sample table, a Y4M file's size
_COUNTED = ("mov,mp4,m4a,3gp,3g2,mj2", "yuv4mpegpipe")


def _check_start(info, start: int, stop: int | None) -> None:
    """``--frames`` starting at or past the end of a source that counts its frames exactly: refused before the
    sink and the model are opened (it was, after minutes of export and plan; the count is checked again as the
    run decodes, for every source)."""
    if info.frames is not None and start >= info.frames and info.container in _COUNTED and not info.film:
        raise InputError(f"--frames {start}:{'' if stop is None else stop}: the source has only {info.frames} "
                         f"frame{'s' if info.frames != 1 else ''}")


def _total(info, start: int, stop: int | None) -> int | None:
    """The frames a run of ``start:stop`` will write, as far as the source says (None: unknown)."""
    total = info.frames_estimate
    if total is not None:
        return max(0, min(total, stop if stop is not None else total) - start)
    return None if stop is None else stop - start


def _dolby_vision(sink) -> str | None:
    """The Dolby Vision profile the output is ("8.1", "5": its source's RPUs followed), or None."""
    out = getattr(getattr(sink, "choice", None), "dolby_vision", None)
    return None if out is None else out.describe()


def _plan_name(request: BackendRequest | None) -> str:
    """The graph plan for the run report: whole, split, or auto (a ready backend, or PyTorch's eager model)."""
    options = None if request is None else request.options
    if isinstance(options, SplitOptions):
        return "split"
    if isinstance(options, OrtOptions):
        return "whole"
    return "auto"


def run_encoder(backend: Backend | BackendRequest, encoder: EncoderSettings) -> EncoderSettings:
    """The encoder settings a run with ``backend`` writes with: with no ``--codec``, a GPU run asks for an encoder
    that keeps up with the GPU (``hardware``: NVENC where one opens, :func:`vsr.video.encoder_choice.default_codec`)."""
    return replace(encoder, hardware=True) if encoder.codec is None and _on_gpu(backend) else encoder


def _on_gpu(backend: Backend | BackendRequest) -> bool:
    """Whether the run's model runs on an NVIDIA GPU, as its options declare (``on_gpu``)."""
    return bool(getattr(getattr(backend, "options", None), "on_gpu", False))


def _source_settings(info) -> dict:
    """What a run's report says of its source (``settings.source``)."""
    return {"width": info.width, "height": info.height, "pix_fmt": info.pix_fmt, "time_base": str(info.time_base),
            "colour": info.colour.describe(), "rotation": info.rotation, "interlaced": info.interlaced,
            "deinterlaced": info.deinterlaced, "field_rate": info.field_rate, "film": info.film,
            "hdr": info.hdr.describe() if info.hdr is not None else None, "dolby_vision": info.dolby_vision,
            "view": info.view.describe() if info.view is not None else None}
