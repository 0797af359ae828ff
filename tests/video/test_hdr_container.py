"""The container's copy of HDR10's static metadata, written into a closed file (vsr.video.isobmff, .matroska,
.splice): every packet of every stream comes back unchanged, seeking still lands where it did, each CRC-32 holds,
and an independent reader (the system's ffprobe) finds the values."""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import subprocess
import zlib
from fractions import Fraction
from pathlib import Path

import av
import pytest

from vsr.video import matroska, splice
from vsr.video.hdr import HdrMetadata, MasteringDisplay, write_container_hdr

F = Fraction
HDR = HdrMetadata("PQ", MasteringDisplay(
    red=(F(34000, 50000), F(16000, 50000)), green=(F(13250, 50000), F(34500, 50000)),
    blue=(F(7500, 50000), F(3000, 50000)), white=(F(15635, 50000), F(16450, 50000)),
    min_luminance=F(50, 10000), max_luminance=F(4000)), (1000, 400))
HDR10 = ["-color_primaries", "bt2020", "-color_trc", "smpte2084", "-colorspace", "bt2020nc", "-color_range", "tv"]


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> dict[str, Path]:
    """4 s of 10-bit video (a keyframe every 5 frames) with AAC audio, in each layout the writer meets: Matroska
    with Cues after the clusters, WebM, mp4 with moov last (PyAV's) and first (faststart), QuickTime."""
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        pytest.skip("needs ffmpeg")
    d = tmp_path_factory.mktemp("hdrc")
    base = [ffmpeg, "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=96x64:rate=25", "-f", "lavfi", "-i",
            "sine=frequency=440:sample_rate=48000", "-t", "4", "-g", "5", *HDR10]
    out = {}
    for name, args in {"mkv": ["-c:v", "ffv1", "-pix_fmt", "yuv420p10le", "-c:a", "aac"],
                       "webm": ["-c:v", "libvpx-vp9", "-pix_fmt", "yuv420p10le", "-deadline", "realtime",
                                "-c:a", "libopus"],
                       "mp4": ["-c:v", "libx264", "-pix_fmt", "yuv420p10le", "-c:a", "aac"],
                       "faststart.mp4": ["-c:v", "libx264", "-pix_fmt", "yuv420p10le", "-c:a", "aac",
                                         "-movflags", "+faststart"],
                       "mov": ["-c:v", "prores_ks", "-pix_fmt", "yuv422p10le", "-c:a", "aac"]}.items():
        path = d / f"clip.{name}"
        subprocess.run([*base, *args, str(path)], check=True)
        out[name] = path
    return out


def packets(path: Path) -> list[tuple]:
    """Every packet of every stream: stream, pts, dts, keyframe, and a hash of its bytes."""
    with av.open(str(path)) as c:
        return [(p.stream.index, p.pts, p.dts, p.is_keyframe, hashlib.sha1(bytes(p)).hexdigest())
                for p in c.demux() if p.size]


def after_seek(path: Path, seconds: float) -> tuple:
    with av.open(str(path)) as c:
        v = c.streams.video[0]
        c.seek(int(seconds / v.time_base), stream=v)
        p = next(p for p in c.demux(v) if p.size)
        return p.pts, hashlib.sha1(bytes(p)).hexdigest()


def stream_side_data(path: Path) -> dict[str, dict]:
    out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_streams", "-of", "json",
                          str(path)], capture_output=True, text=True, check=True)
    assert out.stderr == ""
    return {d.pop("side_data_type"): {k: F(v) if isinstance(v, str) else v for k, v in d.items()}
            for d in json.loads(out.stdout)["streams"][0].get("side_data_list", [])}


EXPECTED = {"Mastering display metadata": {
    "red_x": F(17, 25), "red_y": F(8, 25), "green_x": F(53, 200), "green_y": F(69, 100), "blue_x": F(3, 20),
    "blue_y": F(3, 50), "white_point_x": F(3127, 10000), "white_point_y": F(329, 1000),
    "min_luminance": F(1, 200), "max_luminance": F(4000)},
    "Content light level metadata": {"max_content": 1000, "max_average": 400}}


def crcs(path: Path) -> list[bool]:
    """For each CRC-32 element of the file's level-1 elements and their children: whether it holds."""
    data = path.read_bytes()
    seg = matroska.elements(data, 0, len(data))[1]
    out = []

    def check(e):
        kids = matroska.elements(data, e.body, e.end)
        if kids and kids[0].id == matroska.CRC32:
            out.append(zlib.crc32(data[kids[0].end:e.end]) == int.from_bytes(data[kids[0].body:kids[0].end],
                                                                               "little"))
        for k in kids:
            if k.id in (matroska.TRACK_ENTRY, matroska.VIDEO, matroska.COLOUR, matroska.SEEK):
                check(k)

    for e in matroska.elements(data, seg.body, seg.end):
        if e.id in (matroska.SEEK_HEAD, matroska.TRACKS, matroska.CUES, matroska.INFO):
            check(e)
    return out


@pytest.mark.parametrize("layout", ["mkv", "webm", "mp4", "faststart.mp4", "mov"])
def test_the_metadata_goes_in_and_nothing_else_changes(clips, tmp_path, layout):
    src = clips[layout]
    out = tmp_path / src.name
    shutil.copy(src, out)
    container = {"mkv": "matroska", "webm": "webm", "mov": "mov"}.get(layout, "mp4")
    assert stream_side_data(src) == {}
    assert write_container_hdr(out, container, HDR, "ffv1") is None
    assert out.stat().st_size > src.stat().st_size
    assert stream_side_data(out) == EXPECTED
    assert packets(out) == packets(src)  # the media, the audio included, byte for byte
    for t in (1.1, 2.5, 3.7):  # the index (Cues, stco/co64) still points at the same packets
        assert after_seek(out, t) == after_seek(src, t)
    if layout in ("mkv",):
        assert crcs(src) and all(crcs(src))  # FFmpeg's own, read as this test reads them
        assert len(crcs(out)) == len(crcs(src)) and all(crcs(out))
    # a second time: the metadata is there already, the file stays as it is
    before = out.read_bytes()
    assert write_container_hdr(out, container, HDR, "ffv1") is None
    assert out.read_bytes() == before


def test_a_light_level_alone_and_a_mastering_display_alone(clips, tmp_path):
    for layout, container in (("mkv", "matroska"), ("mp4", "mp4")):
        for hdr, want in ((HdrMetadata("PQ", None, (1000, 400)), ["Content light level metadata"]),
                          (HdrMetadata("PQ", HDR.mastering, None), ["Mastering display metadata"])):
            out = tmp_path / f"{len(want)}{want[0][0]}.{layout}"
            shutil.copy(clips[layout], out)
            assert write_container_hdr(out, container, hdr, "ffv1") is None
            got = stream_side_data(out)
            assert list(got) == want and got[want[0]] == EXPECTED[want[0]]


def test_what_it_cannot_change_is_one_line_and_the_file_stays(tmp_path):
    """A fragmented mp4 (its fragments' offsets would move): said, and not touched."""
    src = tmp_path / "frag.mp4"
    subprocess.run(["ffmpeg", "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=64x48:rate=25", "-t", "1",
                    *HDR10, "-c:v", "libx264", "-movflags", "+frag_keyframe+empty_moov", str(src)], check=True)
    before = src.read_bytes()
    said = write_container_hdr(src, "mp4", HDR, "ffv1")
    assert said == ("the source's HDR mastering display and content light level could not be written into the mp4 "
                    "file (a fragmented mp4 (its fragments' offsets would move)): it keeps the PQ colour tags only")
    assert src.read_bytes() == before
    assert write_container_hdr(src, "avi", HDR, "ffv1") is None  # not a container it writes: nothing to do
    assert write_container_hdr(src, "mp4", None, "ffv1") is None  # an SDR source


@pytest.mark.parametrize("seed", range(6))
def test_splice_equals_the_bytes_rebuilt(tmp_path, monkeypatch, seed):
    """In-place splicing against the same edits applied to a copy in memory; chunks smaller than the moves."""
    rng = random.Random(seed)
    monkeypatch.setattr(splice, "CHUNK", rng.choice([1, 3, 7, 64]))
    data = bytes(rng.randrange(256) for _ in range(rng.randrange(50, 400)))
    cuts = sorted(rng.sample(range(len(data) + 1), 2 * rng.randrange(1, 5)))
    edits = [(a, b, bytes(rng.randrange(256) for _ in range(b - a + rng.randrange(0, 40))))
             for a, b in zip(cuts[::2], cuts[1::2])]
    want, prev = b"", 0
    for a, b, new in edits:
        want += data[prev:a] + new
        prev = b
    want += data[prev:]
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    assert splice.splice(path, list(reversed(edits))) == len(want) - len(data)
    assert path.read_bytes() == want
    with pytest.raises(ValueError):
        splice.splice(path, [(5, 10, b"x")])  # fewer bytes than it replaces
