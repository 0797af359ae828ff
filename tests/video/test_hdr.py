"""HDR10 kept HDR10 (issue 37 item 3): a PQ source's colour tags, mastering display and content light level come
out as they went in, in 10-bit HEVC by default (AV1 in .webm), written by the encoder itself and into the
container (mp4/mov boxes, Matroska elements: tests/video/test_hdr_container.py); what cannot follow is one
warning line."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import warnings
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from vsr.video import EncoderSettings, VideoSink, open_sink, open_source
from vsr.video.colour import ColourSpec
from vsr.video.hdr import HdrMetadata, MasteringDisplay, hdr_options
from vsr.video.side_data import entries

REPO = Path(__file__).resolve().parents[2]
TINY = ["--weights", "random", "--config", "edvr-tiny", "--threads", "1"]
MASTER = "G(13250,34500)B(7500,3000)R(34000,16000)WP(15635,16450)L(10000000,1)"
HDR10 = ["-color_primaries", "bt2020", "-color_trc", "smpte2084", "-colorspace", "bt2020nc", "-color_range", "tv"]
STATIC = ("Mastering display metadata", "Content light level metadata")


@pytest.fixture(scope="module")
def hdr10(tmp_path_factory) -> Path:
    """A real HDR10 clip as x265 writes one: 64x48, 4 frames, BT.2020 / PQ, mastering display, MaxCLL 1000/400."""
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None or "libx265" not in subprocess.run([ffmpeg, "-hide_banner", "-encoders"], capture_output=True,
                                                         text=True).stdout:
        pytest.skip("needs ffmpeg with libx265")
    path = tmp_path_factory.mktemp("hdr") / "hdr10.mkv"
    subprocess.run([ffmpeg, "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=64x48:rate=25", "-frames:v", "4",
                    "-c:v", "libx265", "-pix_fmt", "yuv420p10le", *HDR10, "-x265-params",
                    f"log-level=error:hdr10=1:master-display={MASTER}:max-cll=1000,400", str(path)], check=True)
    return path


def vsr(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vsr", *map(str, args)], capture_output=True, text=True, cwd=REPO)


def colour(path: Path) -> tuple:
    """The video stream's codec, pixel format, primaries, transfer, matrix and range, as ffprobe names them."""
    out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
                          "stream=codec_name,pix_fmt,color_primaries,color_transfer,color_space,color_range",
                          "-of", "json", str(path)], capture_output=True, text=True, check=True).stdout
    s = json.loads(out)["streams"][0]
    return tuple(s.get(k) for k in ("codec_name", "pix_fmt", "color_primaries", "color_transfer", "color_space",
                                    "color_range"))


def ffprobe_side_data(path: Path) -> list[dict]:
    """The mastering display and content light level of the first frame, as ffprobe shows them."""
    out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-read_intervals", "%+#1",
                          "-show_frames", "-show_entries", "frame=side_data_list", "-of", "json", str(path)],
                         capture_output=True, text=True, check=True).stdout
    frame = json.loads(out)["frames"][0]
    return [d for d in frame.get("side_data_list", []) if d["side_data_type"] in STATIC]


def side_data(path: Path) -> dict[str, bytes]:
    """The first frame's mastering display and content light level as PyAV decodes them (its FFmpeg reads the
    H.264 SEI, which older ffprobes do not export)."""
    with av.open(str(path)) as c:
        frame = next(c.decode(video=0))
        return {sd.type.name: bytes(sd) for sd in entries(frame)
                if sd.type.name in ("MASTERING_DISPLAY_METADATA", "CONTENT_LIGHT_LEVEL")}


def test_the_source_metadata_is_read_exactly(hdr10):
    source = open_source(hdr10)
    try:
        hdr = source.info.hdr
    finally:
        source.close()
    f = Fraction
    assert hdr == HdrMetadata("PQ", MasteringDisplay(
        red=(f(34000, 50000), f(16000, 50000)), green=(f(13250, 50000), f(34500, 50000)),
        blue=(f(7500, 50000), f(3000, 50000)), white=(f(15635, 50000), f(16450, 50000)),
        min_luminance=f(1, 10000), max_luminance=f(1000)), (1000, 400), ())
    assert hdr.mastering.x26x() == MASTER


def test_hdr10_upscales_to_10bit_hevc_with_its_metadata(hdr10, tmp_path):
    out, report = tmp_path / "out.mkv", tmp_path / "run.json"
    p = vsr("upscale", hdr10, out, *TINY, "--report", report)
    assert p.returncode == 0, p.stderr
    said = json.loads(report.read_text())["settings"]["source"]["hdr"]  # the report says what the source held
    assert said == {"transfer": "PQ", "mastering_display": MASTER, "max_cll": [1000, 400], "dynamic": []}
    assert colour(out) == ("hevc", "yuv420p10le") + colour(hdr10)[2:] == \
        ("hevc", "yuv420p10le", "bt2020", "smpte2084", "bt2020nc", "tv")
    assert ffprobe_side_data(out) == ffprobe_side_data(hdr10) and len(ffprobe_side_data(out)) == 2
    assert side_data(out) == side_data(hdr10)
    assert "cannot" not in p.stderr  # nothing to warn about


def test_hdr10_into_mp4_is_hevc_and_into_webm_av1_each_with_its_metadata(hdr10, tmp_path):
    """Sinks alone (flat frames at the source's size): the default codec each container takes."""
    source = open_source(hdr10)
    try:
        for name, codec in (("out.mp4", "hevc"), ("out.webm", "av1")):
            sink = open_sink(tmp_path / name, source.info, EncoderSettings(), scale=1)
            flat = np.full((3, 48, 64), 300, sink.plane_dtype())
            for f in source.frames():
                sink.write(flat, f.pts, f.duration)
            sink.commit()
            assert colour(tmp_path / name)[:2] == (codec, "yuv420p10le")
            assert colour(tmp_path / name)[2:] == colour(hdr10)[2:]
            if codec == "hevc":  # what Apple's players take
                with av.open(str(tmp_path / name)) as c:
                    assert c.streams.video[0].codec_tag == "hvc1"
            assert set(stream_side_data(tmp_path / name)) == set(STATIC)  # the container's copy too
            got = side_data(tmp_path / name)
            if codec == "hevc":
                assert got == side_data(hdr10)
            else:  # AV1 stores chromaticities in 1/65536, luminance in 1/256 (max) and 1/16384 (min)
                assert got["CONTENT_LIGHT_LEVEL"] == side_data(hdr10)["CONTENT_LIGHT_LEVEL"]
                m = MasteringDisplay.from_side_data(got["MASTERING_DISPLAY_METADATA"])
                assert m.max_luminance == 1000 and abs(m.min_luminance - Fraction(1, 10000)) < Fraction(1, 16384)
                assert abs(m.green[0] - Fraction(13250, 50000)) < Fraction(1, 65536)
                assert abs(m.white[1] - Fraction(16450, 50000)) < Fraction(1, 65536)
    finally:
        source.close()


def test_an_explicit_libx264_keeps_the_metadata_too(hdr10, tmp_path):
    out = tmp_path / "out.mkv"
    p = vsr("upscale", hdr10, out, *TINY, "-c", "libx264")
    assert p.returncode == 0, p.stderr
    assert colour(out) == ("h264", "yuv420p10le", "bt2020", "smpte2084", "bt2020nc", "tv")
    assert side_data(out) == side_data(hdr10)


def stream_side_data(path: Path) -> dict[str, dict]:
    """The container's own copy (the video stream's side data, not a frame's), as ffprobe reads it."""
    out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_streams", "-of", "json",
                          str(path)], capture_output=True, text=True, check=True).stdout
    return {d.pop("side_data_type"): d for d in json.loads(out)["streams"][0].get("side_data_list", [])}


def exact(d: dict) -> dict:
    """ffprobe's side data values as numbers ("17/25" and "34000/50000" alike)."""
    return {k: Fraction(v) if isinstance(v, str) else v for k, v in d.items()}


@pytest.mark.parametrize("codec,name", [("ffv1", "out.mkv"), ("prores_ks", "out.mov")])
def test_a_codec_without_hdr_messages_keeps_them_in_the_container(hdr10, tmp_path, codec, name):
    """FFV1 and ProRes carry no mastering display of their own: Matroska's Colour and QuickTime's mdcv/clli do."""
    out = tmp_path / name
    p = vsr("upscale", hdr10, out, *TINY, "-c", codec)
    assert p.returncode == 0, p.stderr
    assert "mastering display" not in p.stderr
    assert colour(out)[2:] == colour(hdr10)[2:]
    source = {d.pop("side_data_type"): exact(d) for d in ffprobe_side_data(hdr10)}  # from the source's SEI
    assert {k: exact(v) for k, v in stream_side_data(out).items()} == source
    got = side_data(out)  # what a decoder puts on each frame, from the container (PyAV's FFmpeg)
    assert MasteringDisplay.from_side_data(got["MASTERING_DISPLAY_METADATA"]).x26x() == MASTER
    assert got["CONTENT_LIGHT_LEVEL"] == side_data(hdr10)["CONTENT_LIGHT_LEVEL"]


def test_a_codec_and_container_that_cannot_hold_it_say_so_in_one_line(hdr10, tmp_path):
    out = tmp_path / "out.avi"
    p = vsr("upscale", hdr10, out, *TINY, "-c", "ffv1")
    assert p.returncode == 0, p.stderr
    said = [line for line in p.stderr.splitlines() if "mastering display" in line]
    assert len(said) == 1 and "ffv1 in this avi output cannot hold" in said[0], p.stderr
    assert stream_side_data(out) == {}


def test_dynamic_metadata_is_named_and_the_users_own_parameters_win():
    hdr = HdrMetadata("PQ", None, (1000, 400), ("HDR10+",))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        opts = hdr_options("libx265", "yuv420p10le", hdr, {"x265-params": "max-cll=500,100"})
    assert [str(w.message) for w in caught] == [
        "the source's HDR10+ dynamic metadata cannot follow: the output keeps its static PQ metadata "
        "(colour tags, mastering display, light level) only"]
    assert opts == {"x265-params": "max-cll=500,100:hdr10=1:hdr10-opt=1"}
    assert hdr_options("libx265", "yuv420p10le", None, {"crf": "20"}) == {"crf": "20"}  # SDR: nothing added
    # x265 refuses its PQ offsets (an error line of its own) on other than 10-bit 4:2:0; 8 bits are a warning
    with pytest.warns(UserWarning, match=r"^libx265 writes this PQ source in yuv420p: 8 bits band its gradients"):
        assert hdr_options("libx265", "yuv420p", HdrMetadata("PQ", None, (1000, 400)), {}) == \
            {"x265-params": "max-cll=1000,400:hdr10=1"}


def test_an_sdr_source_keeps_libx264_and_8_bits(make_clip, tmp_path):
    src = make_clip("in.mp4", width=16, height=12, frames=2, matrix=1, range=1, primaries=1, transfer=1)
    source = open_source(src)
    try:
        assert source.info.hdr is None
        sink = VideoSink(tmp_path / "out.mp4", source.info, EncoderSettings(), scale=1, probe=True)
        assert (sink.codec, sink.pix_fmt) == ("libx264", "yuv420p")
        sink.abort()
    finally:
        source.close()


def test_an_8bit_hlg_source_gets_10bit_hevc(make_clip, tmp_path):
    src = make_clip("in.mkv", width=32, height=24, frames=2, matrix=9, range=1, primaries=9, transfer=18)
    source = open_source(src)
    try:
        assert source.info.hdr == HdrMetadata("HLG")
        sink = VideoSink(tmp_path / "out.mkv", source.info, EncoderSettings(), scale=2, probe=True)
        assert (sink.codec, sink.pix_fmt) == ("libx265", "yuv420p10le")
        assert "x265-params" not in sink.encoder_options  # nothing static to write
        sink.abort()
    finally:
        source.close()
    assert ColourSpec.of("yuv420p", 16, 12, 9, 1, 9, 18).transfer == 18


def test_the_users_own_light_level_is_what_stream_and_container_both_say(hdr10, tmp_path):
    out = tmp_path / "out.mp4"
    p = vsr("upscale", hdr10, out, *TINY, "-x", "x265-params=max-cll=500,100")
    assert p.returncode == 0, p.stderr
    assert stream_side_data(out)["Content light level metadata"] == {"max_content": 500, "max_average": 100}
    got = side_data(out)  # the frames' (HEVC SEI and the container's alike)
    assert np.frombuffer(got["CONTENT_LIGHT_LEVEL"], "=u4", count=2).tolist() == [500, 100]
    assert MasteringDisplay.from_side_data(got["MASTERING_DISPLAY_METADATA"]).x26x() == MASTER  # the source's


def test_as_encoded_reads_each_encoders_own_units():
    from vsr.video.hdr import as_encoded
    src = HdrMetadata("PQ", None, (1000, 400))
    m = as_encoded("libx265", {"x265-params": f"hdr10=1:master-display={MASTER}"}, src).mastering
    assert m.x26x() == MASTER and m.min_luminance == Fraction(1, 10000)
    svt = as_encoded("libsvtav1", {"svtav1-params": "mastering-display=G(0.265,0.69)B(0.15,0.06)R(0.68,0.32)"
                                                    "WP(0.3127,0.329)L(1000,0.0001):content-light=800,200"}, src)
    assert svt.mastering.x26x() == MASTER and svt.light_level == (800, 200)
    assert as_encoded("ffv1", {}, src) is src and as_encoded("libx265", {"x265-params": "max-cll=x"}, src) == src
