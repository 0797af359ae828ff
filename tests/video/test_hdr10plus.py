"""HDR10+ (SMPTE ST 2094-40 in ITU-T T.35) follows each frame of an HEVC or AV1 PQ source into an HEVC or AV1
output, at the frame's time, its processing windows scaled with the picture; any other output says so once.

The sources are real HEVC and AV1 streams encoded by FFmpeg, each frame's access unit then given an HDR10+
message built here from the standard's syntax (:func:`hdr10plus_payload`, different values each frame).  The
references for what comes out are FFmpeg's own parsers: PyAV's decoders hand a frame's HDR10+ over as its
``DYNAMIC_HDR_PLUS`` side data (the parsed structure, compared field for field with the source's), and the
system's ffprobe prints its fields."""

from __future__ import annotations

import json
import shutil
import subprocess
import warnings
from pathlib import Path

import av
import pytest

from vsr.jobs import JobSpec
from vsr.pipeline.runner import RunnerSettings
from vsr.pipeline.upscale import upscale
from vsr.video import EncoderSettings
from vsr.video.bitstream import inject, inject_obus, metadata_obu, sei_nal
from vsr.video.hdr10plus import scaled
from vsr.video.side_data import entries

from tests.jobs.helpers import WindowBackend
from tests.jobs.test_chunks import REQUEST, run_job
from tests.video.tools import ffmpeg, ffmpeg_with, upscale_piped

HDR10 = ["-color_primaries", "bt2020", "-color_trc", "smpte2084", "-colorspace", "bt2020nc", "-color_range", "tv"]


class Bits:
    def __init__(self) -> None:
        self.value, self.size = 0, 0

    def put(self, width: int, value: int) -> "Bits":
        assert 0 <= value < 1 << width
        self.value, self.size = self.value << width | value, self.size + width
        return self

    def bytes(self) -> bytes:
        pad = -self.size % 8
        return (self.value << pad).to_bytes((self.size + pad) // 8, "big")


def hdr10plus_payload(i: int, windows: int = 1) -> bytes:
    """Frame ``i``'s HDR10+ message as CTA-861-G writes it (T.35 country, provider, then ST 2094-40's
    ``user_data_registered``): application version 1, ``windows`` processing windows, values that change per
    frame (maxscl, average maxrgb, the target display's luminance, Bezier anchors)."""
    b = Bits().put(8, 0xB5).put(16, 0x003C).put(16, 0x0001).put(8, 4).put(8, 1).put(2, windows)
    for w in range(1, windows):  # a window of the 64x64 picture: corners, an ellipse, its axes
        for v in (8 * w, 4 * w, 40 + w, 30 + w, 24 + w, 17 + w):
            b.put(16, v)
        b.put(8, 10 * w).put(16, 5 + w).put(16, 9 + w).put(16, 7 + w).put(1, w & 1)
    b.put(27, 400 + i).put(1, 0)  # targeted system display maximum luminance; no actual peak luminance
    for w in range(windows):
        for k in range(3):
            b.put(17, 1000 * (k + 1) + 10 * i + w)  # maxscl
        b.put(17, 100 + 7 * i + w)  # average maxrgb
        b.put(4, 2)
        for pct, val in ((1, 5 + i), (99, 900 + i)):
            b.put(7, pct).put(17, val)
        b.put(10, i)  # fraction bright pixels
    b.put(1, 0)  # no mastering display actual peak luminance
    for w in range(windows):
        b.put(1, 1).put(12, 100 + i).put(12, 200 + i).put(4, 3)  # tone mapping: knee point, 3 anchors
        for a in (100 + i, 500 + i, 900 + i):
            b.put(10, a)
        b.put(1, 0)  # no colour saturation mapping
    return b.bytes()


def encoded(path: Path, codec: str, frames: int, extra: tuple = ()) -> Path:
    subprocess.run([ffmpeg_with(codec), "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc2=size=64x64:rate=25", "-frames:v",
                    str(frames), "-c:v", codec, "-pix_fmt", "yuv420p10le", *HDR10, *extra, str(path)], check=True)
    return path


def with_hdr10plus(path: Path, codec: str = "libx265", frames: int = 8, windows: int = 1, extra: tuple = ()) -> Path:
    """A PQ test pattern encoded by FFmpeg (HEVC into MPEG-TS; AV1 into Matroska), each frame's access unit then
    given the HDR10+ message of its index in presentation order, written into ``path``'s container."""
    plain = encoded(path.with_name("plain" + (".ts" if codec == "libx265" else ".mkv")), codec, frames,
                    ("-x265-params", "log-level=error") + extra if codec == "libx265" else extra)
    with av.open(str(plain)) as c:
        packets = [p for p in c.demux(video=0) if p.size]
        order = {pts: i for i, pts in enumerate(sorted(p.pts for p in packets))}
        if codec != "libx265":  # AV1: temporal units in presentation order, one shown frame each
            obu = path.with_name("given.obu")  # (PyAV makes no AV1 stream from a decoder's template: FFmpeg remuxes)
            obu.write_bytes(b"".join(b"\x12\x00" + inject_obus(bytes(p), metadata_obu(hdr10plus_payload(i, windows)))
                                     for i, p in enumerate(packets)))  # (a temporal delimiter first)
            subprocess.run([ffmpeg(), "-v", "error", "-y", "-f", "obu", "-r", "25", "-i", str(obu), "-c", "copy",
                            str(path)], check=True)
            return path
        with av.open(str(path), "w") as oc:
            out = oc.add_stream_from_template(c.streams.video[0])
            for p in packets:
                q = av.Packet(inject(bytes(p), sei_nal([hdr10plus_payload(order[p.pts], windows)], "hevc"), "hevc"))
                q.pts, q.dts, q.time_base, q.is_keyframe, q.stream = p.pts, p.dts, p.time_base, p.is_keyframe, out
                oc.mux(q)
    return path


def dynamic(path: Path) -> list[tuple[float, bytes | None]]:
    """(seconds from the first frame, HDR10+ as FFmpeg's decoder parses it) of each frame."""
    with av.open(str(path)) as c:
        out = []
        for f in c.decode(video=0):
            sd = [bytes(s) for s in entries(f) if s.type.name == "DYNAMIC_HDR_PLUS"]
            out.append((float(f.pts * f.time_base), sd[0] if sd else None))
    return [(round(t - out[0][0], 4), d) for t, d in out]


def run(src: Path, dst: Path, codec: str | None = None, runner: RunnerSettings = RunnerSettings()) -> list[str]:
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        fast = "12" if dst.suffix == ".webm" else "ultrafast"  # (libsvtav1's fastest, x264's and x265's)
        upscale(src, dst, backend=WindowBackend(), encoder=EncoderSettings(codec=codec, preset=fast), runner=runner)
    return [str(w.message) for w in said if "dynamic" in str(w.message) or "HDR10+" in str(w.message)]


@pytest.mark.parametrize("suffix", [".mp4", ".ts"])
def test_every_frame_keeps_its_hdr10plus_into_hevc(tmp_path, suffix):
    """mp4 (length-prefixed NAL units) and MPEG-TS (Annex B) sources, B-frames reordered: each output frame's
    HDR10+ equals its source frame's, field for field."""
    src = with_hdr10plus(tmp_path / f"in{suffix}")
    want = dynamic(src)
    assert all(d for _, d in want) and len({d for _, d in want}) == len(want)  # FFmpeg reads each, all different
    assert run(src, tmp_path / "out.mkv") == []
    assert dynamic(tmp_path / "out.mkv") == want


def test_the_system_ffprobe_reads_the_scaled_windows(tmp_path):
    """Two processing windows: the second's corners and axes in the 4x picture, the rest as it came."""
    if shutil.which("ffprobe") is None:
        pytest.skip("needs the system's ffprobe")
    src = with_hdr10plus(tmp_path / "in.mp4", frames=3, windows=2)
    run(src, tmp_path / "out.mp4")

    def fields(path: Path) -> list[dict]:
        out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_frames", "-show_entries",
                              "frame=side_data_list", "-of", "json", str(path)], capture_output=True, text=True,
                             check=True).stdout
        return [next(s for s in f["side_data_list"] if "2094-40" in s["side_data_type"])
                for f in json.loads(out)["frames"]]
    before, after = fields(src), fields(tmp_path / "out.mp4")
    assert len(after) == 3 and [a["average_maxrgb"] for a in after] == [b["average_maxrgb"] for b in before]
    assert before[0]["num_windows"] == after[0]["num_windows"] == 2
    corners = ("window_upper_left_corner_x", "window_upper_left_corner_y", "window_lower_right_corner_x",
               "window_lower_right_corner_y", "center_of_ellipse_x", "center_of_ellipse_y",
               "semimajor_axis_internal_ellipse", "semimajor_axis_external_ellipse", "semiminor_axis_external_ellipse")
    assert [before[0][k] for k in corners] == ["8/1", "4/1", "41/1", "31/1", 25, 18, 6, 10, 8]
    assert [after[0][k] for k in corners] == ["32/1", "16/1", "167/1", "127/1", 102, 74, 24, 40, 32]
    assert after[0]["rotation_angle"] == 10 and after[0]["overlap_process_option"] == 1
    for b, a in zip(before, after):
        assert a["targeted_system_display_maximum_luminance"] == b["targeted_system_display_maximum_luminance"]
        assert a["maxscl"] == b["maxscl"] and a["bezier_curve_anchors"] == b["bezier_curve_anchors"]


def test_window_coordinates_scale_and_saturate():
    p = hdr10plus_payload(0, windows=2)
    s = scaled(p, 4)
    assert len(s) == len(p) and s[:7] == p[:7]

    def window(payload: bytes) -> list[int]:
        bits, total, at = int.from_bytes(payload, "big"), len(payload) * 8, 58
        out = []
        for width in (16, 16, 16, 16, 16, 16, 8, 16, 16, 16, 1):
            out.append(bits >> (total - at - width) & ((1 << width) - 1))
            at += width
        return out
    assert window(p) == [8, 4, 41, 31, 25, 18, 10, 6, 10, 8, 1]
    assert window(s) == [32, 16, 167, 127, 102, 74, 10, 24, 40, 32, 1]  # corners, centre (+2), axes x4
    assert int.from_bytes(s, "big") ^ int.from_bytes(p, "big") < 1 << (len(p) * 8 - 58)  # nothing before moved
    assert scaled(hdr10plus_payload(0), 4) == hdr10plus_payload(0)  # one window: the whole picture, as it came
    big = Bits().put(8, 0xB5).put(16, 0x3C).put(16, 1).put(8, 4).put(8, 1).put(2, 2)
    for v in (20000, 0, 20000, 0, 0, 0):
        big.put(16, v)
    assert window(scaled(big.put(8, 0).put(49, 0).bytes(), 4))[:3] == [65535, 0, 65535]


def test_av1_in_and_out_and_a_trimmed_run(tmp_path):
    """An AV1 source (metadata OBUs) into the default HEVC, an HEVC source into AV1 (.webm): each frame's own."""
    src = with_hdr10plus(tmp_path / "in.mkv", codec="libsvtav1", frames=6, extra=("-svtav1-params", "preset=12"))
    want = dynamic(src)
    assert all(d for _, d in want)
    assert run(src, tmp_path / "out.mp4") == []
    assert dynamic(tmp_path / "out.mp4") == want
    hevc = with_hdr10plus(tmp_path / "hevc.mp4", frames=6)
    assert run(hevc, tmp_path / "out.webm") == []
    assert dynamic(tmp_path / "out.webm") == dynamic(hevc)
    run(hevc, tmp_path / "part.mp4", runner=RunnerSettings(frames=(2, 5)))
    assert [d for _, d in dynamic(tmp_path / "part.mp4")] == [d for _, d in dynamic(hevc)][2:5]


def test_an_output_that_cannot_carry_it_says_so_once(tmp_path):
    src = with_hdr10plus(tmp_path / "in.mp4", frames=4)
    said = run(src, tmp_path / "out.mp4", codec="libx264")
    assert said == ["the source's HDR10+ dynamic metadata cannot follow: the output keeps its static PQ metadata "
                    "(colour tags, mastering display, light level) only (an HEVC or AV1 output keeps HDR10+)"]
    assert not any(d for _, d in dynamic(tmp_path / "out.mp4"))


def test_a_chunked_job_keeps_each_frames(tmp_path):
    src = with_hdr10plus(tmp_path / "in.mp4", frames=24, extra=("-x265-params", "keyint=6:min-keyint=6"))
    spec = JobSpec.from_settings(src, tmp_path / "job.mp4", REQUEST, EncoderSettings(preset="ultrafast"),
                                 RunnerSettings(scene_cuts="off"))
    assert len(run_job(spec, WindowBackend(), chunk_frames=6)) > 1
    assert dynamic(tmp_path / "job.mp4") == dynamic(src)


def test_a_piped_source_keeps_them(tmp_path):
    """Standard input decodes in one pass of its own (vsr.video.pipe_source): its packets are read there."""
    src = with_hdr10plus(tmp_path / "in.ts", frames=5)
    done = upscale_piped(src, tmp_path / "out.mkv")
    assert done.returncode == 0, done.stderr
    assert "HDR10+" not in done.stderr
    assert dynamic(tmp_path / "out.mkv") == dynamic(src)
