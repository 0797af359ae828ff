"""Whether a video's frames lie on its frame rate's grid: a container that keeps no timestamp per frame (AVI:
one rate for the whole stream) cannot hold a variable frame rate; nor can an encoder that knows only a frame
rate (MPEG-1/2), nor one of the few rates MPEG-1/2 can code (:func:`check_mpeg_rate`).  The encoder's time base
(:func:`encoder_time_base`), and what tells x264 the source's rate is constant (:func:`clock_options`)."""

from __future__ import annotations

import functools
import re
from fractions import Fraction
from pathlib import Path

from vsr.errors import InputError
from vsr.video.reading import open_input
from vsr.video.streams import main_video

__all__ = ["check_constant_rate", "check_mpeg_rate", "clock_options", "encoder_time_base"]

# The encoders whose time base FFmpeg limits: MPEG-4 Part 2 codes its resolution in 16 bits (a source's 1/90000
# is refused); MPEG-1 and MPEG-2 read a standard frame rate from it.  Any other encoder takes the source's.
MAX_TIME_BASE_DEN = {"mpeg4": 65535}
FRAME_RATE_CODECS = ("mpeg1video", "mpeg2video")
COARSEST = Fraction(1, 1000)  # a time base that does not split a millisecond is no use to a video
# x264 writes its time base as the stream's clock (H.264's VUI: 1/1000 read as 1000 fps) unless told its input is
# constant-rate, then the frame rate; timestamps pass through as they are.  (x265 writes the rate anyway.)
FORCE_CFR = {"libx264": "x264-params", "libx264rgb": "x264-params"}


# The frame rates MPEG-1/2 code (frame_rate_code 1-8; FFmpeg's encoder takes the others, Xing's, only at
# -strict unofficial); MPEG-2 also one of them times n/d (its frame_rate_extension: n 1-4, d 1-32), as FFmpeg's
# encoder searches them
MPEG_RATES = tuple(map(Fraction, ("24000/1001", "24", "25", "30000/1001", "30", "50", "60000/1001", "60")))
MPEG2_RATES = frozenset(r * Fraction(n, d) for r in MPEG_RATES for n in range(1, 5) for d in range(1, 33))


def check_mpeg_rate(codec: str, info, codecs: frozenset[str]) -> None:
    """InputError where ``codec`` is MPEG-1/2 and cannot code the frame rate of ``info`` (a
    :class:`~vsr.video.source.VideoInfo`; the sink opens it at one frame a tick), saying which rates it codes and
    what to write instead (H.264: into the container, of ``codecs``, where it holds it), before its encoder refuses
    it in its own words.  A file whose frames are off their average rate's grid is left to the sink's line, which
    names the real trouble: a variable frame rate (the file's packets are read for that, only then)."""
    rate = info.rate
    if codec not in FRAME_RATE_CODECS or not rate or Fraction(rate) in (
            MPEG2_RATES if codec == "mpeg2video" else MPEG_RATES):
        return
    path = Path(info.path)
    if not info.film and info.kind in ("video", "webp") and path.is_file():
        if _first_off_grid(path, Fraction(rate), info.kind) is not None:
            return
    name = "MPEG-2" if codec == "mpeg2video" else "MPEG-1"
    more = ", or one of these times n/d (n up to 4, d up to 32: 12.5, 15, 100, ...)" if name == "MPEG-2" else ""
    rate = Fraction(rate)
    shown = f"{float(rate):.6g}" + (f" ({rate.numerator}/{rate.denominator})" if rate.denominator > 1 else "")
    fix = "use -c libx264" if "libx264" in codecs else "use an .mp4, .mkv or .ts output (H.264)"
    raise InputError(f"{name} codes only 23.976, 24, 25, 29.97, 30, 50, 59.94 and 60 fps{more}; the source is "
                     f"{shown} fps: {fix}")


def check_constant_rate(path: Path, rate: Fraction, container: str, kind: str = "video") -> None:
    """InputError where the video of ``path`` (an animated WebP's frames: ``kind`` "webp") is not on its
    ``rate``'s grid (a variable frame rate), which ``container`` (one frame rate for the whole stream) cannot keep.
    Reads the packets' timestamps only, once per version of the file in a process (a batch job opens a sink per
    chunk)."""
    off = _first_off_grid(path, rate, kind)
    if off is not None:
        raise InputError(f"{path} has a variable frame rate (a frame at {off:.3f} s is off its {float(rate):.6g} fps "
                         f"grid), which {container} cannot keep: use a .mkv or .mp4 output")


def _first_off_grid(path: Path, rate: Fraction, kind: str) -> float | None:
    """:func:`_off_grid` of the version of ``path`` on disk now (its packets read once per version)."""
    st = path.stat()
    return _off_grid(str(path), st.st_mtime_ns, st.st_size, Fraction(rate), kind)


@functools.lru_cache(maxsize=8)
def _off_grid(path: str, mtime_ns: int, size: int, rate: Fraction, kind: str = "video") -> float | None:
    """The time of the first frame of ``path`` off the grid of ``rate`` (or on a tick already taken), else None."""
    if kind == "webp":
        from vsr.video.webp_source import WEBP_TIME_BASE, frame_starts

        stamps, tb = frame_starts(Path(path)), WEBP_TIME_BASE
    else:
        with open_input(path) as c:
            st = main_video(c)
            stamps = sorted(p.pts for p in c.demux(st) if p.pts is not None and p.size)
            tb = st.time_base
    slack = float(tb * rate) + 1e-6  # one tick of the source's time base, in frames
    last = None
    for pts in stamps:
        slot = float((pts - stamps[0]) * tb * rate)
        if abs(slot - round(slot)) > slack or (last is not None and round(slot) <= last):
            return float(pts * tb)
        last = round(slot)
    return None


def encoder_time_base(codec: str, path: Path, kind: str, time_base: Fraction, rate: Fraction | None,
                      film: bool = False) -> Fraction:
    """The time base encoder ``codec`` takes the frames of ``path`` (their ``time_base``, frame ``rate``; ``kind``
    as :func:`check_constant_rate`'s; ``film``: inverse telecined, its frames on the film rate's grid whatever the
    file's are) in: theirs where it can; one frame where every frame is on the rate's grid (exact); else, for
    MPEG-4 Part 2, the finest the encoder takes that the source's ticks fall on every few (1/45000 for 1/90000: a
    frame moves at most half a tick), and MPEG-1/2 refuse a variable rate."""
    time_base = Fraction(time_base)
    top = MAX_TIME_BASE_DEN.get(codec)
    if codec not in FRAME_RATE_CODECS and (top is None or time_base.denominator <= top):
        return time_base
    grid = 1 / Fraction(rate) if rate else None
    if grid is not None and (top is None or grid.denominator <= top):
        if film or kind not in ("video", "webp") or not path.is_file():
            return grid  # (a stream read once: its rate is all there is)
        if _first_off_grid(path, Fraction(rate), kind) is None:
            return grid
    if codec in FRAME_RATE_CODECS or top is None:
        raise InputError(f"{path} has a variable frame rate, which {codec} (one frame rate for the whole stream) "
                         "cannot keep: choose another codec (libx264)")
    k = -(-time_base.denominator // top)
    while time_base.denominator % k:
        k += 1
    coarser = time_base * k
    return coarser if coarser.denominator <= top and coarser <= COARSEST else Fraction(1, top)


def clock_options(codec: str, opts: dict[str, str], info, time_base: Fraction) -> dict[str, str]:
    """``opts`` for encoder ``codec`` taking the frames of ``info`` (a :class:`~vsr.video.source.VideoInfo`) in
    ``time_base``, with x264's ``force-cfr`` where they are all on the frame rate's grid (verified as for
    :func:`check_constant_rate`; an inverse telecined film's by construction), so that the stream's own clock
    says the frame rate; else (a variable rate, a stream read once, the user's own ``force-cfr``) as they are."""
    key, rate, path = FORCE_CFR.get(codec), info.rate, Path(info.path)
    if key is None or not rate or Fraction(time_base) == 1 / Fraction(rate):  # (one frame a tick: already said)
        return opts
    if any(re.search(r"(^|:)force-cfr\b", opts.get(k) or "") for k in (key, "x264opts")):
        return opts
    if not info.film:
        if info.kind not in ("video", "webp") or not path.is_file():
            return opts
        if _first_off_grid(path, Fraction(rate), info.kind) is not None:
            return opts
    return {**opts, key: f"force-cfr=1:{opts[key]}" if opts.get(key) else "force-cfr=1"}
