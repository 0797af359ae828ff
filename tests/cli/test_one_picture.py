"""One picture in, one picture out: ``vsr upscale photo.jpg big.png`` upscales the photo as a one-frame folder of
frames and writes one PNG file (it was "big.png is the name of one picture, and vsr writes a video"); ``big.jpg``,
``big.tif`` and ``big.webp`` write that kind (they were "vsr writes one picture as PNG")."""

from __future__ import annotations

import shutil
import subprocess

import cv2
import numpy as np
import pytest

from tests.video.test_frame_folders import frames_of
from vsr.cli import main

TINY = ["--weights", "random", "--config", "edvr-tiny", "--threads", "1", "--quiet"]


def test_a_photo_becomes_one_png_upright(tmp_path, capsys):
    """A phone's portrait JPEG (orientation 6): the PNG is upright, as viewers show the photo, x4."""
    if shutil.which("exiftool") is None:
        pytest.skip("needs exiftool")
    photo = frames_of(tmp_path / "f", ".jpg", 1) / "0001.jpg"
    subprocess.run(["exiftool", "-q", "-overwrite_original", "-Orientation=6", "-n", str(photo)], check=True)
    out = tmp_path / "big.png"
    assert main(["upscale", str(photo), str(out), *TINY]) == 0, capsys.readouterr().err
    png = cv2.imread(str(out), cv2.IMREAD_UNCHANGED)
    assert out.read_bytes()[:4] == b"\x89PNG" and png.shape == (256, 192, 3) and png.dtype == np.uint8
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.png", "f"]  # (no temporary left)
    assert main(["upscale", str(photo), str(out), *TINY]) == 2  # an existing one: as a video's
    assert "output exists" in capsys.readouterr().err


def test_a_picture_to_a_kind_vsr_does_not_write_is_one_line(tmp_path, capsys):
    photo = frames_of(tmp_path / "f", ".jpg", 1) / "0001.jpg"
    assert main(["upscale", str(photo), str(tmp_path / "big.bmp"), *TINY]) == 2
    assert capsys.readouterr().err == (f"vsr: error: {tmp_path / 'big.bmp'}: vsr writes one picture as PNG, JPEG, TIFF "
                                       f"or WebP (give big.png, .jpg, .tif or .webp), or a video (.mp4, .mkv, ...)\n")


def upscaled(photo, out, capsys, *args: str) -> np.ndarray:
    assert main(["upscale", str(photo), str(out), *TINY, *args]) == 0, capsys.readouterr().err
    return cv2.imread(str(out), cv2.IMREAD_UNCHANGED)


def test_a_photo_becomes_a_jpeg_a_tiff_or_a_webp_as_its_name_says(tmp_path, capsys):
    """The same pixels as the PNG (the model's seeded random weights): WebP lossless, TIFF lossless at 16 bits,
    JPEG at quality 95 with full-resolution colour (4:4:4); upright, with no orientation tag of their own."""
    from PIL import Image

    if shutil.which("exiftool") is None:
        pytest.skip("needs exiftool")
    photo = frames_of(tmp_path / "f", ".jpg", 1) / "0001.jpg"
    subprocess.run(["exiftool", "-q", "-overwrite_original", "-Orientation=6", "-n", str(photo)], check=True)
    png = upscaled(photo, tmp_path / "big.png", capsys)
    assert png.shape == (256, 192, 3)
    assert np.array_equal(upscaled(photo, tmp_path / "big.webp", capsys), png)
    jpeg = upscaled(photo, tmp_path / "big.JPG", capsys)
    assert jpeg.shape == png.shape and cv2.PSNR(jpeg, png) > 35
    for name in ("big.webp", "big.JPG"):
        with Image.open(tmp_path / name) as im:
            assert im.format in ("WEBP", "JPEG") and im.getexif().get(0x0112) is None
    with Image.open(tmp_path / "big.JPG") as im:
        assert im.layer[0][1:3] == im.layer[1][1:3] == (1, 1)  # (each component's sampling: 4:4:4)
    deep = frames_of(tmp_path / "d", ".tif", 1, "-pix_fmt", "rgb48le") / "0001.tif"
    tiff = upscaled(deep, tmp_path / "big.tiff", capsys)
    assert tiff.dtype == np.uint16 and np.array_equal(tiff, upscaled(deep, tmp_path / "big16.png", capsys))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.JPG", "big.png", "big.tiff", "big.webp", "big16.png",
                                                          "d", "f"]  # (no temporary left)


def test_what_a_jpeg_cannot_hold_is_dropped_with_one_line(tmp_path, capsys):
    """A picture's alpha into a JPEG is dropped as a video codec without alpha drops it, and 16 bits into 8;
    a WebP keeps the alpha."""
    bgra = np.dstack([np.full((48, 64, 3), 100, np.uint16), np.full((48, 64), 30000, np.uint16)])
    cv2.imwrite(str(tmp_path / "a.png"), bgra)
    assert main(["upscale", str(tmp_path / "a.png"), str(tmp_path / "a.jpg"), *TINY]) == 0
    out = tmp_path / "a.jpg"
    assert [line for line in capsys.readouterr().err.splitlines() if str(out) in line] == [
        f"vsr: warning: {out}: the source's 16 bits a sample are written as 8: JPEG holds 8 (a .png or .tif picture "
        "keeps them)",
        f"vsr: warning: {out}: the source's alpha channel is dropped: JPEG has none (a .png, .tif or .webp picture "
        "keeps it)"]
    assert cv2.imread(str(out), cv2.IMREAD_UNCHANGED).shape == (192, 256, 3)
    webp = upscaled(tmp_path / "a.png", tmp_path / "a.webp", capsys)
    assert webp.shape == (192, 256, 4) and abs(int(webp[0, 0, 3]) - 30000 // 257) <= 1


@pytest.mark.parametrize("args, said", [
    (["--crf", "18"], "--crf set(s) a video encoder, but {out} is one picture (give the output a video suffix "
                      "such as .mp4 or .mkv)"),
    (["--pix-fmt", "rgba"], "a JPEG picture is rgb24, not --pix-fmt rgba")])
def test_options_a_picture_cannot_take_are_one_line(tmp_path, capsys, args, said):
    photo = frames_of(tmp_path / "f", ".jpg", 1) / "0001.jpg"
    out = tmp_path / "big.jpg"
    assert main(["upscale", str(photo), str(out), *TINY, *args]) == 2
    assert capsys.readouterr().err == f"vsr: error: {said.format(out=out)}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


def test_a_video_to_a_png_is_still_refused(make_clip, tmp_path, capsys):
    src = make_clip("in.mp4", width=16, height=12, frames=2)
    assert main(["upscale", str(src), str(tmp_path / "big.png"), *TINY]) == 2
    assert "is the name of one picture (.png), and vsr writes a video" in capsys.readouterr().err


def test_a_job_of_a_picture_to_a_png_is_refused(tmp_path, capsys):
    """A job's chunks are video: its .png output was queued, then written by a video muxer."""
    photo = frames_of(tmp_path / "f", ".jpg", 1) / "0001.jpg"
    assert main(["jobs", "add", str(photo), "--out-dir", str(tmp_path / "o"), "--ext", "png", "--store",
                 str(tmp_path / "q.db"), *TINY[:4]]) == 2
    assert capsys.readouterr().err == (f"vsr: error: {tmp_path / 'o' / '0001.png'}: a job writes a video; upscale "
                                       f"the picture {photo} with vsr upscale\n")


def test_an_hdr_picture_s_colour_is_kept_in_a_png_and_said_lost_elsewhere(tmp_path, capsys):
    """A PQ BT.2020 PNG (its ``cICP``): a .png keeps the tag; JPEG, TIFF and WebP have none for it, and were
    written silently untagged (shown as sRGB, colours wrong): one line naming what keeps it."""
    from vsr.video.png_colour import chunk, read_colour, with_chunks

    ok, png = cv2.imencode(".png", np.full((48, 64, 3), 30000, np.uint16))  # (16 bits: into 8, said too)
    src = tmp_path / "hdr.png"
    src.write_bytes(with_chunks(png.tobytes(), chunk(b"cICP", bytes([9, 16, 0, 1]))))  # BT.2020, PQ, RGB, full
    assert main(["upscale", str(src), str(tmp_path / "big.png"), *TINY]) == 0
    assert str(tmp_path / "big.png") not in capsys.readouterr().err
    colour = read_colour(tmp_path / "big.png")[0]
    assert (colour.primaries, colour.transfer) == (9, 16)
    for name, kind in (("big.jpg", "JPEG"), ("big.tif", "TIFF"), ("big.webp", "WebP")):
        out = tmp_path / name
        assert main(["upscale", str(src), str(out), *TINY]) == 0
        deep = [f"vsr: warning: {out}: the source's 16 bits a sample are written as 8: {kind} holds 8 (a .png or "
                ".tif picture keeps them)"] if kind != "TIFF" else []
        assert [line for line in capsys.readouterr().err.splitlines() if str(out) in line] == deep + [
            f"vsr: warning: {out}: the source's PQ HDR colour (its cICP tag) cannot be written into a {kind} picture: "
            "viewers will show it as sRGB, its colours wrong (a .png picture keeps it)"]
        assert cv2.imread(str(out), cv2.IMREAD_UNCHANGED).shape == (192, 256, 3)
    wide = tmp_path / "wide.png"
    wide.write_bytes(with_chunks(png.tobytes(), chunk(b"cICP", bytes([12, 13, 0, 1]))))  # Display P3, sRGB's curve
    assert main(["upscale", str(wide), str(tmp_path / "wide.jpg"), *TINY]) == 0
    assert "the source's wide-gamut colour (its cICP tag) cannot be written into a JPEG" in capsys.readouterr().err


def test_a_png_photo_is_upright_by_its_exif_orientation(tmp_path, capsys):
    """A PNG of orientation 6 (its eXIf chunk) is upscaled upright, as a JPEG of it is; it was sideways."""
    if shutil.which("exiftool") is None:
        pytest.skip("needs exiftool")
    photo = frames_of(tmp_path / "f", ".png", 1) / "0001.png"
    subprocess.run(["exiftool", "-q", "-overwrite_original", "-Orientation=6", "-n", str(photo)], check=True)
    assert upscaled(photo, tmp_path / "big.png", capsys).shape == (256, 192, 3)
    with open(tmp_path / "big.png", "rb") as f:
        assert b"eXIf" not in f.read()  # (upright, with no orientation tag of its own)


@pytest.mark.parametrize("name, what", [("big.jpg", "one picture"), ("frames", "a folder of PNG frames")])
def test_a_video_option_is_said_before_a_pix_fmt(tmp_path, capsys, name, what):
    """Both wrong: the --crf line first, as a Y4M stream's (the output's kind, then what it holds); a PNG folder
    said its --pix-fmt first before pictures of other kinds came, and one picture its --crf."""
    photo = frames_of(tmp_path / "f", ".jpg", 1) / "0001.jpg"
    out = tmp_path / name
    assert main(["upscale", str(photo), str(out), *TINY, "--crf", "18", "--pix-fmt", "yuv420p"]) == 2
    assert capsys.readouterr().err == (f"vsr: error: --crf set(s) a video encoder, but {out} is {what} (give the "
                                       "output a video suffix such as .mp4 or .mkv)\n")


@pytest.mark.parametrize("suffix, codec", [(".jpg", "jpeg"), (".tif", "tiff"), (".webp", "webp"), (".png", "png")])
def test_the_encoder_line_names_the_kind_written(tmp_path, capsys, suffix, codec):
    """It said 'encoder: png, rgb24' of a JPEG."""
    photo = frames_of(tmp_path / "f", ".jpg", 1) / "0001.jpg"
    assert main(["upscale", str(photo), str(tmp_path / f"big{suffix}"), *TINY[:-1]]) == 0
    assert f"\nencoder: {codec}, rgb24\n" in capsys.readouterr().err
