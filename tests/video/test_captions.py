"""Closed captions in the video stream (ATSC A/53: CEA-608/708 bytes in an SEI message a frame) follow their frames
into an H.264, HEVC or AV1 output (AV1: as metadata OBUs), in any container, trimmed and chunked runs and
deinterlaced sources included; any other output says once that they are dropped.  The reference for the bytes written is FFmpeg's own decoder, which
hands a frame's captions over as its ``A53_CC`` side data, and the system's ffprobe, which names them."""

from __future__ import annotations

import re
import shutil
import subprocess
import warnings
from pathlib import Path

import av
import pytest

from vsr.jobs import JobSpec
from vsr.pipeline.runner import RunnerSettings
from vsr.pipeline.upscale import upscale
from vsr.video import EncoderSettings, open_source
from vsr.video.bitstream import inject, sei_nal
from vsr.video.captions import a53_of, ga94

from tests.jobs.helpers import WindowBackend
from tests.jobs.test_chunks import REQUEST, run_job
from tests.video.tools import ffmpeg


def parity(c: int) -> int:
    """A CEA-608 byte: 7 bits and odd parity."""
    c &= 0x7F
    return c | (0x80 if bin(c).count("1") % 2 == 0 else 0)


def cc_data(i: int) -> bytes:
    """Frame i's captions: two field-1 CEA-608 pairs spelling F000, F001, ... (0xFC: marker, valid, field 1)."""
    t = f"F{i:03d}"
    return bytes([0xFC, parity(ord(t[0])), parity(ord(t[1])), 0xFC, parity(ord(t[2])), parity(ord(t[3]))])


def cc_sei(cc: bytes, codec: str) -> bytes:
    """The SEI NAL unit of the captions ``cc``, as an encoder writes it."""
    return sei_nal(ga94(cc), codec)


def captioned(path: Path, codec: str = "libx264", frames: int = 24, extra: tuple = (), cc=cc_data,
              rate: str = "25") -> Path:
    """A test pattern encoded by FFmpeg into MPEG-TS (Annex B), each frame's access unit then given the SEI of
    ``cc`` (:func:`cc_data`) of its index in presentation order."""
    plain = path.with_name("plain.ts")
    subprocess.run([ffmpeg(), "-v", "error", "-y", "-f", "lavfi", "-i", f"testsrc2=size=64x48:rate={rate}", "-frames:v",
                    str(frames), *extra, "-c:v", codec, "-pix_fmt", "yuv420p", str(plain)], check=True)
    with av.open(str(plain)) as c:
        packets = [p for p in c.demux(video=0) if p.size]
        order = {pts: i for i, pts in enumerate(sorted(p.pts for p in packets))}
        name = c.streams.video[0].codec_context.name
        with av.open(str(path), "w") as oc:
            out = oc.add_stream_from_template(c.streams.video[0])
            for p in packets:
                q = av.Packet(inject(bytes(p), cc_sei(cc(order[p.pts]), name), name))
                q.pts, q.dts, q.time_base, q.is_keyframe, q.stream = p.pts, p.dts, p.time_base, p.is_keyframe, out
                oc.mux(q)
    return path


def captions(path: Path) -> list[tuple[float, bytes | None]]:
    """(seconds, caption bytes) of each frame as FFmpeg's decoder gives it."""
    with av.open(str(path)) as c:
        return [(round(float(f.pts * f.time_base), 4), a53_of(f)) for f in c.decode(video=0)]


def run(src: Path, dst: Path, runner: RunnerSettings = RunnerSettings(), codec: str | None = None) -> list[str]:
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        upscale(src, dst, backend=WindowBackend(), encoder=EncoderSettings(codec=codec), runner=runner)
    return [str(w.message) for w in said if "caption" in str(w.message)]


def test_the_sei_written_is_read_back_by_ffmpeg_for_h264_and_hevc(tmp_path):
    for codec in ("libx264", "libx265"):
        got = captions(captioned(tmp_path / f"{codec}.ts", codec, frames=12))
        assert [cc for _, cc in got] == [cc_data(i) for i in range(12)], codec


def test_more_than_31_caption_packets_a_frame_go_in_as_several_messages_read_back_as_one(tmp_path):
    """cc_count has 5 bits: 40 packets (a field pair's, 60i with CEA-708) go into two messages of one SEI, which
    FFmpeg's decoder joins again."""
    def forty(i: int) -> bytes:
        return b"".join(cc_data(40 * i + k) for k in range(20))
    got = captions(captioned(tmp_path / "in.ts", frames=6, cc=forty))
    assert [cc for _, cc in got] == [forty(i) for i in range(6)]
    with pytest.raises(ValueError):
        ga94(b"\xfc\x80")


def test_emulation_prevention_and_both_nal_framings():
    """Caption bytes 00 00 01 / 00 00 00 in the payload get their 0x03; a NAL goes before the first slice, after
    the parameter sets, in Annex B and in length-prefixed access units."""
    cc = bytes([0xFC, 0x00, 0x00, 0x00, 0x00, 0x01])
    nal = cc_sei(cc, "h264")
    assert not re.search(b"\x00\x00[\x00-\x02]", nal)
    assert cc in nal[1:].replace(b"\x00\x00\x03", b"\x00\x00")  # (what a reader takes out again)
    sps, pps, idr = b"\x67\x64\x00\x0a", b"\x68\xee", b"\x65\x88\x84"
    annexb = b"\x00\x00\x00\x01" + sps + b"\x00\x00\x01" + pps + b"\x00\x00\x00\x01" + idr
    assert inject(annexb, nal, "h264") == (b"\x00\x00\x00\x01" + sps + b"\x00\x00\x01" + pps + b"\x00\x00\x00\x01"
                                           + nal + b"\x00\x00\x00\x01" + idr)
    avcc = b"".join(len(n).to_bytes(4, "big") + n for n in (sps, pps, idr))
    assert inject(avcc, nal, "h264", 4) == b"".join(len(n).to_bytes(4, "big") + n for n in (sps, pps, nal, idr))
    hevc_slice = bytes([19 << 1, 1, 0xAF])  # IDR_W_RADL
    vps = bytes([32 << 1, 1, 0x0C])
    assert inject(vps + b"", cc_sei(b"\xfc\x80\x80", "hevc"), "hevc", None).endswith(cc_sei(b"\xfc\x80\x80", "hevc"))
    framed = b"".join(len(n).to_bytes(4, "big") + n for n in (vps, hevc_slice))
    hnal = cc_sei(b"\xfc\x80\x80", "hevc")
    assert hnal[:2] == bytes([39 << 1, 1])
    assert inject(framed, hnal, "hevc", 4) == b"".join(len(n).to_bytes(4, "big") + n for n in (vps, hnal, hevc_slice))


@pytest.mark.parametrize("suffix, codec", [(".mp4", None), (".mkv", "libx265"), (".ts", None), (".webm", None)])
def test_every_frame_keeps_its_captions_at_its_time(tmp_path, suffix, codec):
    src = captioned(tmp_path / "in.ts")
    want = captions(src)
    assert all(cc for _, cc in want)
    assert run(src, tmp_path / f"out{suffix}", codec=codec) == []
    got = captions(tmp_path / f"out{suffix}")
    assert [(round(t - got[0][0], 4), cc) for t, cc in got] == [(round(t - want[0][0], 4), cc) for t, cc in want]
    if codec is None and suffix != ".webm" and shutil.which("ffprobe"):  # the system's ffprobe names them in H.264
        probe = subprocess.run(["ffprobe", "-hide_banner", "-i", str(tmp_path / f"out{suffix}")], capture_output=True,
                               text=True)
        assert "Closed Captions" in probe.stderr


def test_a_trimmed_run_keeps_its_frames_captions(tmp_path):
    src = captioned(tmp_path / "in.ts")
    run(src, tmp_path / "out.mp4", RunnerSettings(frames=(10, 20)))
    assert [cc for _, cc in captions(tmp_path / "out.mp4")] == [cc_data(i) for i in range(10, 20)]


def test_a_codec_that_cannot_carry_them_says_so_once_naming_the_first_frame(tmp_path):
    src = tmp_path / "in.ts"
    captioned(src, frames=12)
    said = run(src, tmp_path / "out.webm", codec="libvpx-vp9")
    assert said == ["the source's closed captions (ATSC A/53 in its video, from frame 0) cannot follow into vp9: "
                    "dropped (an H.264, HEVC or AV1 output keeps them)"]
    assert not any(cc for _, cc in captions(tmp_path / "out.webm"))
    assert len(run(src, tmp_path / "frames")) == 1  # PNG frames: said too
    assert run(tmp_path / "plain.ts", tmp_path / "none.webm", codec="libvpx-vp9") == []  # (the source before them)


def test_a_chunked_job_and_a_deinterlaced_source_keep_them(tmp_path):
    src = captioned(tmp_path / "in.ts", frames=30, extra=("-flags", "+ilme+ildct", "-x264-params", "tff=1:keyint=10",
                                                          "-vf", "tinterlace=mode=interleave_top,setfield=tff"))
    want = [cc for _, cc in captions(src)]
    assert len(want) == 30 and all(want)
    runner = RunnerSettings(scene_cuts="off")
    spec = JobSpec.from_settings(src, tmp_path / "job.mp4", REQUEST, EncoderSettings(), runner)
    run_job(spec, WindowBackend())
    assert [cc for _, cc in captions(tmp_path / "job.mp4")] == want
    source = open_source(src)
    try:
        assert source.info.deinterlaced  # (bwdif, which passes each frame's side data on)
    finally:
        source.close()


def test_an_mpeg2_sources_captions_go_into_h264(tmp_path):
    """MPEG-2 (DVB/ATSC broadcast, DVD) holds them in its pictures' user data: FFmpeg's own encoder writes them
    there from the captioned H.264 (-a53cc), vsr's output has them again, frame for frame."""
    mpeg2 = tmp_path / "in.mpg"
    subprocess.run([ffmpeg(), "-v", "error", "-i", str(captioned(tmp_path / "in.ts", frames=12)), "-c:v", "mpeg2video",
                    "-a53cc", "1", str(mpeg2)], check=True)
    want = [cc for _, cc in captions(mpeg2)]
    assert want == [cc_data(i) for i in range(12)]
    run(mpeg2, tmp_path / "out.mp4")
    assert [cc for _, cc in captions(tmp_path / "out.mp4")] == want


def test_fields_made_frames_carry_each_frames_captions_once(tmp_path):
    """--deinterlace double: a frame's captions go with its first field, none with its second (the deinterlacer
    gives both its side data: every character would come twice)."""
    src = captioned(tmp_path / "in.ts", frames=8, extra=("-flags", "+ilme+ildct", "-x264-params", "tff=1", "-vf",
                                                          "tinterlace=mode=interleave_top,setfield=tff"))
    want = [cc for _, cc in captions(src)]
    run(src, tmp_path / "out.mp4", RunnerSettings(deinterlace="double"))
    got = [cc for _, cc in captions(tmp_path / "out.mp4")]
    assert len(got) == 2 * len(want) and got[0::2] == want and not any(got[1::2])
