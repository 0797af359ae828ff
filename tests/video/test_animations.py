"""Animated pictures in, animated pictures out: a ``.gif``, ``.apng`` or ``.webp`` output is that animation (its
codec by default, every frame at its time, looping for ever as GIFs do), alpha kept where it can be (APNG and WebP
whole, GIF as its transparent colour), a GIF's frames each in a palette of its own.

The source is a GIF with a transparent colour written by the system's ffmpeg; APNG and GIF outputs are read back by
FFmpeg's decoders, WebP's (which FFmpeg does not decode when animated) by libwebp's ``webpmux``."""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import av
import numpy as np
import pytest

from tests.video.test_alpha import alphas, encoded, reference, run

PALETTE = "split[a][b];[a]palettegen=reserve_transparent=1[p];[b][p]paletteuse=alpha_threshold=128"


@pytest.fixture
def gif(tmp_path) -> Path:
    return encoded(tmp_path, "in.gif", "-filter_complex", PALETTE)


def frames(path: Path) -> tuple[list[av.VideoFrame], str]:
    with av.open(str(path)) as c:
        st = c.streams.video[0]
        return list(c.decode(st)), st.codec_context.name


def times(path: Path) -> list[float]:
    with av.open(str(path)) as c:
        st = c.streams.video[0]
        return [float(f.pts * st.time_base) for f in c.decode(st)]


def test_an_apng_keeps_every_frame_its_time_and_alpha_and_loops(tmp_path, gif):
    assert run(gif, tmp_path / "out.apng") == []
    got, codec = frames(tmp_path / "out.apng")
    assert (codec, got[0].format.name, len(got), got[0].width) == ("apng", "rgba", 4, 4 * 32)
    assert times(tmp_path / "out.apng") == times(gif)
    a, top = alphas(gif)
    b, _ = alphas(tmp_path / "out.apng")
    np.testing.assert_array_less(np.abs(b - np.floor(reference(a / top) * 255 + 0.5)), 1.01)
    data = (tmp_path / "out.apng").read_bytes()
    at = data.index(b"acTL")
    assert struct.unpack(">II", data[at + 4:at + 12]) == (4, 0)  # 4 frames, played for ever


def test_a_gif_gets_a_palette_a_frame_and_its_transparency(tmp_path, gif):
    assert run(gif, tmp_path / "out.apng") == []
    assert run(gif, tmp_path / "out.gif") == []
    full, _ = frames(tmp_path / "out.apng")
    got, codec = frames(tmp_path / "out.gif")
    assert codec == "gif" and len(got) == 4 and times(tmp_path / "out.gif") == times(gif)
    for f, g in zip(full, got):
        want, have = f.to_ndarray(format="rgba").astype(np.int64), g.to_ndarray(format="rgba").astype(np.int64)
        opaque = (want[..., 3] >= 160) & (have[..., 3] == 255)
        assert ((want[..., 3] < 96) <= (have[..., 3] == 0)).all()  # transparent where it was mostly so
        assert ((want[..., 3] >= 160) <= (have[..., 3] == 255)).all()
        err = want[opaque][:, :3] - have[opaque][:, :3]
        psnr = 10 * np.log10(255 ** 2 / np.mean(err.astype(np.float64) ** 2))
        assert psnr > 32, psnr  # (33.9-34.8 dB; swscale's fixed 3-3-2 palette, rgb8: 20.6-20.8 dB on these frames)
        assert len(np.unique(have[..., :3].reshape(-1, 3), axis=0)) > 100
    data = (tmp_path / "out.gif").read_bytes()
    at = data.index(b"NETSCAPE2.0")
    assert data[at + 13:at + 15] == b"\0\0"  # loops for ever


def test_an_animated_webp_keeps_alpha_and_loops(tmp_path, gif):
    if shutil.which("webpmux") is None:
        pytest.skip("needs libwebp's webpmux (Debian's webp) to read an animated WebP")
    assert run(gif, tmp_path / "out.webp") == []
    info = subprocess.run(["webpmux", "-info", str(tmp_path / "out.webp")], capture_output=True, text=True,
                          check=True).stdout
    assert "Canvas size: 128 x 96" in info and "animation transparency" in info and "Loop Count : 0" in info
    assert "Number of frames: 4" in info
    rows = [line.split() for line in info.splitlines() if line.strip()[:2].rstrip(":").isdigit()]
    assert [r[6] for r in rows] == ["40"] * 4  # each frame's duration, ms (the source's 25 fps)


@pytest.mark.parametrize("suffix", [".gif", ".apng", ".webp"])
def test_a_batch_job_into_an_animation_is_refused_when_added(tmp_path, gif, suffix):
    """Its chunks would be joined by copying their packets: a GIF's first frame of a chunk is then drawn over the
    last of the one before, APNG's muxer crashed on them, an animated WebP is one packet."""
    from vsr.errors import InputError
    from vsr.jobs import JobSpec
    from vsr.jobs.chunking import check_encoder
    from vsr.pipeline.runner import RunnerSettings
    from vsr.video import EncoderSettings, open_source
    from tests.jobs.test_chunks import REQUEST

    spec = JobSpec.from_settings(gif, tmp_path / f"job{suffix}", REQUEST, EncoderSettings(), RunnerSettings())
    source = open_source(gif)
    source.close()
    with pytest.raises(InputError, match="a job joins its chunks' packets as they are, which an animation's cannot"):
        check_encoder(spec, source.info)


@pytest.mark.parametrize("loop,gif_repeats,plays", [("0", b"\0\0", 0), ("-1", None, 1), ("3", b"\x03\0", 4)])
def test_how_often_it_plays_is_kept(tmp_path, loop, gif_repeats, plays):
    """A GIF's loop count (repeats after the first play; none: played once), as the system's ffmpeg writes it,
    comes out the same in a GIF and as the same number of plays in an APNG (``acTL``)."""
    src = encoded(tmp_path, "in.gif", "-filter_complex", PALETTE, "-loop", loop)
    run(src, tmp_path / "out.gif")
    run(src, tmp_path / "out.apng")
    data = (tmp_path / "out.gif").read_bytes()
    at = data.find(b"NETSCAPE2.0")
    assert (data[at + 13:at + 15] if at >= 0 else None) == gif_repeats
    data = (tmp_path / "out.apng").read_bytes()
    at = data.index(b"acTL")
    assert struct.unpack(">I", data[at + 8:at + 12])[0] == plays


def test_a_large_frames_palette_from_a_sample_of_its_pixels_maps_it_as_closely(monkeypatch):
    """A 720p frame of a real clip: its palette counted from every second pixel of every second row
    (:func:`vsr.video.palette.sample_step`) against one counted from all of them."""
    from tests.data import VIDEOS, need
    from vsr.video import palette

    clip = VIDEOS / "h264yuv444_mp3_1280x720_20fps_14s_cockatoo.mp4"
    need(clip)
    assert (palette.sample_step(1280, 720), palette.sample_step(1920, 1080), palette.sample_step(3840, 2160),
            palette.sample_step(128, 96)) == (2, 3, 7, 1)
    with av.open(str(clip)) as c:
        frame = next(c.decode(video=0)).reformat(format="rgb24")
    want = frame.to_ndarray().astype(np.float64)

    def psnr() -> float:
        got = palette.Palettes()(frame).reformat(format="rgb24").to_ndarray().astype(np.float64)
        return 10 * np.log10(255 ** 2 / np.mean((got - want) ** 2))

    sampled = psnr()
    monkeypatch.setattr(palette, "SAMPLE_PIXELS", 1 << 40)  # every pixel counted
    assert palette.sample_step(1280, 720) == 1
    full = psnr()
    assert sampled > 30 and abs(sampled - full) < 0.2
