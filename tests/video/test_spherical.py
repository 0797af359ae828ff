"""A 360 video stays a 360 video (vsr.video.spherical): its projection (equirectangular, tiled, cubemap; yaw,
pitch, roll) and stereo layout go into .mp4/.mov (Spherical Video V2 ``st3d``/``sv3d``) and .mkv/.webm
(``StereoMode``, ``Projection``) outputs, a cubemap's padding scaled with the picture; what a container cannot
hold is said in one line.

The sources are made by other writers: MKVToolNix's ``mkvmerge`` (Matroska), and the system's FFmpeg, whose mov
muxer turns them into mp4 boxes.  What comes out is read back by FFmpeg's demuxers (PyAV's, as frame side data
compared with the source's; the system's ffprobe) and by ``mkvinfo`` / ExifTool where installed."""

from __future__ import annotations

import json
import shutil
import subprocess
import warnings
from fractions import Fraction
from pathlib import Path

import av
import pytest

from vsr.jobs import JobSpec
from vsr.pipeline.runner import RunnerSettings
from vsr.pipeline.upscale import upscale
from vsr.video import EncoderSettings, open_source
from vsr.video.spherical import CUBEMAP, EQUIRECT, EQUIRECT_TILE
from vsr.video.side_data import entries

from tests.jobs.helpers import WindowBackend
from tests.jobs.test_chunks import REQUEST, run_job
from tests.video.tools import ffmpeg


def mkvmerge(path: Path, *options: str, frames: int = 4) -> Path:
    """A 64x32 H.264 clip by FFmpeg, remuxed by mkvmerge with ``options`` on its video track (id 0)."""
    if shutil.which("mkvmerge") is None:
        pytest.skip("needs MKVToolNix's mkvmerge (Debian's mkvtoolnix) to write the 360 sources")
    plain = path.with_name("plain.mkv")
    subprocess.run([ffmpeg(), "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc2=size=64x32:rate=25", "-frames:v",
                    str(frames), "-c:v", "libx264", "-pix_fmt", "yuv420p", str(plain)], check=True)
    subprocess.run(["mkvmerge", "-q", "-o", str(path), *options, str(plain)], check=True)
    return path


EQUIRECT_TB = ("--projection-type", "0:1", "--projection-pose-yaw", "0:10", "--projection-pose-pitch", "0:-5",
               "--projection-pose-roll", "0:2.5", "--stereo-mode", "0:top_bottom_left_first")


def view(path: Path) -> dict:
    """The SPHERICAL and STEREO3D side data of the first frame as FFmpeg's demuxer and decoder give them."""
    with av.open(str(path)) as c:
        frame = next(c.decode(video=0))
    return {s.type.name: bytes(s) for s in entries(frame) if s.type.name in ("SPHERICAL", "STEREO3D")}


def run(src: Path, dst: Path, report: list | None = None, **encoder) -> list[str]:
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        done = upscale(src, dst, backend=WindowBackend(), encoder=EncoderSettings(**encoder))
    if report is not None:
        report.append(done.settings["source"])
    return [str(w.message) for w in said if "projection" in str(w.message) or "stereo" in str(w.message)]


def ffprobe_view(path: Path) -> list[dict]:
    out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_streams", "-of", "json",
                          str(path)], capture_output=True, text=True, check=True).stdout
    return json.loads(out)["streams"][0].get("side_data_list", [])


@pytest.mark.parametrize("suffix", [".mkv", ".mp4", ".mov", ".webm"])
def test_an_equirectangular_stereo_source_keeps_its_view(tmp_path, suffix):
    src = mkvmerge(tmp_path / "in.mkv", *EQUIRECT_TB)
    want = view(src)
    assert set(want) == {"SPHERICAL", "STEREO3D"}
    said: list = []
    assert run(src, tmp_path / f"out{suffix}", said, preset="12" if suffix == ".webm" else "ultrafast") == []
    assert view(tmp_path / f"out{suffix}") == want
    assert said[0]["view"]["stereo"] == "top and bottom"  # (the run's report says what the source held)
    source = open_source(tmp_path / f"out{suffix}")
    try:
        assert source.info.width == 256 and source.info.view.spherical.projection == EQUIRECT
        assert source.info.view.describe() == {"projection": {"projection": "equirectangular", "yaw": 10.0,
                                                              "pitch": -5.0, "roll": 2.5}, "stereo": "top and bottom"}
    finally:
        source.close()
    if shutil.which("ffprobe") and suffix != ".mov":  # the system's ffprobe (5.1) reads sv3d in mp4 and Matroska's
        kinds = {d["side_data_type"]: d for d in ffprobe_view(tmp_path / f"out{suffix}")}
        assert kinds["Spherical Mapping"]["projection"] == "equirectangular" and kinds["Spherical Mapping"]["yaw"] == 10
        assert kinds["Stereo 3D"]["type"] == "top and bottom"
    if suffix == ".mkv" and shutil.which("mkvinfo"):
        info = subprocess.run(["mkvinfo", str(tmp_path / "out.mkv")], capture_output=True, text=True).stdout
        assert "Projection type: 1 (equirectangular)" in info and "Stereo mode: 3" in info
    if suffix == ".mp4" and shutil.which("exiftool"):
        info = subprocess.run(["exiftool", "-a", str(tmp_path / "out.mp4")], capture_output=True, text=True).stdout
        assert "Stereoscopic Top-Bottom" in info and "Pose Yaw Degrees                : 10" in info


def test_a_cubemaps_padding_scales_and_tiled_bounds_stay(tmp_path):
    """Padding is pixels (x4 in the 4x picture); tile bounds are fractions of the picture (as they came)."""
    cube = mkvmerge(tmp_path / "cube.mkv", "--projection-type", "0:2", "--projection-private", "0:000000000000000000000003")
    run(cube, tmp_path / "cube.mp4", preset="ultrafast")
    got = view(tmp_path / "cube.mp4")["SPHERICAL"]
    want = view(cube)["SPHERICAL"]
    assert int.from_bytes(want[:4], "little") == CUBEMAP and int.from_bytes(want[32:36], "little") == 3
    assert got[:32] == want[:32] and int.from_bytes(got[32:36], "little") == 12
    bounds = "0:00000000" + "10000000" + "20000000" + "30000000" + "40000000"  # top, bottom, left, right
    tile = mkvmerge(tmp_path / "tile.mkv", "--projection-type", "0:1", "--projection-private", bounds)
    run(tile, tmp_path / "tile.mkv.out.mkv", preset="ultrafast")
    assert view(tmp_path / "tile.mkv.out.mkv") == view(tile)
    assert int.from_bytes(view(tile)["SPHERICAL"][:4], "little") == EQUIRECT_TILE


def test_an_mp4_source_by_ffmpegs_muxer(tmp_path):
    """sv3d and st3d as FFmpeg's mov muxer writes them (-strict unofficial), read by vsr's source."""
    mp4 = tmp_path / "in.mp4"
    subprocess.run([ffmpeg(), "-v", "error", "-i", str(mkvmerge(tmp_path / "in.mkv", *EQUIRECT_TB)), "-c", "copy",
                    "-strict", "unofficial", str(mp4)], check=True)
    if not view(mp4):
        pytest.skip("this FFmpeg's mov muxer writes no sv3d")
    assert run(mp4, tmp_path / "out.mkv", preset="ultrafast") == []
    assert view(tmp_path / "out.mkv") == view(mp4)


def test_what_a_container_cannot_hold_is_said_once(tmp_path):
    src = mkvmerge(tmp_path / "in.mkv", *EQUIRECT_TB)
    assert run(src, tmp_path / "out.ts", preset="ultrafast") == [
        "the source's equirectangular projection and top and bottom stereo layout cannot be written into this "
        "mpegts output: players will show the pictures flat (.mp4, .mov, .mkv and .webm keep it)"]
    assert view(tmp_path / "out.ts") == {}
    right_first = mkvmerge(tmp_path / "rf.mkv", "--projection-type", "0:1", "--stereo-mode", "0:11")
    assert run(right_first, tmp_path / "rf.mp4", preset="ultrafast") == [
        "the source's side by side (right eye first) stereo layout cannot be written into this mp4 output: dropped"]
    assert set(view(tmp_path / "rf.mp4")) == {"SPHERICAL"}
    assert run(right_first, tmp_path / "rf.out.mkv", preset="ultrafast") == []  # (Matroska's StereoMode 11 says it)
    assert view(tmp_path / "rf.out.mkv") == view(right_first)


def test_a_chunked_job_keeps_it(tmp_path):
    src = mkvmerge(tmp_path / "in.mkv", *EQUIRECT_TB, frames=20)
    spec = JobSpec.from_settings(src, tmp_path / "job.mp4", REQUEST, EncoderSettings(preset="ultrafast"),
                                 RunnerSettings(scene_cuts="off"))
    run_job(spec, WindowBackend(), chunk_frames=5)
    assert view(tmp_path / "job.mp4") == view(src)


V1_XML = ('<?xml version="1.0"?><rdf:SphericalVideo xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" '
          'xmlns:GSpherical="http://ns.google.com/videos/1.0/spherical/"><GSpherical:Spherical>true'
          '</GSpherical:Spherical><GSpherical:Stitched>true</GSpherical:Stitched><GSpherical:StitchingSoftware>'
          'test</GSpherical:StitchingSoftware><GSpherical:ProjectionType>equirectangular</GSpherical:ProjectionType>'
          '<GSpherical:StereoMode>left-right</GSpherical:StereoMode><GSpherical:InitialViewHeadingDegrees>90'
          '</GSpherical:InitialViewHeadingDegrees></rdf:SphericalVideo>')


def with_v1(src: Path, dst: Path) -> Path:
    """``src`` (an mp4 FFmpeg wrote, its ``moov`` last) with Google's Spherical Video V1 XML in a ``uuid`` box at
    the end of its (only) ``trak``, as the Spatial Media Metadata Injector writes it."""
    import struct

    data = bytearray(src.read_bytes())
    uuid = bytes.fromhex("ffcc8263f8554a938814587a02521fdd")
    extra = struct.pack(">I4s", 8 + 16 + len(V1_XML), b"uuid") + uuid + V1_XML.encode()
    moov = data.index(b"moov") - 4
    assert data.rindex(b"mdat") < moov  # (nothing after moov: no chunk offset moves)
    trak = data.index(b"trak", moov) - 4
    trak_end = trak + struct.unpack(">I", data[trak:trak + 4])[0]
    for at in (moov, trak):
        struct.pack_into(">I", data, at, struct.unpack(">I", data[at:at + 4])[0] + len(extra))
    data[trak_end:trak_end] = extra
    dst.write_bytes(bytes(data))
    return dst


def test_googles_v1_xml_comes_out_as_v2(tmp_path):
    plain = tmp_path / "plain.mp4"
    subprocess.run([ffmpeg(), "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=64x32:rate=25", "-frames:v", "3",
                    "-c:v", "libx264", "-pix_fmt", "yuv420p", str(plain)], check=True)
    src = with_v1(plain, tmp_path / "v1.mp4")
    got = view(src)
    assert set(got) == {"SPHERICAL", "STEREO3D"}  # FFmpeg's reading of the XML
    assert run(src, tmp_path / "out.mp4", preset="ultrafast") == []
    assert view(tmp_path / "out.mp4") == got
    assert b"sv3d" in (tmp_path / "out.mp4").read_bytes()


@pytest.mark.parametrize("suffix", [".mkv", ".mp4"])
def test_an_hdr_360_video_keeps_both_written_in_one_rewrite(tmp_path, monkeypatch, suffix):
    """HDR10's container copy and the view go into the file together: a Matroska file's clusters move once."""
    from vsr.video import track_metadata
    from tests.video.tools import ffmpeg_with

    if shutil.which("mkvmerge") is None:
        pytest.skip("needs MKVToolNix's mkvmerge (Debian's mkvtoolnix) to write the 360 sources")
    hevc = tmp_path / "hdr.mkv"
    subprocess.run([ffmpeg_with("libx265"), "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=64x32:rate=25",
                    "-frames:v", "3", "-c:v", "libx265", "-pix_fmt", "yuv420p10le", "-color_primaries", "bt2020",
                    "-color_trc", "smpte2084", "-colorspace", "bt2020nc", "-x265-params",
                    "log-level=error:hdr10=1:max-cll=1000,400:master-display=G(13250,34500)B(7500,3000)"
                    "R(34000,16000)WP(15635,16450)L(10000000,50)", str(hevc)], check=True)
    src = tmp_path / "in.mkv"
    subprocess.run(["mkvmerge", "-q", "-o", str(src), *EQUIRECT_TB, str(hevc)], check=True)
    calls = []
    real = track_metadata.add_track_metadata
    monkeypatch.setattr("vsr.video.sink.add_track_metadata", lambda *a: (calls.append(a[2]), real(*a))[1])
    assert run(src, tmp_path / f"out{suffix}", preset="ultrafast") == []
    assert len(calls) == 1 and (calls[0].colour and calls[0].video if suffix == ".mkv" else len(calls[0].boxes) == 4)
    assert view(tmp_path / f"out{suffix}") == view(src)
    got = {d["side_data_type"]: d for d in ffprobe_view(tmp_path / f"out{suffix}")}
    assert got["Content light level metadata"]["max_content"] == 1000
    assert Fraction(got["Mastering display metadata"]["max_luminance"]) == 1000
