"""How compressed a source is: its codec, its bits per pixel per frame, and how blocky its pictures are.

These are the inputs of the automatic weights choice (:mod:`vsr.model.choice`).  Measuring is cheap: the
stream's bit rate from the header (else the sizes of its first packets), and the blockiness of a few decoded
frames near the start (:data:`SAMPLE_FRAMES`).  A stream on standard input is never read twice: it is measured
from what its source already holds (its codec and the first frame it decoded to probe itself).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path

import av
import numpy as np

from vsr.video.png_frames import frame_kind
from vsr.video.reading import one_line, open_input
from vsr.video.streams import main_video

# frames decoded from the top of a file (frames 0, 4, 8, ... of them are measured): a few, so that the
# measure costs well under a second at 1080p, yet not only the first (intra) frame, which a codec gives more bits
SAMPLE_FRAMES = 9
SAMPLE_EVERY = 4
PACKETS_FOR_RATE = 60  # packets whose sizes give the rate when the header has none
# pictures flatter than this (mean absolute luma step, 0-255 scale) across and beside the grid say nothing about
# blocks (a fade, a title card); steps beside the grid count as at least this much (flat blocks: no division by 0)
MIN_DETAIL = 0.5


@dataclass(frozen=True)
class CompressionFacts:
    """What :func:`measure` found.  ``codec``: FFmpeg's decoder name (``"png"`` for a PNG folder);
    ``bits_per_pixel``: bits per pixel per frame of the video stream (None where the source does not say);
    ``rate_from``: where it came from (``"stream"``, ``"container"``, ``"packets"``); ``blockiness``: the
    mean of :func:`blockiness` over the ``frames`` measured (None when no frame had detail enough)."""

    codec: str
    bits_per_pixel: float | None = None
    rate_from: str | None = None
    blockiness: float | None = None
    frames: int = 0

    def to_dict(self) -> dict:
        d = asdict(self)
        for k in ("bits_per_pixel", "blockiness"):
            d[k] = None if d[k] is None else round(d[k], 4)
        return d


def blockiness(luma: np.ndarray, block: int = 8) -> float | None:
    """How much stronger the luma steps across the ``block``-pixel grid are than the steps beside them.

    ``luma``: ``(H, W)`` (any numeric type, 0-255 scale).  For every column (and row) boundary of the grid,
    the mean absolute step across it is compared with the mean step across the two pixel boundaries either
    side of it (inside the blocks); the ratio of the sums over both directions.  About 1 for a picture with no
    grid (texture and edges fall anywhere), above 1 when a block codec left its grid visible.  A picture whose
    steps are nearly all on the grid (flat blocks: the blockiest there is) is compared with :data:`MIN_DETAIL`
    instead of its near-zero steps beside it, a large finite value.  None when the picture is too flat (no
    step either way) or too small to say."""
    y = luma.astype(np.int16 if luma.dtype.kind in "ui" else np.float32, copy=False)  # steps may be negative
    across = beside = 0.0
    for plane in (y, y.T):  # column boundaries, then row boundaries
        # boundary j lies between pixels j and j + 1: j = block-1, 2*block-1, ... are the grid's; only the steps
        # at them and beside them are taken (3 in 8 columns: a 1080p frame in a few ms)
        grid = np.arange(block - 1, plane.shape[1] - 2, block)
        if grid.size == 0:
            continue
        step = [float(np.abs(plane[:, grid + k + 1] - plane[:, grid + k]).mean()) for k in (-1, 0, 1)]
        across += step[1]
        beside += (step[0] + step[2]) / 2
    if beside < MIN_DETAIL and across < MIN_DETAIL:
        return None
    return across / max(beside, MIN_DETAIL)


def frame_luma(frame: av.VideoFrame) -> np.ndarray:
    """The luma (or grey) plane of a decoded frame, 8-bit ``(H, W)``."""
    return frame.to_ndarray(format="gray")


def _mean_blockiness(lumas) -> tuple[float | None, int]:
    """The mean :func:`blockiness` of the luma planes that have detail enough, and how many did."""
    values = [b for b in (blockiness(y) for y in lumas) if b is not None]
    return (float(np.mean(values)) if values else None), len(values)


def _rate(bits_per_s: int | None, st, width: int, height: int) -> float | None:
    fps = st.average_rate or st.guessed_rate
    if not bits_per_s or not fps or not width or not height:
        return None
    return bits_per_s / (width * height * float(fps))


def measure_file(path: str | Path) -> CompressionFacts:
    """A video file's :class:`CompressionFacts`: codec and bit rate from its headers (the video stream's rate,
    else the container's less its other streams', else its first packets' sizes), blockiness of frames
    0, 4, 8 of its first :data:`SAMPLE_FRAMES`.  A file PyAV cannot read gives the facts it got so far
    (opening the source reports why the file is bad)."""
    try:
        with open_input(str(path)) as c:
            st = main_video(c)
            cc = st.codec_context
            bpp, rate_from = _rate(st.bit_rate, st, cc.width, cc.height), "stream"
            if bpp is None and c.bit_rate:
                others = sum(_other_rate(c, s) for s in c.streams if s is not st)
                bpp, rate_from = _rate(c.bit_rate - others, st, cc.width, cc.height), "container"
            sizes, sample, decoded, intra = [], [], 0, True
            for packet in c.demux(st):
                if packet.size:
                    sizes.append(packet.size)
                # an intra-only stream (FFV1, ProRes, ...) so far: the packets between the sampled frames need
                # no decoding
                intra = intra and packet.is_keyframe
                if decoded < SAMPLE_FRAMES and not (intra and packet.size and decoded % SAMPLE_EVERY):
                    for frame in packet.decode():
                        sample += [frame] if decoded % SAMPLE_EVERY == 0 else []
                        decoded += 1
                elif decoded < SAMPLE_FRAMES and packet.size:
                    decoded += 1
                if len(sizes) >= PACKETS_FOR_RATE and decoded >= SAMPLE_FRAMES:
                    break
            if bpp is None:
                bpp, rate_from = _packet_rate(sizes, st, cc.width, cc.height), "packets"
            value, n = _mean_blockiness(frame_luma(f) for f in sample[:SAMPLE_FRAMES // SAMPLE_EVERY + 1])
            return CompressionFacts(cc.name, bpp, rate_from if bpp is not None else None, value, n)
    except (av.FFmpegError, IndexError, ValueError, OSError) as e:
        return CompressionFacts(f"unreadable ({one_line(e)})")


def _other_rate(c, s) -> float:
    """Bits per second of the container's rate that stream ``s`` takes: its own rate, or an attachment's (a
    Matroska font, which has no bit_rate attribute at all) bytes spread over the file's duration."""
    if s.type != "attachment":
        return s.bit_rate or 0
    return 8 * len(s.data) / (c.duration / av.time_base) if c.duration else 0


def _packet_rate(sizes: list, st, width: int, height: int) -> float | None:
    """Bits per pixel per frame from the first packets' sizes (one packet is one frame in every container
    without a bit rate that vsr reads: WebM written live, raw streams)."""
    if not sizes or not width or not height:
        return None
    return 8 * sum(sizes) / (len(sizes) * width * height)


def measure_stream(codec: str, first: av.VideoFrame) -> CompressionFacts:
    """A stream on standard input: its codec, and the blockiness of the one frame it decoded to probe itself
    (no rate: a pipe's headers seldom carry one, and its packets cannot be read again)."""
    value, n = _mean_blockiness([frame_luma(first)])
    return CompressionFacts(codec, None, None, value, n)


def measure_png_folder(files: list[Path]) -> CompressionFacts:
    """A folder of frames: blockiness of its first frames (which tells frames decoded from a compressed video);
    JPEG and lossy WebP frames (``mjpeg``, ``vp8``) at their files' bits per pixel, as a video's packets."""
    import cv2

    codec = _frame_codec(files[0]) if files else "png"
    sample = [(f, cv2.imread(os.fsencode(f), cv2.IMREAD_GRAYSCALE)) for f in files[:SAMPLE_FRAMES:SAMPLE_EVERY]]
    sample = [(f, y) for f, y in sample if y is not None]
    value, n = _mean_blockiness(y for _, y in sample)
    if codec not in ("mjpeg", "vp8") or not sample:
        return CompressionFacts(codec, None, None, value, n)
    bpp = 8 * sum(f.stat().st_size for f, _ in sample) / sum(y.size for _, y in sample)
    return CompressionFacts(codec, bpp, "file", value, n)


def _frame_codec(path: Path) -> str:
    """FFmpeg's decoder name for a frame file: ``png``, ``mjpeg``, ``tiff``, ``bmp``; WebP: ``vp8l`` (lossless)
    or ``vp8``, as its first chunks say."""
    kind = frame_kind(path)
    if kind == "WebP":
        with open(path, "rb") as f:
            return "vp8l" if b"VP8L" in f.read(64) else "vp8"
    return {"JPEG": "mjpeg", "TIFF": "tiff", "BMP": "bmp"}.get(kind, "png")


def measure_webp(source) -> CompressionFacts:
    """An animated WebP (:mod:`vsr.video.webp_source`): ``vp8l`` where every frame is lossless, else ``vp8`` (its
    lossy frames' codec) at the file's bits per pixel per frame; blockiness of its first frames."""
    from vsr.video.webp_source import AnimatedWebpSource, lossless_frames

    info = source.info
    codec = "vp8l" if lossless_frames(source.path) else "vp8"
    bpp = 8 * source.path.stat().st_size / (max(1, info.frames) * info.width * info.height)
    weights = np.array([0.299, 0.587, 0.114], np.float32)[:, None, None]  # (BT.601's luma, as libwebp's)
    lumas = []
    sample = AnimatedWebpSource(source.path)  # (its own reader: the run's keeps each frame's alpha for the sink)
    try:
        for f in sample.frames():
            if f.index >= SAMPLE_FRAMES:
                break
            if f.index % SAMPLE_EVERY == 0:
                lumas.append(np.clip((f.rgb * weights).sum(axis=0) * 255 + 0.5, 0, 255).astype(np.uint8))
    finally:
        sample.close()
    value, n = _mean_blockiness(lumas)
    return CompressionFacts(codec, bpp, "file", value, n)


def measure(source) -> CompressionFacts:
    """The :class:`CompressionFacts` of an open source (:func:`vsr.video.open_source`): a PNG folder, a stream
    on standard input (measured from what it holds) or a video file (opened again, read from the top)."""
    if source.info.kind == "png":
        return measure_png_folder(source.files)
    if source.info.kind == "webp":
        return measure_webp(source)
    stream_sample = getattr(source, "probe_sample", None)
    if stream_sample is not None:
        return measure_stream(*stream_sample())
    return measure_file(source.path)
