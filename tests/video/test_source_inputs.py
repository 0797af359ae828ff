"""Odd and hostile video inputs: what ``open_source`` says about them (one line) and what it counts.

A picture larger than FFmpeg decodes names its size; a Y4M cut inside a frame and an image file with a video
suffix are accepted with one warning; a WebM without duration in its header still has a frame count.
"""

from __future__ import annotations

import shutil
import subprocess
import warnings

import av
import cv2
import numpy as np
import pytest

from vsr.errors import InputError
from vsr.video import open_source


def y4m(path, width, height, frames: int, cut: int = 0):
    """A Y4M file of ``frames`` grey 4:2:0 frames, less ``cut`` bytes at its end."""
    size = width * height + 2 * ((width + 1) // 2) * ((height + 1) // 2)
    data = f"YUV4MPEG2 W{width} H{height} F25:1 Ip A1:1 C420jpeg\n".encode()
    data += b"".join(b"FRAME\n" + bytes([40 * i + 16]) * size for i in range(frames))
    path.write_bytes(data[:len(data) - cut])
    return path


def test_a_picture_too_large_for_ffmpeg_names_its_size(tmp_path):
    p = tmp_path / "huge.y4m"
    p.write_bytes(b"YUV4MPEG2 W20000 H20000 F25:1 Ip A1:1 C420jpeg\nFRAME\n" + bytes(64))
    with pytest.raises(InputError, match=r"^cannot read .*huge.y4m: its picture size 20000x20000 is larger than "
                                         r"FFmpeg decodes"):
        open_source(p)


def test_a_y4m_header_with_no_whole_frame_is_zero_frames(tmp_path):
    p = tmp_path / "big.y4m"
    p.write_bytes(b"YUV4MPEG2 W16000 H16000 F25:1 Ip A1:1 C420jpeg\nFRAME\n" + bytes(64))
    with pytest.raises(InputError, match="zero frames"):
        open_source(p)


def test_whole_y4m_counts_its_frames_without_a_warning(tmp_path):
    p = y4m(tmp_path / "three.y4m", 17, 9, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        src = open_source(p)
    assert src.info.frames == 3 and len(list(src.frames())) == 3


def test_a_truncated_y4m_names_the_frame_it_drops_once_decoded_to_its_end(tmp_path):
    """Said as any cut source is, when its end is reached (the run then warns once): nothing at open, so a
    decode error before the end is one error line and a run of frames before it says nothing."""
    p = y4m(tmp_path / "cut.y4m", 16, 12, 3, cut=16 * 12 * 3 // 4)  # 2.5 frames
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        src = open_source(p)
        assert src.info.frames == 2 and src.early_end is None
        first = src.frames()
        next(first)
        first.close()  # a run of frames before the end
        assert src.early_end is None
        assert [f.index for f in src.frames()] == [0, 1]
    assert src.early_end.message(p, 2) == (f"{p} ended early: by its size it ends 150 bytes into frame 2, which "
                                           "is dropped; 2 frames decoded, 2 written")


@pytest.mark.parametrize("ext,codec", [(".png", "png"), (".jpg", "mjpeg")])
def test_an_image_renamed_mp4_is_one_frame_with_a_warning(tmp_path, ext, codec):
    img = tmp_path / f"still{ext}"
    cv2.imwrite(str(img), np.full((12, 16, 3), 90, np.uint8))
    p = tmp_path / "still.mp4"
    shutil.copy(img, p)
    with pytest.warns(UserWarning, match=rf"still.mp4 is a still image \({codec}\), not a video") as rec:
        src = open_source(p)
    assert len(rec) == 1
    assert src.info.frames == 1 and len(list(src.frames())) == 1


def test_a_real_video_gives_no_warning(make_clip):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert open_source(make_clip("ok.mp4", frames=3)).info.frames == 3


def test_webm_without_duration_in_its_header_is_counted(make_clip, tmp_path):
    """A live-written WebM (as browsers' MediaRecorder makes) has no duration and no frame count."""
    src = make_clip("v.webm", codec="libvpx-vp9", frames=7)
    live = tmp_path / "live.webm"
    with av.open(str(src)) as ic, av.open(str(live), "w", format="webm", options={"live": "1"}) as oc:
        ist = ic.streams.video[0]
        ost = oc.add_stream_from_template(ist)
        for pkt in ic.demux(ist):
            if pkt.dts is not None:
                pkt.stream = ost
                oc.mux(pkt)
    with av.open(str(live)) as c:
        assert c.duration is None and not c.streams.video[0].frames and c.streams.video[0].duration is None
    info = open_source(live).info
    assert info.frames_estimate == 7


def _png_folder(folder, names):
    folder.mkdir()
    for k, name in enumerate(names):  # frame k's pixels say k
        cv2.imwrite(str(folder / name), np.full((4, 6, 3), 10 * (k + 1), np.uint8))
    return folder


def test_ffmpeg_numbered_frames_are_read_in_their_numbers_order(tmp_path):
    """``ffmpeg ... %d.png`` names 1.png .. 12.png; text order would put 10, 11, 12 before 2."""
    names = [f"{i}.png" for i in range(1, 13)]
    src = open_source(_png_folder(tmp_path / "f", names))
    values = [int(round(f.rgb[0, 0, 0] * 255)) for f in src.frames()]
    assert values == [10 * k for k in range(1, 13)]


def test_frames_whose_suffix_is_in_capitals_are_frames(tmp_path):
    """A camera's or a Windows tool's ``FRAME001.PNG``: the folder was "zero frames: no *.png files"."""
    src = open_source(_png_folder(tmp_path / "f", ["F001.PNG", "F002.png", "F003.Png"]))
    assert [int(round(f.rgb[0, 0, 0] * 255)) for f in src.frames()] == [10, 20, 30]


@pytest.mark.parametrize("names, message", [
    (["1.png", "2.png", "4.png", "5.png"], r"frame 3 missing \(2.png is followed by 4.png\)"),
    (["f001.png", "f002.png", "f006.png"], r"frames 3 to 5 missing"),
    (["1.png", "01.png", "2.png"], r"both number frame 1"),
])
def test_a_gap_in_the_numbers_is_an_error_naming_it(tmp_path, names, message):
    with pytest.raises(InputError, match=message):
        open_source(_png_folder(tmp_path / "f", names))


def test_names_of_no_one_pattern_are_in_natural_order(tmp_path):
    from vsr.video.png_frames import frame_files

    folder = _png_folder(tmp_path / "f", ["b10.png", "a2.png", "b9.png", "a10.png"])
    assert [p.name for p in frame_files(folder)] == ["a2.png", "a10.png", "b9.png", "b10.png"]


@pytest.mark.parametrize("name", ["song.mp3", "song.m4a"])
def test_a_song_with_only_cover_art_has_no_video(tmp_path, name):
    """Its picture is a one-frame "video" of a few microseconds beside the sound: it was upscaled as that, without a
    word; the film's own cover art (beside a real video) is kept, tests/video/test_extras.py."""
    import subprocess

    from tests.video.tools import ffmpeg

    cv2.imwrite(str(tmp_path / "cover.png"), np.full((24, 32, 3), 90, np.uint8))
    song = tmp_path / name
    subprocess.run([ffmpeg(), "-v", "error", "-f", "lavfi", "-i", "sine=d=0.5", "-i", str(tmp_path / "cover.png"),
                    "-map", "0", "-map", "1", "-c:v", "png", "-disposition:v", "attached_pic", str(song)], check=True)
    with pytest.raises(InputError, match=r"^no video stream in .*song\.m(p3|4a), only cover art \(an attached "
                                         r"picture\)$"):
        open_source(song)


def test_a_damaged_frame_is_recorded(tmp_path):
    """FFmpeg's decoder conceals a damaged frame and flags it ("corrupt decoded frame" in ffmpeg's log): it was
    upscaled without a word.  The source records it; a run says it at its end (tests/video/test_damage.py)."""
    import subprocess

    from tests.video.tools import ffmpeg

    clean = tmp_path / "clean.mkv"
    subprocess.run([ffmpeg(), "-v", "error", "-f", "lavfi", "-i", "testsrc2=s=64x48:r=10:d=2", "-c:v", "libx264",
                    "-g", "100", str(clean)], check=True)
    data = bytearray(clean.read_bytes())
    middle = len(data) // 2  # inside the first (the largest) frame
    data[middle:middle + 29] = bytes(b ^ 0xFF for b in data[middle:middle + 29])
    damaged = tmp_path / "damaged.mkv"
    damaged.write_bytes(bytes(data))
    for path, frames in ((clean, None), (damaged, 1)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            source = open_source(path)
            try:
                assert len(list(source.frames())) == 20
            finally:
                source.close()
        assert [str(w.message) for w in caught] == []
        assert (source.damage or {}).get("frames_with_errors") == frames, source.damage
        assert source.damage is None or source.damage["first_s"] == 0.0


def test_an_mp4_cut_before_its_first_frame_says_so(tmp_path):
    """Its index (moved to the front, +faststart) is whole, its data cut short: "no decodable video stream" was
    all it said."""
    import subprocess

    from tests.video.tools import ffmpeg

    whole = tmp_path / "whole.mp4"
    subprocess.run([ffmpeg(), "-v", "error", "-f", "lavfi", "-i", "testsrc2=s=64x48:r=10:d=2", "-c:v", "libx264",
                    "-movflags", "+faststart", str(whole)], check=True)
    data = whole.read_bytes()
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(data[:data.find(b"mdat") + 200])
    with pytest.raises(InputError, match=r"^no decodable frame in .*cut\.mp4: its header declares 20 frames, none "
                                         r"can be read \(a copy cut short\?\)$"):
        open_source(cut)


def test_a_source_whose_frames_carry_side_data_opens(make_clip):
    """x265 writes its version into each stream (an unregistered SEI, side data on the decoded frame); PyAV 18.1.1
    iterates a frame's side data as its types alone, and opening any such source was an AttributeError traceback."""
    from vsr.video.side_data import entries

    clip = make_clip("x265.mkv", width=64, height=48, frames=2, codec="libx265",
                     options={"x265-params": "log-level=error"})
    with av.open(str(clip)) as c:
        first = next(c.decode(video=0))
    assert [sd.type.name for sd in entries(first)] == ["SEI_UNREGISTERED"]
    assert b"x265" in bytes(entries(first)[0])
    source = open_source(clip)
    source.close()
    assert (source.info.width, source.info.height, source.info.hdr, source.info.dolby_vision) == (64, 48, None, None)


def test_a_still_image_with_exif_opens_and_keeps_its_orientation(tmp_path):
    """FFmpeg 8 hands a JPEG's EXIF to the frame as side data of a type (``EXIF``) newer than PyAV 18.1.0's
    list, which raised ValueError for the frame's whole side data (vsr asks for 18.1.1, which names it): opening
    a phone's JPEG must not be a traceback.  Its orientation (EXIF 6: turned 90 degrees) arrives as the frame's
    display matrix and is kept."""
    from PIL import Image

    from vsr.video.side_data import entries

    exif = Image.Exif()
    exif[0x0112] = 6  # Orientation: rotate 90 CW
    path = tmp_path / "phone.jpg"
    Image.fromarray(np.full((48, 64, 3), 128, np.uint8)).save(path, exif=exif)
    with av.open(str(path)) as c:
        names = [sd.type.name for sd in entries(next(c.decode(video=0)))]
    assert "DISPLAYMATRIX" in names and len(names) == 2
    with pytest.warns(UserWarning, match="still image"):
        source = open_source(path)
    source.close()
    assert (source.info.width, source.info.height) == (64, 48)
    assert source.info.display_matrix == (0, 65536, 0, -65536, 0, 0, 0, 0, 1 << 30)


def test_side_data_entries_keeps_each_entry_of_a_repeated_type(tmp_path):
    """A frame can carry two entries of one type (here x264's version SEI and one more unregistered SEI message);
    PyAV 18.1.1 iterates ``frame.side_data`` by type, once each, which kept the last alone."""
    from vsr.video.side_data import entries

    clip = tmp_path / "two_sei.mp4"
    subprocess.run(["ffmpeg", "-v", "error", "-f", "lavfi", "-i", "testsrc=s=64x48:r=25", "-frames:v", "2",
                    "-c:v", "libx264", "-bsf:v",
                    "h264_metadata=sei_user_data=086f3693-b7b3-4f2c-9653-21492feee5b8+hello", str(clip)],
                   check=True)
    with av.open(str(clip)) as c:
        found = entries(next(c.decode(video=0)))
    assert [sd.type.name for sd in found] == ["SEI_UNREGISTERED", "SEI_UNREGISTERED"]
    assert bytes(found[0])[16:20] == b"x264" and bytes(found[1])[16:21] == b"hello"


def test_an_mp4_cut_with_an_edit_list_is_whole(tmp_path):
    """``ffmpeg -ss ... -c copy`` (a phone's trim too) keeps the packets from the keyframe before the cut, which the
    header counts and the edit list leaves out: such a whole file was said to have ended early."""
    import subprocess

    from tests.video.tools import ffmpeg

    whole, cut = tmp_path / "whole.mp4", tmp_path / "cut.mp4"
    subprocess.run([ffmpeg(), "-v", "error", "-f", "lavfi", "-i", "testsrc2=s=64x48:r=25:d=1", "-c:v", "libx264",
                    "-g", "50", str(whole)], check=True)
    subprocess.run([ffmpeg(), "-v", "error", "-ss", "0.3", "-i", str(whole), "-c", "copy", "-t", "0.3", str(cut)],
                   check=True)
    source = open_source(cut)
    try:
        shown = len(list(source.frames()))
    finally:
        source.close()
    assert 0 < shown < source.info.header_frames and source.early_end is None
