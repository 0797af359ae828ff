"""Dolby Vision: a profile 8 or 5 source's RPUs follow each frame into an HEVC output, the active area (level 5)
scaled with the picture, the track's configuration record (``dvvC``/``dvcC``, Matroska's BlockAdditionMapping) beside
them; every other output says in one line what does not follow.

The sources are real HEVC streams encoded by FFmpeg (B-frames reordered), each access unit then given an RPU
built here from the syntax of ETSI GS CCM 001 (:func:`rpu`: a polynomial mapping, display management with
level 1, 2, 5 and 6 blocks and a CM v4.0 set, values that change per frame).  The references for what comes
out are FFmpeg's own: PyAV's HEVC decoder parses each frame's RPU (its CRC-32 checked, any error fatal) into
``DOVI_METADATA`` side data, compared field block by field block with the source's; the system's ffprobe reads
the container's configuration record; mkvinfo (MKVToolNix) a Matroska track's mapping.  vsr's own reader
(:func:`vsr.video.rpu_.parse`) was also run over the RPUs of dovi_tool's test assets (profiles 4, 5, 7 FEL and
MEL, 8.1, 8.4, CM v2.9 and v4.0: docs/cli.md), which are not copied here."""

from __future__ import annotations

import shutil
import struct
import subprocess
import warnings
from fractions import Fraction
from pathlib import Path

import av
import pytest

from vsr.jobs import JobSpec
from vsr.pipeline.runner import RunnerSettings
from vsr.pipeline.upscale import upscale
from vsr.video import EncoderSettings, dovi
from vsr.video import rpu as rpu_
from vsr.video.bitstream import escaped, nal_length_size
from vsr.video.colour import ColourSpec
from vsr.video.side_data import entries

from tests.jobs.helpers import WindowBackend
from tests.jobs.test_chunks import REQUEST, run_job
from tests.video.tools import ffmpeg_with, upscale_piped

PQ = ["-color_primaries", "bt2020", "-color_trc", "smpte2084", "-colorspace", "bt2020nc", "-color_range", "tv"]
HLG = ["-color_primaries", "bt2020", "-color_trc", "arib-std-b67", "-colorspace", "bt2020nc", "-color_range", "tv"]
IPT = ["-color_range", "pc"]  # profile 5: full range, the rest unspecified (IPTPQc2 is none of H.273's)
ACTIVE = (0, 0, 8, 9)  # the level-5 offsets of every source frame: letterbox bars 8 and 9 pixels high


class Bits:
    def __init__(self) -> None:
        self.value, self.size = 0, 0

    def put(self, width: int, value: int) -> "Bits":
        assert 0 <= value < 1 << width, (width, value)
        self.value, self.size = self.value << width | value, self.size + width
        return self

    def s(self, width: int, value: int) -> "Bits":
        return self.put(width, value & ((1 << width) - 1))

    def ue(self, value: int) -> "Bits":
        n = (value + 1).bit_length()
        return self.put(n - 1, 0).put(n, value + 1)

    def se(self, value: int) -> "Bits":
        return self.ue(2 * value - 1 if value > 0 else -2 * value)

    def align(self) -> "Bits":
        return self.put(-self.size % 8, 0)

    def bytes(self) -> bytes:
        return self.align().value.to_bytes(self.size // 8, "big")


def _block(b: Bits, level: int, fields: list[tuple[int, int]], length: int) -> None:
    b.ue(length).put(8, level)
    for width, value in fields:
        b.s(width, value)
    b.put(length * 8 - sum(w for w, _ in fields), 0)


def rpu(profile: int, i: int, l5: tuple[int, int, int, int] = ACTIVE, enhancement: bool = False) -> bytes:
    """Frame ``i``'s RPU (a ``DOVI_RPU_BUFFER``: prefix, emulation prevention, final byte) of a ``profile`` 8 or 5
    stream (``enhancement``: 7's, a residual layer's NLQ): 10-bit base layer, 12-bit output, a linear polynomial
    per component, display management of levels 1 (per frame), 2, 5 (``l5``) and 6 (its MaxCLL per frame), then
    CM v4.0's 254 and 11."""
    b = Bits().put(6, 2).put(11, 18).put(4, 0 if profile == 5 else 1).put(4, 0).put(1, 1).put(1, 0).put(2, 0).ue(23)
    b.put(2, 1).put(1, 1 if profile == 5 else 0).ue(2).ue(2).ue(4).put(1, 0).put(3, 0)
    b.put(1, 1 if enhancement else 0).put(1, 0 if enhancement else 1)  # EL resampling, disable_residual
    b.put(1, 1).put(1, 0).ue(0).ue(0).ue(0)  # DM present, not the previous RPU's; vdr_rpu_id, colour, chroma
    for _ in range(3):
        b.ue(0).put(10, 0).put(10, 1023)  # two pivots
    if enhancement:
        b.put(3, 0).put(10, 0).put(10, 1023)  # linear dead zone NLQ, its pivots
    b.ue(0).ue(0)  # one partition
    for _ in range(3):  # polynomial, order 1, not interpolated: 0 + 1 x
        b.ue(0).ue(0).put(1, 0).se(0).put(23, 0).se(1).put(23, 0)
    if enhancement:
        for _ in range(3):
            b.put(10, 512).ue(1).put(23, 0).ue(0).put(23, 1 << 20).ue(0).put(23, 0)
    b.ue(0).ue(0).ue(1 if i == 0 else 0)
    for v in (8192, 0, 12900, 8192, -1534, -3836, 8192, 15201, 0):
        b.s(16, v)
    for v in (1 << 28, 1 << 27, 1 << 27):
        b.put(32, v)
    for v in (7222, 8771, 390, 2654, 12430, 1300, 0, 422, 15962):
        b.s(16, v)
    b.put(16, 65535).put(16, 0).put(16, 0).put(32, 0).put(5, 12).put(2, 0).put(2, 0).put(2, 1)
    b.put(12, 62).put(12, 3696).put(10, 42)
    blocks = [(1, [(12, i), (12, 2000 + i), (12, 1000 + i)], 5),
              (2, [(12, 2081), (12, 2048), (12, 2048), (12, 2048), (12, 2048), (12, 2048), (13, 0)], 11),
              (5, [(13, v) for v in l5], 7),
              (6, [(16, 1000), (16, 50), (16, 1000 + i), (16, 400)], 8)]
    b.ue(len(blocks)).align()
    for level, fields, length in blocks:
        _block(b, level, fields, length)
    b.ue(2).align()
    _block(b, 254, [(8, 0), (8, 2)], 2)
    _block(b, 11, [(8, 1), (4, 0), (1, 1), (3, 0)] + [(2, 0)] * 6, 4)
    body = b.bytes()
    return escaped(bytes([rpu_.PREFIX]) + body + rpu_.crc32_mpeg2(body).to_bytes(4, "big") + bytes([rpu_.FINAL]))


def with_dovi(path: Path, profile: int = 8, frames: int = 8, tags: list[str] = PQ, extra: tuple = (),
              enhancement: bool = False) -> Path:
    """A 64x64 test pattern encoded by FFmpeg (10-bit HEVC, B-frames), each access unit then given the RPU of its
    index in presentation order as its last NAL unit, written into ``path``'s container."""
    plain = path.with_name("plain.mkv")
    subprocess.run([ffmpeg_with("libx265"), "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc2=size=64x64:rate=25",
                    "-frames:v", str(frames), "-c:v", "libx265", "-pix_fmt", "yuv420p10le", *tags, "-x265-params",
                    "log-level=error", *extra, str(plain)], check=True)
    with av.open(str(plain)) as c, av.open(str(path), "w") as oc:
        st = c.streams.video[0]
        size = nal_length_size("hevc", st.codec_context.extradata)
        packets = [p for p in c.demux(st) if p.size]
        order = {pts: i for i, pts in enumerate(sorted(p.pts for p in packets))}
        out = oc.add_stream_from_template(st)
        for p in packets:
            nal = rpu_.nal(rpu(profile, order[p.pts], enhancement=enhancement))
            q = av.Packet(bytes(p) + len(nal).to_bytes(size, "big") + nal)
            q.pts, q.dts, q.time_base, q.is_keyframe, q.stream = p.pts, p.dts, p.time_base, p.is_keyframe, out
            oc.mux(q)
    return path


def metadata(path: Path) -> list[tuple[bytes, dict[int, tuple[int, ...]]]]:
    """Each frame's RPU as FFmpeg's decoder parses it (any error, its CRC-32 too, fails the decode): the bytes of
    its header, mapping and colour structures, and each extension block's level -> its first four 16-bit fields
    (level 1: min, max, avg PQ; 5: left, right, top, bottom; 6: its luminances, MaxCLL, MaxFALL)."""
    out = []
    with av.open(str(path)) as c:
        st = c.streams.video[0]
        st.codec_context.options = {"err_detect": "crccheck+explode"}
        for frame in c.decode(st):
            sd = [bytes(s) for s in entries(frame) if s.type.name == "DOVI_METADATA"]
            if not sd:
                out.append((b"", {}))
                continue
            data = sd[0]
            *_, at, size, count = struct.unpack_from("<5Qi", data)  # AVDOVIMetadata's offsets
            blocks = [data[at + k * size:at + (k + 1) * size] for k in range(count)]
            out.append((data[:at], {blk[0]: struct.unpack_from("<4H", blk, 4) for blk in blocks}))
    return out


def configuration(path: Path) -> str:
    """The system's ffprobe's line of the video track's Dolby Vision configuration record ("" where none)."""
    if shutil.which("ffprobe") is None:
        pytest.skip("needs the system's ffprobe")
    err = subprocess.run(["ffprobe", "-hide_banner", str(path)], capture_output=True, text=True).stderr
    return next((line.strip() for line in err.splitlines() if "DOVI configuration record" in line), "")


def run(src: Path, dst: Path, codec: str | None = None, runner: RunnerSettings = RunnerSettings(),
        scale: str | None = None) -> list[str]:
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        upscale(src, dst, backend=WindowBackend(), runner=runner,
                encoder=EncoderSettings(codec=codec, preset="ultrafast" if dst.suffix else None, scale=scale))
    return [str(w.message) for w in said if "Dolby" in str(w.message) or "dynamic" in str(w.message)]


def scaled_l5(frames, by: int = 4):
    return [(head, {**blocks, 5: tuple(v * by for v in blocks[5])}) for head, blocks in frames]


@pytest.mark.parametrize("source, output", [(".mp4", ".mkv"), (".ts", ".mp4"), (".mkv", ".ts")])
def test_each_frame_keeps_its_rpu_its_active_area_scaled(tmp_path, source, output):
    """Length-prefixed and Annex B sources and outputs: FFmpeg parses every output frame's RPU to the source
    frame's, field for field, but the letterbox offsets, x4; the container says profile 8.1 at its level."""
    src = with_dovi(tmp_path / f"in{source}")
    want = metadata(src)
    assert len(want) == 8 and len({blocks[1] for _, blocks in want}) == 8  # each frame its own level 1
    assert all(blocks[5] == ACTIVE for _, blocks in want)
    assert run(src, tmp_path / f"out{output}") == ([] if output != ".ts" else [
        "Dolby Vision 8.1 follows into this mpegts output as its RPUs alone, without the configuration record "
        "players look for first (an .mkv, .mp4 or .mov file holds it)"])
    got = metadata(tmp_path / f"out{output}")
    assert got == scaled_l5(want)
    assert [blocks[5] for _, blocks in got] == [(0, 0, 32, 36)] * 8
    if output != ".ts":  # (MPEG-TS: the RPUs only; its descriptor is written by no muxer from PyAV)
        assert configuration(tmp_path / f"out{output}") == (
            "DOVI configuration record: version: 1.0, profile: 8, level: 1, rpu flag: 1, el flag: 0, bl flag: 1, "
            "compatibility id: 1")


def test_vsr_reads_what_ffmpeg_reads():
    """vsr's reader finds the active area FFmpeg's parser finds, in the RPU it came in; one bit changed, or a
    CRC-32 that does not match, is not an RPU; scaling saturates at 13 bits and the CRC-32 is made again."""
    buffer = rpu(8, 3, l5=(1, 2, 3, 4000))
    parsed = rpu_.parse(buffer)
    assert (parsed.profile, parsed.complete, parsed.offsets()) == (8, True, [(1, 2, 3, 4000)])
    assert rpu_.scaled(parsed, 1) == buffer
    assert rpu_.parse(rpu_.scaled(parsed, 4)).offsets() == [(4, 8, 12, 8191)]
    assert rpu_.parse(rpu_.scaled(parsed, Fraction(3, 2))).offsets() == [(2, 3, 5, 6000)]  # (half up)
    assert rpu_.parse(rpu(5, 0)).profile == 5 and rpu_.parse(rpu(7, 0, enhancement=True)).profile == 7
    damaged = bytearray(buffer)
    damaged[20] ^= 0x10
    for bad in (bytes(damaged), buffer[:-6] + buffer[-5:], b"\x19\x80", bytes([0x01, 0xBE, 0x68, 0x41]) + buffer):
        with pytest.raises(rpu_.NotRpu):
            rpu_.parse(bad)
    assert rpu_.rescaled(bytes(damaged), 4) == bytes(damaged)  # (passed on as it came)


def test_the_configuration_record_and_its_level():
    """The 24-byte record as Dolby's ISO BMFF specification lays it out (compared with the bytes of a real
    stream's: profile 8, level 1, RPU and base layer, compatibility 1), and the lowest level that admits a size."""
    assert dovi.config_record(8, 1, 1) == bytes([1, 0, 0x10, 0x0D, 0x10]) + bytes(19)
    assert dovi.config_box(dovi.config_record(5, 9, 0))[4:8] == b"dvcC"
    assert dovi.config_box(dovi.config_record(8, 9, 1))[4:8] == b"dvvC"
    assert dovi.level(1280, 720, Fraction(24)) == 1 and dovi.level(1280, 720, Fraction(25)) == 2
    assert dovi.level(3840, 2160, Fraction(60000, 1001)) == 9 and dovi.level(3840, 2160, None) == 7
    assert dovi.level(7680, 4320, Fraction(24)) == 11 and dovi.level(7680, 4320, Fraction(50)) == 12
    assert dovi.level(7680, 4320, Fraction(120)) == 13
    assert dovi.level(15360, 8640, Fraction(24)) is None


def test_what_follows_where():
    pq, hlg, sdr = (ColourSpec(9, 1, 9, 16), ColourSpec(9, 1, 9, 18), ColourSpec(1, 1, 1, 1))
    size, rate = (1920, 1080), Fraction(25)
    assert dovi.carried(None, "h264", "yuv420p", sdr, size, rate) == (None, None)
    assert dovi.carried(8, "hevc", "yuv420p10le", pq, size, rate) == (dovi.Output(8, 4, 1), None)
    assert dovi.carried(8, "hevc", "p010le", hlg, size, rate)[0].describe() == "8.4"
    assert dovi.carried(8, "hevc", "yuv420p10le", sdr, size, rate)[0].describe() == "8.2"
    assert dovi.carried(5, "hevc", "yuv420p10le", sdr, size, rate)[0] == dovi.Output(5, 4, 0)
    out, said = dovi.carried(8, "hevc", "yuv420p10le", pq, (15360, 8640), rate)
    assert out == dovi.Output(8, 13, 1) and said.startswith("Dolby Vision: 15360x8640 at 25 fps is beyond")
    assert dovi.carried(8, "h264", "yuv420p10le", pq, size, rate) == (None, (
        "the source's Dolby Vision (profile 8) cannot follow into h264 in yuv420p10le (it needs 10-bit 4:2:0 HEVC: "
        "libx265, a video output's default for it): the output is its base layer alone"))
    assert "10-bit 4:2:0" in dovi.carried(8, "hevc", "yuv444p10le", pq, size, rate)[1]
    assert "other than HDR10, HLG or SDR" in dovi.carried(8, "hevc", "yuv420p10le", ColourSpec(9, 1, 1, 16), size,
                                                          rate)[1]
    assert "deinterlaced" in dovi.carried(8, "hevc", "yuv420p10le", pq, size, rate, deinterlaced=True)[1]
    assert dovi.carried(7, "hevc", "yuv420p10le", pq, size, rate)[1] == (
        "the source's Dolby Vision (profile 7) has an enhancement layer, which is not decoded: the output is its "
        "base layer alone")
    assert "no player shows right" in dovi.carried(5, "h264", "yuv420p10le", sdr, size, rate)[1]
    assert "(profile unknown) has RPUs of a kind" in dovi.carried(0, "hevc", "yuv420p10le", pq, size, rate)[1]


def test_profile_5_keeps_its_entry_type_tags_and_range(tmp_path):
    """IPTPQc2: into mp4 a ``dvh1`` sample entry (no HEVC decoder alone shows it right), full range, the colour
    tags unspecified as they came; Matroska's track maps its record (mkvinfo reads it)."""
    src = with_dovi(tmp_path / "in.mkv", profile=5, tags=IPT)
    assert run(src, tmp_path / "out.mp4") == []
    assert metadata(tmp_path / "out.mp4") == scaled_l5(metadata(src))
    assert "profile: 5, level: 1" in configuration(tmp_path / "out.mp4")
    assert configuration(tmp_path / "out.mp4").endswith("compatibility id: 0")
    with av.open(str(tmp_path / "out.mp4")) as c:
        cc = c.streams.video[0].codec_context
        assert c.streams.video[0].codec_tag == "dvh1"
        assert (int(cc.color_range), int(cc.colorspace), int(cc.color_primaries), int(cc.color_trc)) == (2, 2, 2, 2)
    assert run(src, tmp_path / "out.mkv") == []
    if shutil.which("mkvinfo") is not None:
        shown = subprocess.run(["mkvinfo", str(tmp_path / "out.mkv")], capture_output=True, text=True).stdout
        assert "Block addition ID type: 1685480259 (dvcC)" in shown
        assert "Block addition ID name: Dolby Vision configuration" in shown


def test_hlg_is_profile_8_4_and_a_half_size_halves_the_area(tmp_path):
    src = with_dovi(tmp_path / "in.mp4", tags=HLG, frames=4)
    assert run(src, tmp_path / "out.mkv", scale="2") == []
    assert configuration(tmp_path / "out.mkv").endswith("compatibility id: 4")
    assert metadata(tmp_path / "out.mkv") == scaled_l5(metadata(src), 2)
    report = upscale(src, tmp_path / "r.mp4", backend=WindowBackend(), encoder=EncoderSettings(preset="ultrafast"))
    assert report.settings["source"]["dolby_vision"] == 8
    assert report.settings["dolby_vision"] == "8.4" and report.encoder_line().endswith(", Dolby Vision 8.4")


def test_an_output_that_cannot_carry_them_says_so_once(tmp_path):
    src = with_dovi(tmp_path / "in.mp4", frames=4)
    said = run(src, tmp_path / "out.mp4", codec="libx264")
    assert said == ["the source's Dolby Vision (profile 8) cannot follow into h264 in yuv420p10le (it needs 10-bit "
                    "4:2:0 HEVC: libx265, a video output's default for it): the output is its base layer alone"]
    assert metadata(tmp_path / "out.mp4") == [(b"", {})] * 4 and configuration(tmp_path / "out.mp4") == ""
    folder = tmp_path / "frames"
    assert len(run(src, folder)) == 1 and len(list(folder.glob("*.png"))) == 4
    seven = with_dovi(tmp_path / "seven.mkv", profile=7, frames=3, enhancement=True)
    assert run(seven, tmp_path / "seven_out.mkv") == [
        "the source's Dolby Vision (profile 7) has an enhancement layer, which is not decoded: the output is its base "
        "layer alone"]
    assert metadata(tmp_path / "seven_out.mkv") == [(b"", {})] * 3


def test_a_chunked_job_and_a_trimmed_run_keep_each_frames(tmp_path):
    src = with_dovi(tmp_path / "in.mp4", frames=24, extra=("-x265-params", "log-level=error:keyint=6:min-keyint=6"))
    spec = JobSpec.from_settings(src, tmp_path / "job.mp4", REQUEST, EncoderSettings(preset="ultrafast"),
                                 RunnerSettings(scene_cuts="off"))
    assert len(run_job(spec, WindowBackend(), chunk_frames=6)) > 1
    assert metadata(tmp_path / "job.mp4") == scaled_l5(metadata(src))
    assert "profile: 8" in configuration(tmp_path / "job.mp4")
    run(src, tmp_path / "part.mkv", runner=RunnerSettings(frames=(5, 11)))
    assert metadata(tmp_path / "part.mkv") == scaled_l5(metadata(src))[5:11]


def test_a_piped_source_keeps_them(tmp_path):
    done = upscale_piped(with_dovi(tmp_path / "in.ts", frames=5), tmp_path / "out.mkv")
    assert done.returncode == 0, done.stderr
    assert "Dolby" not in done.stderr
    assert metadata(tmp_path / "out.mkv") == scaled_l5(metadata(tmp_path / "in.ts"))
    done = upscale_piped(tmp_path / "in.ts", "-", "--format", "matroska")  # (on standard output: no record, said)
    assert done.returncode == 0 and "Dolby Vision 8.1 follows into a stream as its RPUs alone" in done.stderr
