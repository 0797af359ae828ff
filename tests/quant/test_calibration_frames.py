"""``--int8-calibration DIR`` takes the folder's frames whatever the case of their suffix: a folder of ``*.PNG``
(a camera's, a Windows tool's) was refused as "no PNG frames in it", and its frames never calibrated a plan; so was
one of JPEG frames (``ffmpeg -i x.mp4 %04d.jpg``), which vsr upscale reads as it reads PNG."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from vsr.cli.common import check_calibration_folder
from vsr.errors import InputError
from vsr.quant.config import QuantConfig, calibration_windows


def _frames(folder, names):
    folder.mkdir()
    rng = np.random.default_rng(0)
    for name in names:
        kind = name[name.rfind("."):].lower()
        ok, png = cv2.imencode(kind if kind in (".png", ".jpg", ".jpeg") else ".png",
                               rng.integers(0, 256, (12, 16, 3), dtype=np.uint8))
        (folder / name).write_bytes(png.tobytes())
    return folder


def test_frames_whose_suffix_is_upper_case_calibrate(tmp_path):
    folder = _frames(tmp_path / "cal", ["f1.PNG", "f2.PNG", "f3.Png"])
    check_calibration_folder(str(folder))  # was: "no PNG frames in it"
    cfg = QuantConfig(calibration=str(folder), windows=2)
    assert cfg.fields()["calibration"]["frames"] == 3
    windows = calibration_windows(cfg, 2, 8, 8)
    assert windows.shape == (2, 1, 2, 3, 8, 8) and windows.std() > 0.1  # the frames, read


def test_frames_of_one_kind_count_and_a_folder_without_them_is_refused(tmp_path):
    from vsr.quant.config import calibration_frames

    folder = _frames(tmp_path / "cal", ["a.png", "b.PNG", "d.png.txt"])
    assert [p.name for p in calibration_frames(folder)] == ["a.png", "b.PNG"]
    jpegs = _frames(tmp_path / "jpegs", ["1.jpg", "2.JPEG", "3.jpg"])
    check_calibration_folder(str(jpegs))  # was: "no PNG frames in it"
    assert QuantConfig(calibration=str(jpegs), windows=1).fields()["calibration"]["frames"] == 3
    assert calibration_windows(QuantConfig(calibration=str(jpegs), windows=1), 3, 8, 8).std() > 0.1
    mixed = _frames(tmp_path / "mixed", ["1.png", "2.jpg"])
    with pytest.raises(InputError, match=r"holds PNG frames \(1.png\) and JPEG frames \(2.jpg\)"):
        check_calibration_folder(str(mixed))
    empty = _frames(tmp_path / "empty", ["a.png.txt"])
    with pytest.raises(InputError, match=r"no frames in it \(give a folder of PNG, JPEG, TIFF, BMP or WebP frames"):
        check_calibration_folder(str(empty))
    with pytest.raises(InputError, match="no frames"):
        QuantConfig(calibration=str(empty)).fields()


def test_calibration_frames_come_in_their_numbers_order(tmp_path):
    """FFmpeg's %d.png: text order read 1, 10, 11, 12, 2 ... and made calibration windows of frames far apart."""
    from vsr.quant.config import calibration_frames

    folder = _frames(tmp_path / "cal", [f"{i}.png" for i in range(1, 13)])
    assert [p.name for p in calibration_frames(folder)] == [f"{i}.png" for i in range(1, 13)]
