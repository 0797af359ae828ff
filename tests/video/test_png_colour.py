"""PNG frames keep an HDR or wide-gamut source's colour: ``cICP`` (primaries, transfer), and an HDR source's
mastering display (``mDCV``) and light level (``cLLI``), as PNG's third edition has them; a folder of such frames
is read back with them, so HDR10 -> PNG frames -> HDR10 keeps every tag and both metadata.

The reference reader is FFmpeg's PNG decoder (PyAV), which reads all three chunks into a frame's colour tags and
side data; the sources are HEVC streams FFmpeg encoded with x265's own mastering-display and light-level SEI."""

from __future__ import annotations

import struct
import subprocess
import warnings
from fractions import Fraction
from pathlib import Path

import av
import pytest

from vsr.pipeline.upscale import upscale
from vsr.video import EncoderSettings
from vsr.video.colour import ColourSpec
from vsr.video.hdr import HdrMetadata, MasteringDisplay
from vsr.video.png_colour import chunk, colour_chunks, read_colour, with_chunks
from vsr.video.side_data import entries

from tests.jobs.helpers import WindowBackend
from tests.video.tools import ffmpeg_with

MASTER = "G(13250,34500)B(7500,3000)R(34000,16000)WP(15635,16450)L(10000000,50)"


def clip(path: Path, primaries: str, transfer: str, matrix: str, extra: str = "") -> Path:
    subprocess.run([ffmpeg_with("libx265"), "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc2=size=32x24:rate=10",
                    "-frames:v", "2", "-c:v", "libx265", "-pix_fmt", "yuv420p10le", "-color_primaries", primaries,
                    "-color_trc", transfer, "-colorspace", matrix, "-color_range", "tv", "-x265-params",
                    "log-level=error" + extra, str(path)], check=True)
    return path


def to(src: Path, dst: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        upscale(src, dst, backend=WindowBackend(), encoder=EncoderSettings(preset="ultrafast" if dst.suffix else None))


def seen(path: Path) -> tuple[tuple[int, int], dict[str, bytes]]:
    """(primaries, transfer) and side data of the first frame, as FFmpeg's decoder reads it."""
    with av.open(str(path)) as c:
        f = next(c.decode(video=0))
        return (int(f.color_primaries), int(f.color_trc)), {s.type.name: bytes(s) for s in entries(f)}


def chunk_types(path: Path) -> list[bytes]:
    data, at, out = path.read_bytes(), 8, []
    while at < len(data):
        size = struct.unpack(">I", data[at:at + 4])[0]
        out.append(data[at + 4:at + 8])
        at += 12 + size
    return out


def test_hdr10_frames_keep_their_colour_and_metadata_and_come_back(tmp_path):
    src = clip(tmp_path / "in.mkv", "bt2020", "smpte2084", "bt2020nc", f":master-display={MASTER}:max-cll=1000,400")
    tags, side = seen(src)
    assert tags == (9, 16) and {"MASTERING_DISPLAY_METADATA", "CONTENT_LIGHT_LEVEL"} <= set(side)
    to(src, tmp_path / "frames")
    frame = tmp_path / "frames" / "00000000.png"
    assert chunk_types(frame)[:4] == [b"IHDR", b"cICP", b"mDCV", b"cLLI"]
    png_tags, png_side = seen(frame)
    assert png_tags == (9, 16)
    for kind in ("MASTERING_DISPLAY_METADATA", "CONTENT_LIGHT_LEVEL"):  # FFmpeg's structure, as from the video
        assert png_side[kind] == side[kind]
    to(tmp_path / "frames", tmp_path / "back.mkv")  # (a folder of them is HDR10 again)
    with av.open(str(tmp_path / "back.mkv")) as c:
        f = next(c.decode(video=0))
        assert (int(f.colorspace), int(f.color_primaries), int(f.color_trc)) == (9, 9, 16)  # BT.2020's matrix
        assert f.format.name == "yuv420p10le"  # (HDR10's: not the 4:4:4 of an SDR RGB source)
        back = {s.type.name: bytes(s) for s in entries(f)}
    assert back["MASTERING_DISPLAY_METADATA"] == side["MASTERING_DISPLAY_METADATA"]
    assert back["CONTENT_LIGHT_LEVEL"] == side["CONTENT_LIGHT_LEVEL"]


@pytest.mark.parametrize("primaries, transfer, matrix, want", [
    ("bt2020", "arib-std-b67", "bt2020nc", (9, 18)),  # HLG, without mastering metadata
    ("bt2020", "bt2020-10", "bt2020nc", (9, 14)),  # wide gamut SDR
    ("bt709", "bt709", "bt709", None)])  # SDR: sRGB, as every viewer takes a frame (no chunk)
def test_what_each_source_writes(tmp_path, primaries, transfer, matrix, want):
    to(clip(tmp_path / "in.mkv", primaries, transfer, matrix), tmp_path / "frames")
    frame = tmp_path / "frames" / "00000000.png"
    assert (b"cICP" in chunk_types(frame)) == (want is not None)
    assert b"mDCV" not in chunk_types(frame) and b"cLLI" not in chunk_types(frame)
    if want is not None:
        assert seen(frame)[0] == want
        assert read_colour(frame)[0] == ColourSpec(0, 2, *want)


def test_the_reader_and_the_writer(tmp_path):
    """The writer's chunks read back to what they were made of; an untagged, guessed or unreadable ``cICP`` is
    sRGB (a YUV matrix, unspecified values, a wrong length)."""
    mastering = MasteringDisplay((Fraction(17, 25), Fraction(8, 25)), (Fraction(53, 200), Fraction(69, 100)),
                                 (Fraction(3, 20), Fraction(3, 50)), (Fraction(3127, 10000), Fraction(329, 1000)),
                                 Fraction(1, 200), Fraction(1000))
    hdr = HdrMetadata("PQ", mastering, (1000, 400))
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">2I5B", 4, 4, 16, 2, 0, 0, 0)) + chunk(b"IEND", b"")
    path = tmp_path / "a.png"
    path.write_bytes(with_chunks(png, colour_chunks(ColourSpec(0, 2, 9, 16), hdr)))
    assert read_colour(path) == (ColourSpec(0, 2, 9, 16), hdr)
    assert colour_chunks(ColourSpec(0, 2, 1, 13), None) == b""
    assert colour_chunks(ColourSpec(0, 2, 9, 16, ("primaries",)), hdr) == b""
    for cicp in (bytes([9, 16, 1, 1]), bytes([2, 16, 0, 1]), bytes([9, 16, 0])):
        path.write_bytes(with_chunks(png, chunk(b"cICP", cicp)))
        assert read_colour(path) == (ColourSpec.srgb(), None)


def test_the_previews_picture_says_an_hlg_sources_colour(tmp_path):
    """``vsr preview``'s PNG (and the page's pictures) of an HLG source: tagged BT.2020 HLG, as FFmpeg reads it."""
    from vsr.quality.preview import preview
    from vsr.quality.preview_page import write_preview

    src = clip(tmp_path / "in.mkv", "bt2020", "arib-std-b67", "bt2020nc")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = preview(src, frames=2, backend=WindowBackend(), encoder=EncoderSettings(preset="ultrafast"))
    assert seen(write_preview(p, tmp_path / "p.png"))[0] == (9, 18)
