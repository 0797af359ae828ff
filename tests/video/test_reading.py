"""A video whose tags are not UTF-8 (an AVI's INFO chunk, an old Matroska title, written in a Windows code page)
is read, its tags as the text its writer meant (vsr.video.reading): before, PyAV's strict decoding refused the
whole file as "not a video file".  The files are written by the system's FFmpeg, which stores a tag's bytes as
given; the output is read back by ffprobe."""

from __future__ import annotations

import json
import subprocess
import warnings
from pathlib import Path

from vsr.pipeline.upscale import upscale
from vsr.video import EncoderSettings, open_source
from vsr.video.reading import tag_text

from tests.jobs.helpers import WindowBackend
from tests.video.tools import ffmpeg

CAFE = "Caf\xe9".encode("latin-1")  # "Café" in Windows-1252 / Latin-1


def probe_tags(path: Path) -> dict:
    out = subprocess.run(["ffprobe", "-v", "error", "-show_entries", "format_tags:stream_tags:chapter_tags",
                          "-show_chapters", "-of", "json", str(path)], capture_output=True, check=True).stdout
    return json.loads(out.decode("utf-8"))


def test_tag_text_keeps_utf8_and_reads_the_rest_as_windows_1252():
    assert tag_text("Café") == "Café"
    assert tag_text(b"\x80 5".decode("utf-8", "surrogateescape")) == "€ 5"  # cp1252's euro sign
    assert tag_text(b"a\x81b".decode("utf-8", "surrogateescape")) == "a\x81b"  # (no cp1252 character: Latin-1)


def test_an_avi_with_a_latin1_title_upscales_and_keeps_it(tmp_path):
    src = tmp_path / "in.avi"
    subprocess.run([ffmpeg(), "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=32x24:rate=25", "-frames:v", "3",
                    "-c:v", "mpeg4", "-metadata", b"title=" + CAFE, str(src)], check=True)
    source = open_source(src)
    try:
        assert source.info.container_metadata["title"] == "Café"
    finally:
        source.close()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        upscale(src, tmp_path / "out.mkv", backend=WindowBackend(), encoder=EncoderSettings(preset="ultrafast"))
    assert probe_tags(tmp_path / "out.mkv")["format"]["tags"]["title"] == "Café"


def test_an_avi_whose_index_repeats_a_frame_is_not_said_to_end_early(tmp_path):
    """FFmpeg's own AVI of video and AAC: an empty index entry (a frame shown again) makes its header count 11
    entries for 10 pictures, and vsr warned the file ended early."""
    src = tmp_path / "in.avi"
    subprocess.run([ffmpeg(), "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=32x24:rate=25:duration=0.4", "-f",
                    "lavfi", "-i", "sine=duration=0.4", "-c:v", "mpeg4", "-c:a", "aac", str(src)], check=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = upscale(src, tmp_path / "out.mkv", backend=WindowBackend(),
                         encoder=EncoderSettings(preset="ultrafast"))
    assert report.frames == 10 and not [w for w in caught if "ended early" in str(w.message)]


def test_matroska_stream_and_chapter_titles_in_a_code_page(tmp_path):
    """Tags of the video stream, an audio stream (copied) and a chapter, each in Windows-1252."""
    meta = tmp_path / "chapters.txt"
    meta.write_bytes(b";FFMETADATA1\n[CHAPTER]\nTIMEBASE=1/1000\nSTART=0\nEND=80\ntitle=" + CAFE + b"\n")
    src = tmp_path / "in.mkv"
    subprocess.run([ffmpeg(), "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=32x24:rate=25", "-f", "lavfi", "-i",
                    "sine=sample_rate=48000:duration=0.12", "-i", str(meta), "-map", "0:v", "-map", "1:a",
                    "-map_metadata", "2", "-map_chapters", "2", "-frames:v", "3", "-c:v", "libx264", "-c:a", "flac",
                    "-metadata:s:v", b"title=" + CAFE, "-metadata:s:a", b"title=" + CAFE + b" audio", str(src)],
                   check=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        upscale(src, tmp_path / "out.mkv", backend=WindowBackend(), encoder=EncoderSettings(preset="ultrafast"))
    got = probe_tags(tmp_path / "out.mkv")
    titles = [s["tags"].get("title") for s in got["streams"]]
    assert titles == ["Café", "Café audio"]
    assert [c["tags"]["title"] for c in got["chapters"]] == ["Café"]
