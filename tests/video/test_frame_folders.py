"""Folders of frames as users have them: JPEG, TIFF, BMP and WebP beside PNG (``ffmpeg -i x.mp4 %04d.jpg``, a
camera's time-lapse, a scan's 16-bit TIFFs), and their rate (``--frame-rate``, as ffmpeg's ``-framerate``).

They were "zero frames: no *.png files in folder", and every folder played at 25 frames a second.
"""

from __future__ import annotations

import shutil
import subprocess
from fractions import Fraction

import cv2
import numpy as np
import pytest

from tests.video.tools import ffmpeg
from vsr.errors import InputError
from vsr.video import open_source


def frames_of(folder, suffix: str, n: int = 3, *args: str):
    """``n`` 64x48 test-pattern frames ``0001<suffix>`` ... written by ffmpeg (``args``: its output options)."""
    folder.mkdir()
    if suffix.lower() == ".webp":
        args = ("-c:v", "libwebp", *args)  # (one picture a file: its default, libwebp_anim, writes one animation)
    subprocess.run([ffmpeg(), "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=64x48:rate=1", "-frames:v", str(n),
                    *args, "-f", "image2", str(folder / f"%04d{suffix}")], check=True)
    return folder


def pixels(source) -> list[np.ndarray]:
    return [f.rgb for f in source.frames()]


@pytest.mark.parametrize("suffix", [".jpg", ".JPEG", ".tif", ".bmp", ".webp"])
def test_a_folder_of_each_kind_is_read_in_order(tmp_path, suffix):
    folder = frames_of(tmp_path / "f", suffix)
    src = open_source(folder)
    assert (src.info.width, src.info.height, src.info.frames, src.info.bits) == (64, 48, 3, 8)
    assert src.info.rate == 25 and src.info.alpha is None and src.info.colour.transfer == 13  # (sRGB, as 8-bit PNG)
    got = pixels(src)
    for k, rgb in enumerate(got):  # each frame is its file, as OpenCV reads it
        bgr = cv2.imread(str(folder / f"{k + 1:04d}{suffix}"), cv2.IMREAD_COLOR)
        assert np.array_equal(np.round(rgb * 255).astype(np.uint8), bgr[:, :, ::-1].transpose(2, 0, 1))
    assert not np.array_equal(got[0], got[2])  # (testsrc2 at 1 fps: each frame a second on)


def test_a_jpeg_is_turned_upright_by_its_exif_orientation(tmp_path):
    """A phone's portrait JPEG is stored sideways with orientation 6 (turn 90 degrees clockwise), as viewers do."""
    if shutil.which("exiftool") is None:
        pytest.skip("needs exiftool")
    folder = frames_of(tmp_path / "f", ".jpg", 2)
    stored = cv2.imread(str(folder / "0001.jpg"), cv2.IMREAD_UNCHANGED)
    for p in folder.iterdir():
        subprocess.run(["exiftool", "-q", "-overwrite_original", "-Orientation=6", "-n", str(p)], check=True)
    src = open_source(folder)
    assert (src.info.width, src.info.height) == (48, 64)
    upright = np.round(pixels(src)[0] * 255).astype(np.uint8)[::-1].transpose(1, 2, 0)  # (H, W, BGR)
    assert np.array_equal(upright, np.rot90(stored, k=-1))


def test_a_16_bit_tiff_keeps_16_bits(tmp_path):
    folder = frames_of(tmp_path / "f", ".tif", 2, "-pix_fmt", "rgb48le")
    src = open_source(folder)
    assert src.info.bits == 16 and src.info.pix_fmt == "rgb48le"
    first = cv2.imread(str(folder / "0001.tif"), cv2.IMREAD_UNCHANGED)
    assert first.dtype == np.uint16
    assert np.array_equal(np.round(pixels(src)[0] * 65535).astype(np.uint16), first[:, :, ::-1].transpose(2, 0, 1))


def test_a_tiff_and_a_webp_are_turned_upright_by_their_exif_orientation(tmp_path):
    """Orientation 6 (turn 90 degrees clockwise) on a 16-bit TIFF and a WebP: upright, as viewers show them, 16
    bits kept (the TIFF was "not a TIFF image": OpenCV's reader fails on it; the WebP stayed sideways)."""
    if shutil.which("exiftool") is None:
        pytest.skip("needs exiftool")
    for suffix, args, top in ((".tif", ("-pix_fmt", "rgb48le"), 65535), (".webp", ("-lossless", "1"), 255)):
        folder = frames_of(tmp_path / suffix[1:], suffix, 2, *args)
        stored = cv2.imread(str(folder / f"0001{suffix}"), cv2.IMREAD_UNCHANGED)
        for p in folder.iterdir():
            subprocess.run(["exiftool", "-q", "-overwrite_original", "-Orientation=6", "-n", str(p)], check=True)
        src = open_source(folder)
        assert (src.info.width, src.info.height, src.info.bits) == (48, 64, 16 if top == 65535 else 8)
        upright = np.round(pixels(src)[0] * top).astype(stored.dtype)[::-1].transpose(1, 2, 0)  # (H, W, BGR)
        assert np.array_equal(upright, np.rot90(stored, k=-1))


def test_a_webp_s_alpha_is_turned_upright_with_it(tmp_path):
    """(Written by Pillow: exiftool 12's EXIF chunk marks a WebP as without alpha, and libwebp then drops it.)"""
    from PIL import Image

    rgba = np.dstack([np.full((48, 64, 3), 90, np.uint8), np.tile(np.arange(64, dtype=np.uint8) * 2 + 64, (48, 1))])
    exif = Image.Exif()
    exif[0x0112] = 6
    (tmp_path / "f").mkdir()
    Image.fromarray(rgba).save(tmp_path / "f" / "1.webp", lossless=True, exif=exif.tobytes())
    src = open_source(tmp_path / "f")
    assert (src.info.width, src.info.height, src.info.pix_fmt) == (48, 64, "rgba")
    list(src.frames())
    assert np.array_equal(src.info.alpha.take(0).plane, np.rot90(rgba[:, :, 3], k=-1))


@pytest.mark.parametrize("suffix", [".tif", ".webp"])
def test_alpha_in_tiff_and_webp_is_kept_as_png_s(tmp_path, suffix):
    folder = tmp_path / "f"
    folder.mkdir()
    for k in range(3):
        bgra = np.full((48, 64, 4), 40 * k + 20, np.uint8)
        bgra[:, :, 3] = 255
        bgra[:, :32, 3] = 128
        cv2.imwrite(str(folder / f"{k}{suffix}"), bgra, [cv2.IMWRITE_WEBP_QUALITY, 101])  # (101: lossless WebP)
    src = open_source(folder)
    assert src.info.pix_fmt == "rgba" and src.info.alpha is not None
    list(src.frames())
    alpha = src.info.alpha.take(2)
    assert alpha.top == 255 and alpha.plane[0, 0] == 128 and alpha.plane[0, 63] == 255


def test_a_folder_of_two_kinds_names_both(tmp_path):
    folder = frames_of(tmp_path / "f", ".png")
    shutil.copy(frames_of(tmp_path / "j", ".jpg", 1) / "0001.jpg", folder / "cover.jpg")
    with pytest.raises(InputError, match=r"^.*/f holds PNG frames \(0001.png\) and JPEG frames \(cover.jpg\): a "
                                         r"folder of frames is one kind of picture; move the others out$"):
        open_source(folder)


@pytest.mark.parametrize("name, damage, said", [
    ("0002.jpg", "cut", r"not a whole JPEG image: .*/0002.jpg \(its data ends before the picture does\)"),
    ("0002.jpg", "text", r"^not a JPEG image: .*/0002.jpg$"),
    ("0003.tif", "text", r"^not a TIFF image: .*/0003.tif$"),
])
def test_a_damaged_frame_is_one_line_naming_it(tmp_path, name, damage, said):
    folder = frames_of(tmp_path / "f", name[-4:])
    data = (folder / name).read_bytes()
    (folder / name).write_bytes(data[:len(data) // 2] if damage == "cut" else b"not a picture\n")
    src = open_source(folder)
    with pytest.raises(InputError, match=said):
        list(src.frames())


def test_a_picture_too_large_for_opencv_is_one_line(tmp_path, capsys):
    """A PNG whose header says 60000x60000 (a few hundred bytes): OpenCV's size check asserted, a traceback."""
    import struct
    import zlib

    from vsr.cli import main

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    picture = tmp_path / "huge.png"
    picture.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 60000, 60000, 8, 2, 0, 0, 0))
                        + chunk(b"IDAT", zlib.compress(bytes(60001 * 3))) + chunk(b"IEND", b""))
    with pytest.raises(InputError, match=r"huge.png: its header says a picture larger than OpenCV reads"):
        open_source(tmp_path)
    assert main(["upscale", str(picture), str(tmp_path / "big.png"), "--weights", "random", "--quiet"]) == 2
    assert capsys.readouterr().err.startswith(f"vsr: error: {picture}: its header says a picture larger than")


def test_float_samples_are_refused_in_one_line(tmp_path):
    folder = tmp_path / "f"
    folder.mkdir()
    cv2.imwrite(str(folder / "1.tif"), np.full((48, 64, 3), 0.5, np.float32))
    with pytest.raises(InputError, match=r"1.tif: its samples are float32; vsr reads frames of 8 or 16 bits"):
        open_source(folder)


@pytest.mark.parametrize("suffix, codec, lossy", [(".jpg", "mjpeg", True), (".tif", "tiff", False),
                                                  (".png", "png", False)])
def test_weights_auto_sees_jpeg_frames_as_lossy(tmp_path, suffix, codec, lossy):
    """Frames a camera or ``ffmpeg … %04d.jpg`` wrote are JPEG's blocks: measured as MJPEG at their bits per pixel."""
    from vsr.video.compression import measure

    facts = measure(open_source(frames_of(tmp_path / "f", suffix)))
    assert facts.codec == codec and (facts.bits_per_pixel is not None) == lossy and facts.frames == 1


@pytest.mark.parametrize("text, rate", [
    ("24", 24), ("25", 25), ("23.976", Fraction(24000, 1001)), ("29.97", Fraction(30000, 1001)),
    ("59.94", Fraction(60000, 1001)), ("30000/1001", Fraction(30000, 1001)), ("12.5", Fraction(25, 2)),
    ("0.5", Fraction(1, 2)), (24, 24), (29.97, Fraction(30000, 1001)),  # (a job file's TOML numbers)
])
def test_a_frame_rate_is_exact(text, rate):
    from vsr.video.frame_source import parse_frame_rate

    assert parse_frame_rate(text) == rate


@pytest.mark.parametrize("text", ["0", "-24", "nan", "inf", "fast", "", "1001", "24/0"])
def test_a_bad_frame_rate_is_one_line(text):
    from vsr.video.frame_source import parse_frame_rate

    with pytest.raises(InputError, match=r"^--frame-rate must be frames a second above 0 and at most 1000"):
        parse_frame_rate(text)


def test_a_folder_plays_at_its_frame_rate(tmp_path):
    folder = frames_of(tmp_path / "f", ".jpg")
    assert open_source(folder).info.rate == 25  # (the default, as before)
    info = open_source(folder, frame_rate="24000/1001").info
    assert info.rate == Fraction(24000, 1001) and info.time_base == Fraction(1001, 24000)


def test_a_frame_rate_for_a_video_is_refused(make_clip):
    src = make_clip("in.mp4", width=16, height=12, frames=2)
    with pytest.raises(InputError, match=r"^--frame-rate is for a folder of frames, whose pictures have no times; "
                                         r".*in.mp4 has its own timestamps$"):
        open_source(src, frame_rate="24")


def test_a_png_is_turned_upright_by_its_exif_orientation(tmp_path):
    """A PNG's eXIf chunk (exiftool writes one), all eight orientations, as Pillow's ``exif_transpose`` shows them
    (a square frame: a folder of one size); a 16-bit PNG with alpha of orientation 6 turned 90 degrees clockwise,
    alpha with it.  They were read as stored, sideways."""
    if shutil.which("exiftool") is None:
        pytest.skip("needs exiftool")
    bgr = np.zeros((48, 48, 3), np.uint8)
    bgr[:8, :20] = (0, 0, 255)  # (a red bar top-left: where it goes shows each turn)
    bgr[30:, 40:, 1] = np.arange(18, dtype=np.uint8)[:, None] * 10
    (tmp_path / "f").mkdir()
    for k in range(1, 9):
        p = tmp_path / "f" / f"{k}.png"
        cv2.imwrite(str(p), bgr)
        subprocess.run(["exiftool", "-q", "-overwrite_original", f"-Orientation={k}", "-n", str(p)], check=True)
    got = [np.round(rgb * 255).astype(np.uint8).transpose(1, 2, 0) for rgb in pixels(open_source(tmp_path / "f"))]
    try:
        from PIL import Image, ImageOps
    except ImportError:
        Image = None
    for k, rgb in enumerate(got, 1):
        if Image is not None:
            with Image.open(tmp_path / "f" / f"{k}.png") as im:
                assert im.getexif().get(0x0112) == k
                want = np.asarray(ImageOps.exif_transpose(im).convert("RGB"))
        elif k in (1, 3, 6, 8):  # (without Pillow: the turns alone, by numpy)
            want = np.rot90(bgr, {1: 0, 3: 2, 6: -1, 8: 1}[k])[:, :, ::-1]
        else:
            continue
        assert np.array_equal(rgb, want), k
    deep = np.dstack([np.tile(np.arange(64, dtype=np.uint16) * 1000, (48, 1))] * 3 + [np.full((48, 64), 40000,
                                                                                               np.uint16)])
    deep[:10, :, 3] = 1000
    (tmp_path / "d").mkdir()
    cv2.imwrite(str(tmp_path / "d" / "1.png"), deep)
    subprocess.run(["exiftool", "-q", "-overwrite_original", "-Orientation=6", "-n", str(tmp_path / "d" / "1.png")],
                   check=True)
    src = open_source(tmp_path / "d")
    assert (src.info.width, src.info.height, src.info.pix_fmt) == (48, 64, "rgba64le")
    rgb = np.round(pixels(src)[0] * 65535).astype(np.uint16)
    assert np.array_equal(rgb[::-1].transpose(1, 2, 0), np.rot90(deep[:, :, :3], k=-1))
    assert np.array_equal(src.info.alpha.take(0).plane, np.rot90(deep[:, :, 3], k=-1))
