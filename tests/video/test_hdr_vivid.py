"""HDR Vivid (CUVA 005 dynamic metadata, in ITU-T T.35 registered by China) follows each frame of an HEVC PQ or
HLG source into an HEVC output, beside the frame's HDR10+ where it has both; an AV1 output says so in one line.

The sources are real HEVC streams encoded by FFmpeg (B-frames reordered), each frame's access unit then given an
SEI built here from the syntax FFmpeg's parser reads (:func:`vivid_payload`, different values each frame).  The
reference for what comes out is FFmpeg's own: PyAV's HEVC decoder hands a frame's HDR Vivid over as its
``DYNAMIC_HDR_VIVID`` side data (the parsed structure), compared with the source frame's."""

from __future__ import annotations

import subprocess
import warnings
from pathlib import Path

import av
import pytest

from vsr.pipeline.upscale import upscale
from vsr.video import EncoderSettings
from vsr.video.bitstream import inject, sei_nal
from vsr.video.hdr10plus import VIVID_HEAD, found, is_vivid
from vsr.video.side_data import entries

from tests.jobs.helpers import WindowBackend
from tests.video.test_hdr10plus import Bits, hdr10plus_payload
from tests.video.tools import ffmpeg_with

TAGS = {"pq": ["-color_primaries", "bt2020", "-color_trc", "smpte2084", "-colorspace", "bt2020nc"],
        "hlg": ["-color_primaries", "bt2020", "-color_trc", "arib-std-b67", "-colorspace", "bt2020nc"]}


def vivid_payload(i: int) -> bytes:
    """Frame ``i``'s HDR Vivid message: T.35 China, CUVA, provider-oriented code 5, system start code 1; the
    maxRGB statistics (per frame), one tone-mapping parameter set with its base curve, two saturation gains."""
    b = Bits()
    for v in VIVID_HEAD:
        b.put(8, v)
    for v in (10 + i, 400 + i, 30, 3000 - i):  # minimum, average, variance, maximum maxRGB
        b.put(12, v)
    b.put(1, 1).put(1, 0)  # tone mapping, one parameter set
    b.put(12, 2000 + i).put(1, 1)  # targeted display maximum luminance; base curve
    b.put(14, 8000).put(6, 24).put(10, 600 + i).put(10, 100).put(6, 12).put(2, 1).put(2, 1).put(4, 2)
    b.put(3, 0).put(7, 5).put(1, 0)  # delta mode and value, no three-spline
    b.put(1, 1).put(3, 2).put(8, 128 + i).put(8, 100)  # colour saturation: two gains
    return b.bytes()


def with_vivid(path: Path, transfer: str, frames: int = 6, hdr10plus: bool = False) -> Path:
    plain = path.with_name("plain.ts")
    subprocess.run([ffmpeg_with("libx265"), "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc2=size=64x64:rate=25",
                    "-frames:v", str(frames), "-c:v", "libx265", "-pix_fmt", "yuv420p10le", *TAGS[transfer],
                    "-color_range", "tv", "-x265-params", "log-level=error", str(plain)], check=True)
    with av.open(str(plain)) as c, av.open(str(path), "w") as oc:
        packets = [p for p in c.demux(video=0) if p.size]
        order = {pts: i for i, pts in enumerate(sorted(p.pts for p in packets))}
        out = oc.add_stream_from_template(c.streams.video[0])
        for p in packets:
            i = order[p.pts]
            messages = [vivid_payload(i)] + ([hdr10plus_payload(i)] if hdr10plus else [])
            q = av.Packet(inject(bytes(p), sei_nal(messages, "hevc"), "hevc"))
            q.pts, q.dts, q.time_base, q.is_keyframe, q.stream = p.pts, p.dts, p.time_base, p.is_keyframe, out
            oc.mux(q)
    return path


def dynamic(path: Path) -> list[tuple[bytes | None, bytes | None]]:
    """Each frame's (HDR Vivid, HDR10+) as FFmpeg's decoder parses them."""
    out = []
    with av.open(str(path)) as c:
        for f in c.decode(video=0):
            sd = {s.type.name: bytes(s) for s in entries(f)}
            out.append((sd.get("DYNAMIC_HDR_VIVID"), sd.get("DYNAMIC_HDR_PLUS")))
    return out


def run(src: Path, dst: Path) -> list[str]:
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        fast = "12" if dst.suffix == ".webm" else "ultrafast"
        upscale(src, dst, backend=WindowBackend(), encoder=EncoderSettings(preset=fast))
    return [str(w.message) for w in said if "dynamic" in str(w.message)]


@pytest.mark.parametrize("transfer, suffix", [("pq", ".mkv"), ("hlg", ".mp4")])
def test_each_frame_keeps_its_hdr_vivid(tmp_path, transfer, suffix):
    src = with_vivid(tmp_path / "in.mkv", transfer)
    want = dynamic(src)
    assert all(v for v, _ in want) and len({v for v, _ in want}) == len(want)  # FFmpeg reads each, all different
    assert run(src, tmp_path / f"out{suffix}") == []
    assert dynamic(tmp_path / f"out{suffix}") == want


def test_with_hdr10plus_both_follow_and_av1_keeps_hdr10plus_only(tmp_path):
    src = with_vivid(tmp_path / "in.mp4", "pq", frames=4, hdr10plus=True)
    want = dynamic(src)
    assert all(v and p for v, p in want)
    assert run(src, tmp_path / "out.mkv") == []
    assert dynamic(tmp_path / "out.mkv") == want
    assert run(src, tmp_path / "out.webm") == [
        "the source's HDR Vivid dynamic metadata cannot follow: the output keeps its static PQ metadata (colour tags, "
        "mastering display, light level) and HDR10+ only (an HEVC output keeps HDR Vivid)"]
    assert dynamic(tmp_path / "out.webm") == [(None, p) for _, p in want]


def test_the_reader_takes_the_first_of_each_kind():
    vivid, plus = vivid_payload(0), hdr10plus_payload(0)
    assert is_vivid(vivid) and not is_vivid(plus)
    au = inject(b"\x00\x00\x00\x01\x02\x01\xaa", sei_nal([vivid_payload(1), plus, vivid, plus], "hevc"), "hevc")
    assert found(au, "hevc", None) == (vivid_payload(1), plus)
    assert found(b"\x00\x00\x00\x01\x02\x01\xaa", "hevc", None) is None
