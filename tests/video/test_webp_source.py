"""An animated WebP as a source (vsr.video.webp_source): libwebp's own frames, times, alpha and loop count.

The files are written by libwebp's ``img2webp`` (Debian's webp; the tests skip without it) from PNG frames, some
frames longer than others; lossless, so the frames libwebp gives back must be those PNGs exactly where they are
not wholly transparent (libwebp keeps no colour under alpha 0): the reference needs no WebP decoder.  Outputs
are read back by FFmpeg's decoders (Matroska, GIF), and an animated WebP output by Pillow (libwebp's animation
decoder)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import av
import cv2
import numpy as np
import pytest

from tests.jobs.test_chunks import REQUEST
from tests.video.test_alpha import reference, run
from vsr.errors import InputError
from vsr.model.choice import choose_for
from vsr.pipeline import RunnerSettings
from vsr.video import EncoderSettings, open_source
from vsr.video.webp_source import AnimatedWebpSource, anmf_frames

H, W = 24, 32
DURATIONS = [100, 100, 50, 50, 200]  # ms
STARTS = [0, 100, 200, 250, 300]


def pictures(folder: Path) -> list[Path]:
    """BGRA PNG frames: a ramp, a colour that changes, a transparent hole that moves."""
    folder.mkdir()
    out = []
    yy, xx = np.mgrid[0:H, 0:W]
    for i in range(len(DURATIONS)):
        img = np.zeros((H, W, 4), np.uint8)
        img[..., 0] = (xx * 8 + i * 30) % 256
        img[..., 1] = yy * 10
        img[..., 2] = 40 * i
        img[..., 3] = 255
        img[4:14, 4 + 3 * i:14 + 3 * i, 3] = 0
        img[16:20, :, 3] = 128
        out.append(folder / f"{i}.png")
        cv2.imwrite(str(out[-1]), img)
    return out


def animated(tmp_path: Path, *options: str, name: str = "in.webp") -> Path:
    if shutil.which("img2webp") is None:
        pytest.skip("needs libwebp's img2webp (Debian's webp) to write an animated WebP")
    files = pictures(tmp_path / f"frames-{name}")
    args = ["img2webp", "-loop", "3", *options]
    for f, d in zip(files, DURATIONS):
        args += ["-d", str(d), str(f)]
    subprocess.run(args + ["-o", str(tmp_path / name)], check=True, capture_output=True)
    return tmp_path / name


def test_its_frames_times_alpha_and_loops_are_libwebps(tmp_path):
    src = animated(tmp_path, "-lossless")
    source = open_source(src)
    try:
        assert isinstance(source, AnimatedWebpSource)
        info = source.info
        assert (info.kind, info.width, info.height, info.frames, info.plays, info.has_alpha) == (
            "webp", W, H, 5, 3, True)
        assert info.time_base == pytest.approx(1 / 1000) and info.rate == 10  # 5 frames in 500 ms
        got = list(source.frames())
        assert [f.pts for f in got] == STARTS and [f.duration for f in got] == DURATIONS
        for f, png in zip(got, sorted((tmp_path / "frames-in.webp").glob("*.png"))):
            want = cv2.imread(str(png), cv2.IMREAD_UNCHANGED)
            seen = want[..., 3] > 0
            rgb = np.round(f.rgb * 255).astype(np.uint8).transpose(1, 2, 0)
            np.testing.assert_array_equal(rgb[seen], want[..., 2::-1][seen])
            np.testing.assert_array_equal(info.alpha.take(f.pts).plane, want[..., 3])
        assert [f.index for f in source.frames(3)] == [3, 4]  # (a later start, as a chunk or --frames asks)
    finally:
        source.close()


def test_the_upscale_keeps_every_frames_time_and_alpha(tmp_path):
    src = animated(tmp_path, "-lossless")
    assert run(src, tmp_path / "out.mkv", codec="ffv1") == []
    with av.open(str(tmp_path / "out.mkv")) as c:
        st = c.streams.video[0]
        frames = list(c.decode(st))
        assert [round(float(f.pts * st.time_base) * 1000) for f in frames] == STARTS
        assert [round(float(f.duration * st.time_base) * 1000) for f in frames] == DURATIONS  # the last one too
        have = np.stack([f.to_ndarray(format="rgba")[..., 3] for f in frames]).astype(np.float64)
    pngs = sorted((tmp_path / "frames-in.webp").glob("*.png"))
    alpha = np.stack([cv2.imread(str(p), cv2.IMREAD_UNCHANGED)[..., 3] for p in pngs]) / 255.0
    assert np.abs(have - np.floor(reference(alpha) * 255 + 0.5)).max() <= 1  # (bicubic x4, rounding)


def test_an_animated_webp_gif_or_apng_output_plays_as_often_and_as_long(tmp_path):
    src = animated(tmp_path, "-lossy", "-q", "90")
    run(src, tmp_path / "out.webp")
    run(src, tmp_path / "out.gif")
    from PIL import Image

    with Image.open(tmp_path / "out.webp") as im:
        assert (im.size, im.n_frames, im.info["loop"]) == ((4 * W, 4 * H), 5, 3)
        assert [d for d, _ in anmf_frames(tmp_path / "out.webp")] == DURATIONS  # the last one too
        im.seek(4)
        im.load()
        assert (im.info["timestamp"], im.info["duration"]) == (300, 200)  # (libwebp's reading of it)
    with av.open(str(tmp_path / "out.gif")) as c:
        st = c.streams.video[0]
        # each frame's delay, the last one's too (FFmpeg's GIF muxer guessed it from the one before)
        assert [p.duration * st.time_base * 1000 for p in c.demux(st) if p.size] == DURATIONS
    run(src, tmp_path / "out.apng")
    with Image.open(tmp_path / "out.apng") as im:  # (Pillow's APNG reader checks each chunk's CRC)
        got = []
        for i in range(im.n_frames):
            im.seek(i)
            got.append(im.info["duration"])
        assert got == DURATIONS and im.info["loop"] == 3
    data = (tmp_path / "out.gif").read_bytes()
    at = data.index(b"NETSCAPE2.0")
    assert data[at + 13:at + 15] == b"\x02\0"  # 3 plays: repeated twice


@pytest.mark.parametrize("options, codec, weights", [(("-lossless",), "vp8l", "default"),
                                                     (("-lossy", "-q", "30"), "vp8", "real")])
def test_the_weights_follow_how_it_was_compressed(tmp_path, options, codec, weights):
    source = open_source(animated(tmp_path, *options))
    try:
        choice = choose_for(source)
    finally:
        source.close()
    assert (choice.facts.codec, choice.weights) == (codec, weights)
    assert choice.facts.bits_per_pixel > 0 and choice.facts.rate_from == "file"


def test_a_job_refuses_it_in_one_line(tmp_path):
    from vsr.jobs import JobSpec
    from vsr.jobs.chunking import plan_job

    src = animated(tmp_path, "-lossless")
    spec = JobSpec.from_settings(src, tmp_path / "out.mkv", REQUEST, EncoderSettings(), RunnerSettings())
    with pytest.raises(InputError, match="is an animated WebP, which libwebp reads from its first frame on"):
        plan_job(spec)


def test_a_damaged_one_is_one_line(tmp_path):
    src = animated(tmp_path, "-lossless")
    data = src.read_bytes()
    cut = tmp_path / "cut.webp"
    cut.write_bytes(data[:len(data) // 2])
    with pytest.raises(InputError, match="^not a video file: .*cut.webp"):
        source = open_source(cut)
        try:
            list(source.frames())
        finally:
            source.close()


def test_a_still_webp_stays_ffmpegs(tmp_path):
    png = pictures(tmp_path / "frames")[0]
    still = tmp_path / "still.webp"
    cv2.imwrite(str(still), cv2.imread(str(png), cv2.IMREAD_UNCHANGED))
    with pytest.warns(UserWarning, match="is a still image"):
        source = open_source(still)
    try:
        assert not isinstance(source, AnimatedWebpSource) and source.info.kind == "video"
    finally:
        source.close()


def test_its_variable_rate_into_a_fixed_rate_container_is_one_line(tmp_path):
    src = animated(tmp_path, "-lossless")
    with pytest.raises(InputError, match=r"has a variable frame rate \(a frame at 0\.250 s is off its 10 fps grid\), "
                                         "which avi cannot keep"):
        run(src, tmp_path / "out.avi")
    assert not (tmp_path / "out.avi").exists()


def test_a_frame_of_no_duration_is_shown_as_players_show_it(tmp_path):
    """A frame that says 0 ms (ads make frames flash so; img2webp refuses to write one, so its ANMF duration is
    zeroed here) is shown 100 ms, as browsers and FFmpeg's GIF demuxer show one: not two frames at one time."""
    from vsr.video.animation import webp_chunks

    src = animated(tmp_path, "-lossless")
    with open(src, "r+b") as f:
        second = [start for fourcc, start, _ in webp_chunks(f) if fourcc == b"ANMF"][1]
        f.seek(second + 12)
        f.write(bytes(3))
    assert [d for d, _ in anmf_frames(src)] == [100, 0, 50, 50, 200]
    run(src, tmp_path / "out.gif")
    with av.open(str(tmp_path / "out.gif")) as c:
        st = c.streams.video[0]
        assert [p.duration * st.time_base * 1000 for p in c.demux(st) if p.size] == DURATIONS  # (100, 100, ...)


@pytest.mark.parametrize("suffix", [".mp4", ".mkv", ".mov"])
def test_a_variable_rate_output_with_b_frames_ends_where_its_last_frame_does(tmp_path, suffix):
    """x264's B-frames reorder the packets: the last in decode order is not the last frame's, whose 200 ms the muxer
    used to replace by the delta before (an MP4 of this source lasted 0.4 s, not 0.5)."""
    src = animated(tmp_path, "-lossless")
    out = tmp_path / f"out{suffix}"
    run(src, out, codec="libx264")
    with av.open(str(out)) as c:
        st = c.streams.video[0]
        packets = [p for p in c.demux(st) if p.size]
        assert any(p.pts != p.dts for p in packets)  # (reordered)
        assert c.duration == 500_000  # microseconds: where the last frame ends
    if suffix == ".mkv":  # (Matroska: each frame's own duration, in any packet order)
        with av.open(str(out)) as c:
            st = c.streams.video[0]
            got = sorted((f.pts, f.duration) for f in c.decode(st))
            assert [round(float(d * st.time_base) * 1000) for _, d in got] == DURATIONS
