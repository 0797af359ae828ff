"""``preview(src, ...)``: upscale a few frames around one point, and estimate the whole run from them.

The frames go through the real pipeline (:func:`vsr.pipeline.upscale` with ``frames=(a, b)``) into a
temporary file with the run's own encoder settings, and are decoded back.  The preview therefore shows what the
encoded output will look like, and these measurements give the estimates:

- time: the warm-up (from ``started``, the command's start: imports, export, plan, sessions), the first frame's
  wait after it (the pipeline filling), and the clip's other frames at the steady per-frame time.  What of the
  warm-up built what the engine cache now keeps (the export and the plan:
  :data:`vsr.backends.base.CACHED_BUILDS`) is not counted: the run after the preview finds them there.  The
  steady time is the spacing of the written frames after the first and before the last: where the infer stage
  keeps a device busy it hands each result on once the next batch is queued, the last as the run ends, so the
  last spacing is short (the CPU's runs did so too until 2026-12-05: with 2 tiles a frame, a 480p preview's
  spacings were 8.9 s and then 4.7 s, their mean a quarter short of the run's).  It includes the pipeline's
  overlap and this machine's load.  The tile the memory plan chose for the run is the tile the preview ran with.
- size: the preview's encoded video packets scaled to the clip, encoded as the whole run would encode them
  (:attr:`Preview.encoder`: :func:`vsr.video.encoder_choice.choose_encoder` for the run's container).  The first
  packet is a key frame and counts once; the others give the mean of the rest.  Audio and subtitles are copied,
  so their bytes are the source's.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

import cv2
import numpy as np

from vsr.backends import Backend, BackendRequest
from vsr.backends.base import CACHED_BUILDS
from vsr.errors import InputError
from vsr.pipeline import RunnerSettings, upscale
from vsr.pipeline.upscale import run_encoder
from vsr.video import EncoderSettings, open_source
from vsr.video.clock import frame_times, parse_time
from vsr.video.endpoints import existing
from vsr.video.extras import read_extras
from vsr.video.png_frames import frame_paths
from vsr.video.encoder_choice import EncoderChoice, OutputContainer, choose_encoder
from vsr.video.output import is_stream
from vsr.video.reading import open_input
from vsr.video.source import VideoInfo
from vsr.video.streams import main_video

DEFAULT_FRAMES = 3  # the middle one is shown; the first two's spacing times the run (the last's is short)


@dataclass(frozen=True)
class Preview:
    """What :func:`preview` saw.  ``lr``/``bicubic``/``sr``: uint8 RGB ``(H, W, 3)`` per frame ``first..``;
    ``sr`` decoded from the encoded preview.  Times in seconds, sizes in bytes; None where unknown.  ``encoder``:
    what the whole run encodes with (None: PNG frames)."""

    src: Path
    first: int
    lr: list[np.ndarray]
    bicubic: list[np.ndarray]
    sr: list[np.ndarray]
    total_frames: int | None
    warmup_s: float
    seconds_per_frame: float
    video_bytes: list[int]
    other_bytes: int
    memory_plan: dict
    config: str | None
    encoder: EncoderChoice | None = None
    cached_build_s: float = 0.0  # the part of the warm-up that built what the engine cache now keeps
    first_frame_s: float | None = None  # from the warm-up's end to the first frame written (None: not measured)

    @property
    def estimate_s(self) -> float | None:
        """The whole clip: the run's warm-up (the preview's, less what the cache now keeps), its first frame's
        wait, and the other frames at the steady per-frame time (every frame at it where the first frame's wait
        was not measured)."""
        if self.total_frames is None:
            return None
        warmup = max(self.warmup_s - self.cached_build_s, 0.0)
        if self.first_frame_s is None:
            return warmup + self.total_frames * self.seconds_per_frame
        return warmup + self.first_frame_s + max(self.total_frames - 1, 0) * self.seconds_per_frame

    @property
    def estimate_bytes(self) -> int | None:
        """The whole output: one key frame, the other frames at the mean of the preview's others, plus the
        copied audio and subtitles and the attachments and cover the output holds."""
        if self.total_frames is None or not self.video_bytes:
            return None
        rest = self.video_bytes[1:] or self.video_bytes
        return int(self.video_bytes[0] + (self.total_frames - 1) * float(np.mean(rest)) + self.other_bytes)

    @property
    def bits_per_pixel(self) -> float:
        """Mean encoded bits per output pixel of the preview's frames."""
        h, w = self.sr[0].shape[:2]
        return 8 * sum(self.video_bytes) / (len(self.video_bytes) * h * w) if self.video_bytes else 0.0


def frame_at(at: str | int | None, rate: float | None, total: int | None, times=None) -> int:
    """``--at``: a frame index (``120``), a time (``12.5s``, ``1:02.5``, ``0:01:02``), or None: the middle.
    ``times``: ``T -> [each frame's time]`` (:func:`vsr.video.clock.frame_times`, the frames up to T at least; None
    where unknown): a time is the frame on screen then, as ``vsr upscale --start`` finds it (on a variable frame
    rate not ``T x`` the average rate); without it, or where it gives None, ``T x rate``."""
    if at is None:
        return (total or 1) // 2
    text = str(at).strip()
    if text.isdigit():
        index = int(text)
    else:
        try:  # (a bare number is a frame index: a time in seconds says so, 12.5s)
            if ":" not in text and not text.endswith("s"):
                raise InputError(text)
            when = parse_time(text, "--at")  # vsr upscale --start's parser: one notation of time
        except InputError:
            raise InputError(f"--at must be a frame index (120) or a time (12.5s, 1:02.5), not {text!r}") from None
        seconds = float(when)
        shown = None if times is None else times(when)
        if shown is not None:
            index = max(sum(t <= when for t in shown) - 1, 0)
            last = float(shown[-1])
            if index == len(shown) - 1 and rate and seconds >= last + 1 / rate:  # (the read was whole: see times)
                raise InputError(f"--at {text}: the source is only {_seconds(last + 1 / rate)} s long (its last "
                                 f"frame starts at {_seconds(last)} s)")
            return min(index, total - 1) if total else index
        if not rate:
            raise InputError(f"--at {text}: the source has no frame rate; give a frame index")
        index = int(seconds * rate + 1e-6)
    if total is not None and index >= total:
        if text.isdigit():
            raise InputError(f"--at {text}: the source has only {total} frames")
        # in the user's unit: a time past the end is said in seconds, not in frames they never counted
        raise InputError(f"--at {text}: the source is only {_seconds(total / rate)} s long (its last frame starts "
                         f"at {_seconds((total - 1) / rate)} s)")
    return index


def _seconds(s: float) -> str:
    return f"{s:.2f}".rstrip("0").rstrip(".")


def check_source(src: str | Path) -> Path:
    """``src``, or the one-line error of an input a preview cannot read that needs no decoding to tell: said
    before the picture's name is checked, as `vsr upscale` checks its input before its output."""
    if is_stream(src):
        raise InputError("vsr preview needs a file: it reads its input three times (standard input, -, is read "
                         "once)")
    return existing(src)


def preview(src: str | Path, *, at: str | int | None = None, frames: int = DEFAULT_FRAMES,
            backend: Backend | BackendRequest = BackendRequest(), encoder: EncoderSettings = EncoderSettings(),
            runner: RunnerSettings = RunnerSettings(), suffix: str | None = None, on_weights=None,
            on_start=None, started: float | None = None) -> Preview:
    """Upscale ``frames`` frames around ``at`` of ``src`` as ``vsr upscale`` would (same backend, encoder and
    runner settings), into a temporary ``suffix`` file (default: the source's own suffix where vsr writes that
    container, else ``.mkv``, as for PNG frames and Y4M), and measure it (see the module's docstring).
    ``on_weights``, ``on_start``: as :func:`vsr.pipeline.upscale`'s (the weights ``--weights auto`` chose for the
    source; the backend is warm, the first frame next);
    ``started``: ``time.perf_counter()`` when the command began (its imports are part of a run's warm-up too;
    default: now)."""
    started = time.perf_counter() if started is None else started
    if frames < 2:
        raise InputError(f"--frames must be 2 or more (the time per frame is their spacing), not {frames}")
    src = check_source(src)
    said = _Said()
    with said():
        source = open_source(src, deinterlace=runner.deinterlace, frame_rate=runner.frame_rate)
    info = source.info
    source.close()
    total = info.frames_estimate
    if total is not None and total < 2:
        raise InputError(f"{src} has {total} frame: a preview times 2 frames or more (vsr upscale upscales it)")
    frames = min(frames, total or frames)  # a short clip: all of it, not a run told to write frames it lacks
    center = frame_at(at, float(info.rate) if info.rate else None, total, lambda t: frame_times(source, t))
    first = max(0, min(center - frames // 2, (total or center + frames) - frames))
    stop = first + frames
    said.frames(first, stop)
    if suffix:
        chosen = _encoder_of(f"preview{suffix}", backend, encoder, info)  # the whole run's, said before any work
    else:  # the source's container, where vsr writes one (not Y4M: raw video, a pipe format); else Matroska
        suffix = src.suffix if info.kind == "video" and src.suffix else ".mkv"
        try:
            chosen = _encoder_of(f"preview{suffix}", backend, encoder, info)
        except InputError:
            suffix = ".mkv"
            chosen = _encoder_of(f"preview{suffix}", backend, encoder, info)
    stamps: list[float] = []
    with tempfile.TemporaryDirectory(prefix="vsr-preview-") as tmp:
        out = Path(tmp) / f"preview{suffix}"
        with said(hold=True):  # said once the preview knows it has frames enough (else its one error alone)
            report = upscale(src, out, backend=backend, encoder=encoder,
                             runner=replace(runner, frames=(first, stop)),
                             progress=lambda _total: (lambda _n: stamps.append(time.perf_counter())),
                             on_start=lambda: _started(stamps, on_start), on_weights=on_weights)
        with warnings.catch_warnings():  # about vsr's own temporary file (AVI's timestamps...): not the user's
            warnings.simplefilter("ignore")
            sr, video_bytes, extra_bytes = _read_back(out)
    with warnings.catch_warnings():  # the run read these frames of the source already, and said what it found
        warnings.simplefilter("ignore")
        lr = _lr_frames(src, first, first + len(sr), runner.deinterlace)
    written = len(stamps) - 1  # on_start, then one stamp per frame written
    if written < frames:  # the source ended before the preview's last frame, short of what it declares
        declares = f" (it declares {total})" if total is not None else ""
        if written < 2:
            where = (f"has {first + written} frame{'s' if first + written != 1 else ''}" if first == 0 else
                     f"ends at frame {first + written - 1}, inside the preview's frames {first}..{stop - 1}")
            raise InputError(f"{src} {where}{declares}: a preview times 2 frames or more"
                             + (" (vsr upscale upscales it)" if first == 0 else "; try an earlier --at"))
        total = first + written  # where it ended: the whole run's estimate counts the frames there are
        ended = any(" ended early: " in str(w.message) for w in said.held)  # the run's own words for it, if any
        said.held_say(None if ended else
                      f"{src} has only {total} frames{declares}: the preview shows frames {first}..{total - 1}",
                      drop=said.asked)
    else:
        said.held_say()
    warmup = stamps[0] - started
    return Preview(src, first, lr, [_bicubic(f, sr[0].shape) for f in lr], sr, total, warmup,
                   steady_spacing(stamps[1:]), video_bytes, _other_bytes(src, info.kind) + extra_bytes,
                   report.settings.get("memory_plan", {}), report.settings.get("config"), chosen,
                   min(sum(report.steps.get(k, 0.0) for k in CACHED_BUILDS), warmup), stamps[1] - stamps[0])


def _started(stamps: list[float], on_start) -> None:
    """The run's warm-up is over: the caller hears it first, then the clock of the frames starts."""
    if on_start is not None:
        on_start()
    stamps.append(time.perf_counter())


def steady_spacing(written: list[float]) -> float:
    """The time per frame from the times frames were written: the spacing of those before the last (see the
    module docstring); with 2 frames, the one spacing there is."""
    if len(written) < 2:
        raise ValueError("the spacing of frames needs 2 of them")
    kept = written[:-1] if len(written) >= 3 else written
    return (kept[-1] - kept[0]) / (len(kept) - 1)


class _Said:
    """What the preview's reads of the source warn, said once each (the source is opened more than once), and the
    run's warnings and errors about its ``--frames A:B`` (a source shorter than its header says) in the preview's
    words: the user gave ``vsr preview`` no such option."""

    def __init__(self):
        self.seen: set[str] = set()
        self.asked = self.ours = ""
        self.held: list[warnings.WarningMessage] = []

    def frames(self, first: int, stop: int) -> None:
        self.asked, self.ours = f"--frames {first}:{stop}", f"the preview's frames {first}..{stop - 1}"

    def _words(self, text: str) -> str:
        return self.ours + text[len(self.asked):] if self.asked and text.startswith(self.asked) else text

    @contextlib.contextmanager
    def __call__(self, hold: bool = False):
        """``hold``: a block that ends without an error keeps its warnings for :meth:`held_say` (a failed one
        says them, then its error)."""
        said: list[warnings.WarningMessage] = []
        failed = True
        try:
            with warnings.catch_warnings(record=True) as said:
                warnings.simplefilter("always")
                yield
            failed = False
        except InputError as e:
            words = self._words(str(e))
            if words != str(e):
                raise InputError(words) from None
            raise
        finally:  # said outside the recording, each text once in the whole preview
            if hold and not failed:
                self.held.extend(said)
            else:
                self._say(said)

    def held_say(self, own: str | None = None, drop: str = "") -> None:
        """The held warnings said, but those starting with ``drop`` (the run's ``--frames`` the preview gave
        it), then ``own``."""
        held, self.held = self.held, []
        self._say([w for w in held if not (drop and str(w.message).startswith(drop))])
        if own is not None:
            warnings.warn(own, stacklevel=3)

    def _say(self, said: list[warnings.WarningMessage]) -> None:
        for w in said:
            text = self._words(str(w.message))
            if text not in self.seen:
                self.seen.add(text)
                warnings.warn_explicit(text, w.category, w.filename, w.lineno)


def _encoder_of(name: str, backend: Backend | BackendRequest, encoder: EncoderSettings,
                info: VideoInfo) -> EncoderChoice | None:
    """The encoder a run with ``backend`` and ``encoder`` chooses for an output called ``name`` (the preview's, of
    the whole run's container): the choice its sink makes (None: a folder of PNG frames, no encoder)."""
    if Path(name).suffix == "":  # (vsr.video.output.is_png_folder's rule for a name that does not exist yet)
        return None
    scale = 4 if isinstance(backend, BackendRequest) else backend.scale  # (as vsr.pipeline.upscale's sink)
    return choose_encoder(OutputContainer.named(name), run_encoder(backend, encoder), info, scale)


def _read_back(path: Path) -> tuple[list[np.ndarray], list[int], int]:
    """The preview file's frames (uint8 RGB), its video packets' sizes in decode order, and the bytes of the
    attachments and cover it holds (a Matroska's fonts: megabytes the whole run writes too)."""
    source = open_source(path)
    try:
        sr = [np.clip(f.rgb * 255 + 0.5, 0, 255).astype(np.uint8).transpose(1, 2, 0) for f in source.frames()]
    finally:
        source.close()
    sizes, extra = [], 0
    if path.is_file():
        with open_input(str(path)) as c:
            sizes = [p.size for p in c.demux(main_video(c)) if p.size]
            extra = sum(len(x.data) for x in read_extras(c))
    else:  # PNG frames
        sizes = [p.stat().st_size for p in sorted(frame_paths(path))]
    return sr, sizes, extra


def _lr_frames(src: Path, first: int, stop: int, deinterlace: str = "auto") -> list[np.ndarray]:
    source = open_source(src, deinterlace=deinterlace)  # the frames the run upscaled, for bicubic beside them
    out = []
    try:
        for f in source.frames(first):
            if f.index >= stop:
                break
            if f.index >= first:
                out.append(np.clip(f.rgb * 255 + 0.5, 0, 255).astype(np.uint8).transpose(1, 2, 0))
            f = None
    finally:
        source.close()
    return out


def _bicubic(lr: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    return cv2.resize(lr, (shape[1], shape[0]), interpolation=cv2.INTER_CUBIC)


def _other_bytes(src: Path, kind: str) -> int:
    """Bytes of the source's audio and subtitle packets (copied as they are into the output)."""
    if kind != "video":
        return 0
    with open_input(str(src)) as c:
        streams = [s for s in c.streams if s.type in ("audio", "subtitle")]
        return sum(p.size for p in c.demux(streams) if p.size) if streams else 0
