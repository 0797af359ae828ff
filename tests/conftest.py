"""Shared fixtures: real video clips made with PyAV, a probe that reads them back, a tiny real backend.

Clips are tiny (tens of pixels, a few frames) so that the EDVR-tiny model with random weights runs them in
well under a second on a shared CPU.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import json
import warnings
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

# The suite's runs are fp32 on every machine: `--precision auto`, the default, is int8 on a CPU with AVX-512 VNNI
# or AMX (vsr.backends.precision), so outputs and timings would follow the machine.  Processes the tests start
# inherit it; the tests of auto itself (tests/backends/test_precision.py) take it away.
os.environ.setdefault("VSR_PRECISION", "fp32")


@dataclass
class Audio:
    codec: str = "aac"
    layout: str = "stereo"
    rate: int = 48000
    language: str | None = None
    title: str | None = None


@dataclass
class Subtitles:
    codec: str = "subrip"  # muxed as pre-encoded text packets
    language: str | None = None
    cues: tuple = ((0.0, 0.1, "hello"), (0.1, 0.2, "world"))


@dataclass
class Clip:
    """What :func:`make_clip` should write.  ``pts`` (in ``time_base``) gives variable frame rate."""

    width: int = 24
    height: int = 16
    frames: int = 6
    pix_fmt: str = "yuv420p"
    codec: str = "libx264"
    options: dict | None = None  # the encoder's; None: libx264's preset ultrafast, which makes no B-frames
    rate: Fraction = Fraction(25)
    time_base: Fraction | None = None
    pts: list[int] | None = None
    durations: list[int] | None = None  # each frame's (in time_base), set on its packet (Matroska keeps them)
    matrix: int | None = None  # AVColorSpace; None: untagged
    range: int | None = None  # AVColorRange
    primaries: int | None = None
    transfer: int | None = None
    rotation: int = 0
    display_matrix: tuple | None = None  # FFmpeg's 9 int32 (a mirror, a transpose), in place of a rotation
    sar: Fraction | None = None
    title: str | None = None
    language: str | None = None
    audio: list[Audio] = field(default_factory=list)
    subtitles: list[Subtitles] = field(default_factory=list)
    seed: int = 0


def pattern(index: int, width: int, height: int, seed: int = 0) -> np.ndarray:
    """A moving colour gradient with some texture, uint8 (H, W, 3)."""
    rng = np.random.default_rng(seed + index)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    r = 128 + 100 * np.sin((x + 2 * index) / 5.0)
    g = 128 + 100 * np.cos((y + index) / 4.0)
    b = 255 * (x + y) / (width + height)
    img = np.stack([r, g, b], -1) + rng.normal(0, 8, (height, width, 3))
    return np.clip(img, 0, 255).astype(np.uint8)


def write_clip(path: Path, clip: Clip) -> Path:
    from vsr.video.colour import ColourSpec, planes_to_frame
    from vsr.video.planes import encode_planes

    oc = av.open(str(path), "w")
    vs = oc.add_stream(clip.codec, rate=clip.rate)
    vs.width, vs.height, vs.pix_fmt = clip.width, clip.height, clip.pix_fmt
    tb = clip.time_base or (1 / clip.rate)
    vs.time_base = tb
    vs.codec_context.time_base = tb
    spec = ColourSpec.of(clip.pix_fmt, clip.width, clip.height, clip.matrix or 2, clip.range or 0,
                         clip.primaries or 2, clip.transfer or 2)
    cc = vs.codec_context
    if clip.matrix is not None:
        cc.colorspace = clip.matrix
    if clip.range is not None:
        cc.color_range = clip.range
    if clip.primaries is not None:
        cc.color_primaries = clip.primaries
    if clip.transfer is not None:
        cc.color_trc = clip.transfer
    if clip.sar is not None:
        cc.sample_aspect_ratio = clip.sar
    if clip.rotation:
        vs.set_display_rotation(clip.rotation)
    if clip.display_matrix:
        vs.set_display_matrix(clip.display_matrix)
    if clip.title:
        vs.metadata["title"] = clip.title
    if clip.language:
        vs.metadata["language"] = clip.language
    if clip.options is not None:
        vs.options = clip.options
    elif clip.codec == "libx264":
        vs.options = {"preset": "ultrafast"}
    astreams = []
    for a in clip.audio:
        s = oc.add_stream(a.codec, rate=a.rate)
        s.layout = a.layout
        if a.language:
            s.metadata["language"] = a.language
        if a.title:
            s.metadata["title"] = a.title
        astreams.append(s)
    sstreams = []
    for sub in clip.subtitles:
        s = oc.add_mux_stream(sub.codec)
        s.time_base = Fraction(1, 1000)
        if sub.language:
            s.metadata["language"] = sub.language
        sstreams.append((s, sub))
    pts = clip.pts or list(range(clip.frames))
    lasting = dict(zip(pts, clip.durations or []))

    def timed(pkt):
        pkt.duration = lasting.get(pkt.pts, pkt.duration)
        return pkt

    for i, p in enumerate(pts):
        rgb = pattern(i, clip.width, clip.height, clip.seed)
        planes = encode_planes(rgb.transpose(2, 0, 1).astype(np.float32) / 255, clip.pix_fmt, spec)
        frame = planes_to_frame(planes, clip.pix_fmt, spec)
        frame.pts = p
        frame.time_base = tb
        for pkt in vs.encode(frame):
            oc.mux(timed(pkt))
    for pkt in vs.encode(None):
        oc.mux(timed(pkt))
    seconds = float((pts[-1] + 1) * tb)
    for s in astreams:
        n = s.codec_context.frame_size or 1024
        channels = s.layout.nb_channels
        t = 0
        rng = np.random.default_rng(1)
        while t < seconds * s.rate:
            data = (rng.random((1, n * channels), dtype=np.float32) - 0.5) * 0.2
            fr = av.AudioFrame.from_ndarray(data, format="flt", layout=s.layout.name)
            fr.sample_rate = s.rate
            fr.pts = t
            t += n
            for pkt in s.encode(fr):
                oc.mux(pkt)
        for pkt in s.encode(None):
            oc.mux(pkt)
    for s, sub in sstreams:
        for t0, t1, text in sub.cues:
            pkt = av.Packet(text.encode())
            pkt.pts = pkt.dts = int(round(t0 * 1000))
            pkt.duration = int(round((t1 - t0) * 1000))
            pkt.time_base = s.time_base
            pkt.stream = s
            oc.mux(pkt)
    oc.close()
    return path


@pytest.fixture
def make_clip(tmp_path):
    """``make_clip(name, **Clip fields) -> Path`` of a real encoded clip in ``tmp_path``."""
    def make(name: str = "clip.mp4", **kw) -> Path:
        return write_clip(tmp_path / name, Clip(**kw))
    return make


def probe(path: Path) -> dict:
    """Everything the faithfulness tests compare, read back with PyAV (the same libavformat ffprobe uses)."""
    out = {"streams": []}
    with av.open(str(path)) as c:
        for st in c.streams:
            d = {"index": st.index, "type": st.type, "codec": st.codec_context.name if st.codec_context else None,
                 "time_base": st.time_base, "metadata": dict(st.metadata)}
            if st.type == "video":
                cc = st.codec_context
                d.update(width=cc.width, height=cc.height, pix_fmt=cc.pix_fmt, matrix=int(cc.colorspace),
                         range=int(cc.color_range), primaries=int(cc.color_primaries), transfer=int(cc.color_trc),
                         sar=cc.sample_aspect_ratio)
            out["streams"].append(d)
        v = c.streams.video[0]
        frames = list(c.decode(v))
        out["video_times"] = [Fraction(f.pts) * f.time_base for f in frames]
        out["frames"] = len(frames)
        out["rotation"] = int(round(frames[0].rotation or 0)) % 360 if frames else 0
        out["frame_colour"] = (int(frames[0].colorspace), int(frames[0].color_range)) if frames else None
        out["frame_format"] = frames[0].format.name if frames else None
    out["packets"] = {}
    with av.open(str(path)) as c:
        for pkt in c.demux():
            if pkt.size == 0 or pkt.stream.type == "video":
                continue
            out["packets"].setdefault(pkt.stream.index, []).append(
                (Fraction(pkt.pts) * pkt.time_base if pkt.pts is not None else None, bytes(pkt)))
    return out


def ffprobe_frames(path: Path) -> int | None:
    """Frame count by ``ffprobe -count_frames`` where ffprobe is installed (a second opinion), else None."""
    exe = shutil.which("ffprobe")
    if exe is None:
        return None
    res = subprocess.run([exe, "-v", "error", "-select_streams", "v:0", "-count_frames", "-show_entries",
                          "stream=nb_read_frames", "-of", "json", str(path)], capture_output=True, text=True,
                         check=True)
    return int(json.loads(res.stdout)["streams"][0]["nb_read_frames"])


@pytest.fixture(scope="session")
def tiny_backend():
    """EDVR-tiny with seeded random weights on the torch backend (no ONNX export: fast to start)."""
    from vsr.backends import TorchOptions, open_backend

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return open_backend("random", "edvr-tiny", TorchOptions(threads=1))


@pytest.fixture
def shared_group():
    """A group other users are in that this process may give its files to (as root: any), for a folder that is
    group-writable and shared; else the test skips (a user whose groups are all their own)."""
    import pwd

    me, mine = os.geteuid(), os.getegid()
    for p in pwd.getpwall():
        if p.pw_uid != me and p.pw_gid != mine and (me == 0 or p.pw_gid in os.getgroups()):
            return p.pw_gid
    pytest.skip("no group of another user's that this user may give a folder to (needs root or a shared group)")
