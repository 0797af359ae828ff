"""--deinterlace film (inverse telecine): 24 fps film telecined by FFmpeg into 29.97 interlaced frames (3:2
pulldown) comes back as the film's own frames, 4 of every 5, at 23.976, evenly timed from the source's first
frame; the reference is the film before telecine.  Trimmed runs, chunked jobs, pipes and captions too."""

from __future__ import annotations

import json
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

from vsr.jobs import JobSpec
from vsr.pipeline.runner import RunnerSettings
from vsr.video import open_source

from tests.jobs.helpers import WindowBackend
from tests.jobs.test_chunks import ENCODER, REQUEST, decoded, run_job, single_pass
from tests.video.test_captions import captions, cc_data, run
from tests.video.tools import ffmpeg

REPO = Path(__file__).resolve().parents[2]
TINY = ["--weights", "random", "--config", "edvr-tiny", "--backend", "torch", "--threads", "1", "--quiet"]


def film_and_telecined(d: Path, frames: int = 48, codec: tuple = ("-c:v", "ffv1"), suffix: str = ".mkv",
                       audio: bool = False) -> tuple[Path, Path]:
    """24000/1001 fps film (lossless) and the same telecined to 30000/1001 interlaced frames (top field first)."""
    film, tc = d / "film.mkv", d / f"telecined{suffix}"
    subprocess.run([ffmpeg(), "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=96x64:rate=24000/1001", "-frames:v",
                    str(frames), "-c:v", "ffv1", "-pix_fmt", "yuv420p", str(film)], check=True)
    sound = ["-f", "lavfi", "-i", "sine=sample_rate=48000:duration=3", "-shortest", "-c:a", "aac"] if audio else []
    subprocess.run([ffmpeg(), "-v", "error", "-i", str(film), *sound, "-vf", "telecine=first_field=top:pattern=23",
                    *codec, "-field_order", "tt", str(tc)], check=True)
    return film, tc


def pictures(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as c:
        return [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]


def test_the_films_frames_come_back_evenly_timed(tmp_path):
    film, tc = film_and_telecined(tmp_path)
    reference = open_source(film)
    try:
        want = [f.rgb for f in reference.frames()]  # (the same YUV to RGB as the telecined frames get)
    finally:
        reference.close()
    with av.open(str(tc)) as c:
        st = c.streams.video[0]
        woven = [f.pts for f in c.decode(st)]
        tb = st.time_base
    assert len(woven) == 60
    source = open_source(tc, deinterlace="film")
    try:
        info = source.info
        got = list(source.frames())
    finally:
        source.close()
    assert info.film and info.rate == Fraction(24000, 1001) and info.time_base == tb / 4
    assert len(got) == len(want) == 48
    step = Fraction(1001, 30000) / tb  # a source frame in its time base
    assert [f.pts for f in got] == [4 * woven[0] + round(n * 5 * step) for n in range(48)]
    exact = sum(np.array_equal(f.rgb, w) for f, w in zip(got, want))
    assert exact >= 46, exact  # (fieldmatch's default matching misses a field in 1 of 48 here: combed, then bwdif)
    assert all(np.abs(f.rgb - w).mean() < 0.03 for f, w in zip(got, want))


def vsr(*args, stdin=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vsr", *map(str, args)], capture_output=True, text=True, cwd=REPO,
                          stdin=stdin)


def test_upscale_film_says_so_keeps_the_audio_and_counts_frames_A_B_out_of_it(tmp_path):
    _, tc = film_and_telecined(tmp_path, 24, audio=True)
    whole, part, report = tmp_path / "whole.mkv", tmp_path / "part.mkv", tmp_path / "r.json"
    p = vsr("upscale", tc, whole, *TINY, "--deinterlace", "film", "-c", "ffv1", "--report", report)
    assert p.returncode == 0, p.stderr
    assert [line for line in p.stderr.splitlines() if "telecine" in line] == [
        f"vsr: warning: {tc}: inverse telecine (fieldmatch, decimate): the film's frames, 4 of every 5, at 23.976 fps"]
    assert json.loads(report.read_text())["settings"]["source"]["film"] is True
    with av.open(str(whole)) as c:
        assert [s.type for s in c.streams] == ["video", "audio"]
        times = [f.time for f in c.decode(video=0)]
    assert len(times) == 24 and np.allclose(np.diff(times), 1001 / 24000, atol=1e-3)
    got = pictures(whole)
    p = vsr("upscale", tc, part, *TINY, "--deinterlace", "film", "-c", "ffv1", "--frames", "10:14")
    assert p.returncode == 0, p.stderr
    assert all(np.array_equal(a, b) for a, b in zip(pictures(part), got[10:14])) and len(pictures(part)) == 4


def test_a_film_job_is_one_chunk_and_equals_one_pass(tmp_path):
    _, tc = film_and_telecined(tmp_path, 30)
    runner = RunnerSettings(scene_cuts="off", deinterlace="film")
    single_pass(tc, tmp_path / "single.mkv", WindowBackend(), runner)
    spec = JobSpec.from_settings(tc, tmp_path / "job.mkv", REQUEST, ENCODER, runner)
    chunks = run_job(spec, WindowBackend(), chunk_frames=8)
    assert [(c.start, c.stop, c.decode_from) for c in chunks] == [(0, 30, 0)]
    assert decoded(tmp_path / "job.mkv") == decoded(tmp_path / "single.mkv")


def test_a_film_stream_on_standard_input(tmp_path):
    _, tc = film_and_telecined(tmp_path, 24, ("-c:v", "mpeg2video", "-q:v", "2", "-flags", "+ilme+ildct"), ".ts")
    with open(tc, "rb") as stdin:
        p = vsr("upscale", "-", tmp_path / "out.mkv", *TINY, "--deinterlace", "film", "-c", "ffv1", stdin=stdin)
    assert p.returncode == 0, p.stderr
    assert len(pictures(tmp_path / "out.mkv")) == 24


def test_the_captions_of_every_source_frame_come_through_once_in_order(tmp_path):
    """A dropped frame's captions go with the next frame out: no character lost or doubled."""
    from tests.video.test_captions import captioned
    src = captioned(tmp_path / "in.ts", frames=25, extra=("-vf", "telecine=first_field=top:pattern=23"),
                    rate="24000/1001")
    want = [cc for _, cc in captions(src)]
    assert len(want) == 25 and all(want)
    run(src, tmp_path / "out.mp4", RunnerSettings(deinterlace="film"))
    got = [cc for _, cc in captions(tmp_path / "out.mp4")]
    assert len(got) == 20
    assert b"".join(cc or b"" for cc in got) == b"".join(want) == b"".join(cc_data(i) for i in range(25))


def test_film_at_another_rate_than_ntscs_is_deinterlaced_as_auto_said_in_one_line(tmp_path):
    """25 fps (PAL carries film frame for frame) and 23.976 (film already: soft telecine decodes to it) have no
    pulldown to undo: decimate would drop one real frame in five."""
    import warnings

    for rate, interlaced in (("25", True), ("24000/1001", False)):
        src = tmp_path / f"r{rate.replace('/', '_')}.mkv"
        woven = ["-flags", "+ilme+ildct", "-x264-params", "tff=1"] if interlaced else []
        subprocess.run([ffmpeg(), "-v", "error", "-f", "lavfi", "-i", f"testsrc2=size=64x48:rate={rate}", "-frames:v",
                        "10", "-c:v", "libx264", *woven, "-pix_fmt", "yuv420p", str(src)], check=True)
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            source = open_source(src, deinterlace="film")
            try:
                info, n = source.info, len(list(source.frames()))
            finally:
                source.close()
        said = [str(w.message) for w in said if "--deinterlace film" in str(w.message)]
        assert len(said) == 1 and "no 3:2 pulldown to undo" in said[0], said
        assert not info.film and info.deinterlaced is interlaced and n == 10
