"""A phone's QuickTime keys (where and when it filmed, its make and model, a slow-motion clip's capture rate) come
through into .mov and .mp4 outputs, which FFmpeg's muxer would drop, and its other tags stay where players read
them.  Read back by FFmpeg and, where it is installed, by ExifTool (another reader of the same atoms)."""

from __future__ import annotations

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
from vsr.video.isobmff import add_moov_box, mdta_meta, top_level
from vsr.video.tags import quicktime_keys

from tests.jobs.helpers import WindowBackend
from tests.jobs.test_chunks import REQUEST, run_job
from tests.video.tools import ffmpeg

KEYS = {"com.apple.quicktime.location.ISO6709": "+48.8584+002.2945+035.000/",
        "com.apple.quicktime.make": "Apple", "com.apple.quicktime.model": "iPhone 15",
        "com.apple.quicktime.creationdate": "2024-05-01T10:00:00+0200", "com.android.capture.fps": "240.000000"}


def phone_clip(path: Path) -> Path:
    tags = [a for k, v in KEYS.items() for a in ("-metadata", f"{k}={v}")]
    subprocess.run([ffmpeg(), "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=48x32:rate=30", "-f", "lavfi", "-i",
                    "sine=sample_rate=48000", "-t", "0.5", "-c:v", "libx264", "-c:a", "aac", "-movflags",
                    "use_metadata_tags", *tags, "-metadata", "title=Holiday", str(path)], check=True)
    return path


def tags(path: Path) -> dict:
    with av.open(str(path)) as c:
        return dict(c.metadata)


def run(src: Path, dst: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        upscale(src, dst, backend=WindowBackend(), encoder=EncoderSettings(), runner=RunnerSettings())


@pytest.mark.parametrize("suffix", [".mov", ".mp4"])
def test_a_phones_keys_come_through_and_its_title_stays_a_title(tmp_path, suffix):
    src = phone_clip(tmp_path / "in.mov")
    assert {k: tags(src)[k] for k in KEYS} == KEYS
    out = tmp_path / f"out{suffix}"
    run(src, out)
    got = tags(out)
    assert {k: got.get(k) for k in KEYS} == KEYS
    assert got["title"] == "Holiday" and got.get("major_brand") != "qt"  # (the source's brand is not copied)
    exiftool = shutil.which("exiftool")
    if exiftool is not None:
        said = subprocess.run([exiftool, "-s", "-G1", "-Keys:all", "-Title", str(out)], capture_output=True,
                              text=True, check=True).stdout
        assert "[Keys]          Model" in said and "iPhone 15" in said and "GPSCoordinates" in said, said
        assert "Holiday" in said


def test_a_matroska_sources_capitals_go_back_to_apples_names(tmp_path):
    src = phone_clip(tmp_path / "in.mov")
    run(src, tmp_path / "mid.mkv")
    assert tags(tmp_path / "mid.mkv")["COM.APPLE.QUICKTIME.LOCATION.ISO6709"] == KEYS[
        "com.apple.quicktime.location.ISO6709"]  # (Matroska keeps every tag, in capitals)
    run(tmp_path / "mid.mkv", tmp_path / "out.mp4")
    assert {k: tags(tmp_path / "out.mp4").get(k) for k in KEYS} == KEYS
    assert quicktime_keys({"major_brand": "qt", "title": "x", "COM.ANDROID.VERSION": "14", "a.b": 3}) == [
        ("com.android.version", "14")]


def test_the_atom_goes_into_a_faststart_file_whose_media_moves_up(tmp_path):
    """moov before the media: every chunk offset moves with it; each packet still decodes as before."""
    src = tmp_path / "in.mp4"
    subprocess.run([ffmpeg(), "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=48x32:rate=30", "-f", "lavfi", "-i",
                    "sine=sample_rate=48000", "-t", "0.5", "-c:v", "libx264", "-c:a", "aac", "-movflags", "+faststart",
                    str(src)], check=True)
    assert [b.type for b in top_level(src)].index(b"moov") < [b.type for b in top_level(src)].index(b"mdat")
    with av.open(str(src)) as c:
        before = [(p.stream.index, p.pts, bytes(p)) for p in c.demux() if p.size]
    add_moov_box(src, mdta_meta([("com.example.note", "hello")]))
    with av.open(str(src)) as c:
        after = [(p.stream.index, p.pts, bytes(p)) for p in c.demux() if p.size]
        assert c.metadata["com.example.note"] == "hello"
    assert after == before


def test_a_chunked_jobs_output_keeps_them(tmp_path):
    src = phone_clip(tmp_path / "in.mov")
    spec = JobSpec.from_settings(src, tmp_path / "job.mp4", REQUEST, EncoderSettings(), RunnerSettings())
    run_job(spec, WindowBackend())
    assert {k: tags(tmp_path / "job.mp4").get(k) for k in KEYS} == KEYS
