"""A source's alpha channel follows each frame, upscaled, into every output whose format holds alpha; the colour
is the same as without it; an output that cannot hold it says so in one line.

The sources are written by the system's ffmpeg (VP9 with its alpha in Matroska's BlockAdditional, ProRes 4444,
QuickTime Animation, FFV1) or OpenCV (RGBA and grey-with-alpha PNG frames), and every alpha is read by FFmpeg's
decoders and swscale (libvpx's VP9 decoder where the stream says it has alpha), or OpenCV.  The reference
for the upscaled alpha is torch's bicubic interpolation (Keys' kernel, a = -0.75, half-pixel centres, edges
clamped) of the source's alpha as that ffmpeg decodes it."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import av
import cv2
import numpy as np
import pytest
import torch

from vsr.errors import InputError
from vsr.jobs import JobSpec
from vsr.pipeline.runner import RunnerSettings
from vsr.pipeline.upscale import upscale
from vsr.video import EncoderSettings
from vsr.video.alpha import ALPHA_DECODERS, alpha_of
from vsr.video.formats import alpha_formats, alpha_pix_fmt

from tests.jobs.helpers import WindowBackend
from tests.jobs.test_chunks import REQUEST, run_job
from tests.video.tools import ffmpeg, ffmpeg_with

H, W, FRAMES = 24, 32, 4
ROOT = Path(__file__).resolve().parents[2]


def rgba_frames(folder: Path, frames: int = FRAMES, grey: bool = False, deep: bool = False) -> Path:
    """PNG frames with a soft and a hard alpha edge that move each frame (a ramp, a disc, a hole)."""
    folder.mkdir()
    yy, xx = np.mgrid[0:H, 0:W]
    for i in range(frames):
        alpha = np.clip((xx - 2 * i) * 255 / W, 0, 255)
        alpha = np.where((xx - 12 - i) ** 2 + (yy - 12) ** 2 < 36, 255, alpha)
        alpha = np.where((xx - 24) ** 2 + (yy - 6 + i) ** 2 < 9, 0, alpha)
        colour = np.stack([(xx * 8 + i * 30) % 256, (yy * 10) % 256, np.full_like(xx, 90 + i * 20)], -1)
        img = np.dstack([colour, alpha])  # (OpenCV's BGRA)
        img = img.astype(np.uint16) * 257 if deep else img.astype(np.uint8)
        cv2.imwrite(str(folder / f"{i:03d}.png"), img)
    if grey:  # grey with alpha (OpenCV writes no such PNG): the system's ffmpeg makes them of these
        subprocess.run([ffmpeg(), "-v", "error", "-i", str(folder / "%03d.png"), "-pix_fmt", "ya8",
                        str(folder / "ya%03d.png")], check=True)
        for i in range(frames):
            (folder / f"ya{i + 1:03d}.png").replace(folder / f"{i:03d}.png")
    return folder


def encoded(tmp_path: Path, name: str, *args: str) -> Path:
    """The PNG frames encoded by the system's ffmpeg with ``args``."""
    frames = rgba_frames(tmp_path / "frames")
    out = tmp_path / name
    subprocess.run([ffmpeg(), "-v", "error", "-y", "-framerate", "25", "-i", str(frames / "%03d.png"), *args,
                    str(out)], check=True)
    return out


SOURCES = {  # name -> the system ffmpeg's encoder and its pixel format
    "vp9.webm": ("libvpx-vp9", "yuva420p"), "prores.mov": ("prores_ks", "yuva444p10le"),
    "qtrle.mov": ("qtrle", "argb"), "ffv1.mkv": ("ffv1", "gbrap10le"),
}


def source(tmp_path: Path, name: str) -> Path:
    codec, pix_fmt = SOURCES[name]
    ffmpeg_with(codec)
    return encoded(tmp_path, name, "-c:v", codec, "-pix_fmt", pix_fmt, "-g", "2")


def alphas(path: Path) -> tuple[np.ndarray, int]:
    """Every frame's alpha, ``(frames, H, W)``, and the depth's top: as FFmpeg's decoders give it (libvpx's for VP9
    that says it has alpha, as ffmpeg's users ask for it) through swscale's RGBA (PNG frames: read by OpenCV).
    (PyAV's FFmpeg, not the system's 5.1: that one's FFV1 decoder has no 12-bit YUVA.)"""
    if path.is_dir():
        planes = [cv2.imread(str(p), cv2.IMREAD_UNCHANGED)[..., 3] for p in sorted(path.glob("*.png"))]
        return np.stack(planes).astype(np.int64), int(np.iinfo(planes[0].dtype).max)
    with av.open(str(path)) as c:
        st = c.streams.video[0]
        if st.codec_context.name == "vp9" and {k.lower(): v for k, v in st.metadata.items()}.get("alpha_mode") == "1":
            ctx = av.CodecContext.create("libvpx-vp9", "r")
            frames = [f for p in c.demux(st) if p.size for f in ctx.decode(p)]
        else:
            frames = list(c.decode(st))
    bits = next((x.bits for x in frames[0].format.components if x.is_alpha), 8)  # (8: a palette's)
    planes = [f.to_ndarray(format="rgba64le")[..., 3].astype(np.int64) >> (16 - bits) for f in frames]
    return np.stack(planes), (1 << bits) - 1  # (swscale widens a sample by repeating its bits)


def reference(alpha: np.ndarray) -> np.ndarray:
    """Bicubic x4 (torch's) of float alpha in [0, 1], clipped: ``(frames, 4H, 4W)`` floats."""
    t = torch.from_numpy(alpha.astype(np.float32))[:, None]
    up = torch.nn.functional.interpolate(t, scale_factor=4, mode="bicubic", align_corners=False)
    return up[:, 0].clamp(0, 1).numpy()


def check_upscaled(src: Path, out: Path, codes: float) -> float:
    """The output's alpha within ``codes`` (at its depth) of the reference from the source's; the largest
    difference, as a fraction of opaque."""
    a, a_top = alphas(src)
    b, b_top = alphas(out)
    assert b.shape == (a.shape[0], 4 * a.shape[1], 4 * a.shape[2])
    diff = np.abs(b - reference(a / a_top) * b_top)
    assert diff.max() <= codes + 1e-3, (diff.max(), b_top)
    assert b.min() < b_top / 4 and b.max() == b_top  # (the matte is there: transparent and opaque parts)
    return float(diff.max() / b_top)


def run(src: Path, dst: Path, **encoder) -> list[str]:
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        upscale(src, dst, backend=WindowBackend(), encoder=EncoderSettings(**encoder),
                runner=RunnerSettings(scene_cuts="off"))
    return [str(w.message) for w in said if "alpha" in str(w.message)]


def pix_fmt(path: Path) -> str:
    with av.open(str(path)) as c:
        return c.streams.video[0].codec_context.pix_fmt


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_each_frames_alpha_is_upscaled_into_a_lossless_output(tmp_path, name):
    src = source(tmp_path, name)
    assert run(src, tmp_path / "out.mkv", codec="ffv1") == []
    assert "a" in pix_fmt(tmp_path / "out.mkv").replace("gray", "")  # (yuva..., gbrap...)
    check_upscaled(src, tmp_path / "out.mkv", 0.5)  # rounding only, at the output's depth


@pytest.mark.parametrize("grey,deep", [(False, False), (True, False), (False, True)])
def test_png_frames_keep_it_sample_for_sample(tmp_path, grey, deep):
    src = rgba_frames(tmp_path / "in", grey=grey, deep=deep)
    assert run(src, tmp_path / "out") == []
    out = sorted((tmp_path / "out").glob("*.png"))
    first = cv2.imread(str(out[0]), cv2.IMREAD_UNCHANGED)
    assert first.shape == (4 * H, 4 * W, 4) and first.dtype == (np.uint16 if deep else np.uint8)
    a, top = alphas(src)
    b, _ = alphas(tmp_path / "out")
    np.testing.assert_array_less(np.abs(b - np.floor(reference(a / top) * top + 0.5)), 1.01)


def test_the_colour_is_the_same_with_or_without_alpha(tmp_path):
    src = source(tmp_path, "vp9.webm")
    run(src, tmp_path / "a.mkv", codec="ffv1")
    assert run(src, tmp_path / "o.mkv", codec="ffv1", pix_fmt="yuv420p") == [
        "the source's alpha channel (yuva420p) is dropped: --pix-fmt yuv420p has none (VP9 in .webm or .mkv, "
        "ProRes 4444 in .mov, FFV1 or PNG frames keep it: the default codec of .webm, .mkv and .mov does)"]
    assert (pix_fmt(tmp_path / "a.mkv"), pix_fmt(tmp_path / "o.mkv")) == ("yuva420p", "yuv420p")
    with av.open(str(tmp_path / "a.mkv")) as a, av.open(str(tmp_path / "o.mkv")) as o:
        for fa, fo in zip(a.decode(video=0), o.decode(video=0), strict=True):
            for pa, po in zip(fa.planes[:3], fo.planes):
                assert bytes(pa) == bytes(po)


@pytest.mark.parametrize("suffix,codec,fmt", [(".webm", "vp9", "yuv420p"), (".mkv", "vp9", "yuv420p"),
                                              (".mov", "prores", "yuva444p12le")])
def test_each_container_gets_a_codec_that_keeps_it_by_default(tmp_path, suffix, codec, fmt):
    """VP9 in Matroska and WebM (its alpha beside each frame: ffprobe shows the colour's yuv420p and the track's
    alpha_mode), ProRes 4444 in QuickTime; lossy, so within what their quantisers leave."""
    src = source(tmp_path, "qtrle.mov")
    out = tmp_path / f"out{suffix}"
    assert run(src, out) == []
    probe = subprocess.run(["ffprobe", "-v", "error", "-show_entries", "stream=codec_name,pix_fmt:stream_tags="
                            "alpha_mode", "-of", "csv=p=0", str(out)], capture_output=True, text=True).stdout.split()
    assert probe[0].split(",")[:2] == [codec, fmt] and (codec != "vp9" or probe[0].endswith(",1"))
    lossy = check_upscaled(src, out, 255 if codec == "vp9" else 4095)
    assert lossy < 0.16  # (VP9 at its default CRF 32 moves a hard edge's samples most)


def test_an_output_that_cannot_hold_it_says_so_once(tmp_path):
    src = source(tmp_path, "prores.mov")
    said = run(src, tmp_path / "out.mp4", preset="ultrafast")
    # (a 12-bit source: HEVC of its depth by default, as any source deeper than 8 bits)
    assert said == ["the source's alpha channel (yuva444p12le) is dropped: libx265 has no format with alpha (VP9 in "
                    ".webm or .mkv, ProRes 4444 in .mov, FFV1 or PNG frames keep it: the default codec of .webm, "
                    ".mkv and .mov does)"]
    assert pix_fmt(tmp_path / "out.mp4") == "yuv444p12le"


def test_a_setting_the_alpha_codec_lacks_is_refused_naming_it(tmp_path):
    src = source(tmp_path, "vp9.webm")
    with pytest.raises(InputError) as e:
        run(src, tmp_path / "out.mov", crf=18)
    assert str(e.value) == ("--crf: prores_ks, the mov codec that keeps the source's alpha, has no such setting "
                            "(leave it out, or give -c libx264, which drops the alpha)")
    assert not (tmp_path / "out.mov").exists()
    with pytest.raises(InputError, match="^--preset: libvpx-vp9, the webm codec"):
        run(src, tmp_path / "out.webm", preset="fast")
    run(src, tmp_path / "out.mp4", crf=18, preset="ultrafast")  # (libx264's: taken, the alpha dropped)


def test_a_chunked_job_and_a_piped_source_keep_it(tmp_path):
    src = source(tmp_path, "vp9.webm")
    spec = JobSpec.from_settings(src, tmp_path / "job.webm", REQUEST, EncoderSettings(),
                                 RunnerSettings(scene_cuts="off"))
    assert len(run_job(spec, WindowBackend(), chunk_frames=2)) == 2
    assert check_upscaled(src, tmp_path / "job.webm", 255) < 0.16
    with open(src, "rb") as f:
        done = subprocess.run([sys.executable, "-m", "vsr", "upscale", "-", str(tmp_path / "piped.mkv"),
                               "--weights", "random", "--config", "edvr-tiny", "--backend", "torch", "--threads", "1",
                               "-c", "ffv1", "--quiet"], stdin=f, capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    check_upscaled(src, tmp_path / "piped.mkv", 0.5)


@pytest.mark.parametrize("fmt", ["yuva420p", "yuva444p12le", "gbrap16be", "rgba", "argb", "bgra", "rgba64be",
                                 "ya8", "ya16le", "yuv420p"])
def test_a_frames_alpha_is_read_from_any_layout(fmt):
    """Against swscale's own RGBA of the frame (alpha copied, no colour in it)."""
    rng = np.random.default_rng(3)
    rgba = rng.integers(0, 1 << 16, (H, W, 4), dtype=np.uint16)
    frame = av.VideoFrame.from_ndarray(rgba, format="rgba64le").reformat(format=fmt)
    got = alpha_of(frame)
    if fmt == "yuv420p":
        assert got is None
        return
    bits = next(c.bits for c in frame.format.components if c.is_alpha)
    want = frame.to_ndarray(format="rgba64le")[..., 3].astype(np.int64) >> (16 - bits)  # (swscale widens by
    assert got.top == (1 << bits) - 1  # repeating the bits)
    np.testing.assert_array_equal(got.plane, want)


def test_the_output_format_keeps_alpha_nearest_the_colours():
    def best(colour: str, codec: str) -> str | None:
        c = av.Codec(codec, "w")
        return alpha_pix_fmt(colour, alpha_formats(codec, [f.name for f in c.video_formats]))

    assert best("yuv420p", "libvpx-vp9") == "yuva420p"
    assert best("yuv444p10le", "libvpx-vp9") == "yuva420p"  # (libvpx takes alpha only with 4:2:0)
    assert best("yuv422p10le", "prores_ks") == "yuva444p10le"
    assert best("bgr0", "ffv1") == "bgra" and best("gbrp12le", "ffv1") == "gbrap12le"
    assert best("rgb24", "png") == "rgba" and best("rgb48be", "png") == "rgba64be" and best("gray", "png") == "ya8"
    assert best("rgb24", "qtrle") == "argb"
    assert best("yuv420p", "libx264") is None and best("yuv420p10le", "libx265") is None  # (x265's needs a build
    # with its alpha layer: refused when it opens)


@pytest.mark.parametrize("name", ["t.gif", "p8.png"])
def test_a_palettes_transparency_is_alpha(tmp_path, name):
    """A GIF with a transparent colour (FFmpeg decodes it as bgra) and a palette PNG with transparent entries
    (pal8, its palette's alpha: a still image)."""
    src = encoded(tmp_path, name, "-filter_complex",
                  "split[a][b];[a]palettegen=reserve_transparent=1[p];[b][p]paletteuse=alpha_threshold=128",
                  *(["-frames:v", "1", "-update", "1"] if name.endswith(".png") else []))
    with av.open(str(src)) as c:
        assert next(c.decode(video=0)).format.name == ("pal8" if name.endswith(".png") else "bgra")
    run(src, tmp_path / "out.mkv", codec="ffv1")
    assert pix_fmt(tmp_path / "out.mkv") == "bgra"
    check_upscaled(src, tmp_path / "out.mkv", 0.5)


def test_hdr_with_alpha_keeps_both_in_quicktime(tmp_path):
    """ProRes 4444 holds 10-bit alpha beside PQ colour (VP9's alpha is 8-bit: in .mkv HDR's HEVC wins, the alpha
    said dropped)."""
    tags = "color_primaries=bt2020:color_trc=smpte2084:colorspace=bt2020nc"
    src = encoded(tmp_path, "hdr.mov", "-vf", f"scale=out_color_matrix=bt2020nc,setparams={tags}", "-c:v", "prores_ks",
                  "-pix_fmt", "yuva444p10le", "-color_primaries", "bt2020", "-color_trc", "smpte2084", "-colorspace",
                  "bt2020nc")
    assert run(src, tmp_path / "out.mov") == []
    with av.open(str(tmp_path / "out.mov")) as c:
        cc = c.streams.video[0].codec_context
        assert (cc.name, cc.pix_fmt, int(cc.color_trc), int(cc.color_primaries)) == ("prores", "yuva444p12le", 16, 9)
    check_upscaled(src, tmp_path / "out.mov", 4095)
    said = run(src, tmp_path / "out.mkv", preset="ultrafast")
    assert len(said) == 1 and said[0].startswith("the source's alpha channel (yuva444p12le) is dropped: libx265")


def test_without_libvpx_the_alpha_is_said_lost(tmp_path, monkeypatch):
    src = source(tmp_path, "vp9.webm")
    monkeypatch.setitem(ALPHA_DECODERS, "vp9", "libvpx-vp9-not-built")
    said = run(src, tmp_path / "out.mkv", codec="ffv1")
    assert said == ["the video's alpha (beside each VP9 frame) needs libvpx's decoder (libvpx-vp9-not-built), which "
                    "this FFmpeg lacks: dropped"]
    assert pix_fmt(tmp_path / "out.mkv") == "yuv420p"
