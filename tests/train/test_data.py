"""Training pairs: deterministic from (seed, iteration), true HR centre frames, LR = MATLAB bicubic x1/4."""

from __future__ import annotations

import numpy as np
import pytest

from vsr.quality.resize import bicubic_downscale_x4
from vsr.train.data import FramePool, PairSampler, find_sources, synth_window


@pytest.fixture
def clip(make_clip):
    return make_clip("train.mp4", width=48, height=40, frames=12)


def sampler(clip, seed=0, **kw):
    pool = FramePool(find_sources([clip]), segments_per_video=3, segment_length=5, region=40)
    return PairSampler(pool, num_frame=3, lr_patch=8, batch_size=3, seed=seed, **kw)


def test_batch_shapes_and_range(clip):
    lr, hr = sampler(clip).batch(0)
    assert lr.shape == (3, 3, 3, 8, 8) and hr.shape == (3, 3, 32, 32)
    assert lr.dtype == hr.dtype == np.float32
    assert 0 <= lr.min() and lr.max() <= 1 and hr.std() > 0.05


def test_batches_depend_only_on_seed_and_iteration(clip):
    a, b = sampler(clip), sampler(clip)
    b.batch(7)  # visiting other iterations first must not change what iteration 3 yields
    for x, y in zip(a.batch(3), b.batch(3)):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a.batch(3)[1], a.batch(4)[1])
    assert not np.array_equal(a.batch(3)[1], sampler(clip, seed=1).batch(3)[1])


def test_lr_centre_frame_is_bicubic_of_hr(clip):
    lr, hr = sampler(clip).batch(5)
    for k in range(3):
        hr8 = np.round(hr[k].transpose(1, 2, 0) * 255).astype(np.uint8)
        lr8 = np.round(lr[k, 1].transpose(1, 2, 0) * 255).astype(np.uint8)
        np.testing.assert_array_equal(bicubic_downscale_x4(hr8), lr8)


def test_holdout_frames_are_never_sampled(clip):
    src = find_sources([clip], holdout=0.25)
    (v,) = src.videos
    assert (v.frames, v.usable) == (12, range(0, 9))


def test_synthetic_motion_centre_is_exact_crop_and_neighbours_move():
    rng = np.random.default_rng(0)
    img = rng.integers(0, 256, (120, 130, 3), dtype=np.uint8)
    win = synth_window(img, 5, 32, np.random.default_rng(3))
    assert win.shape == (5, 32, 32, 3)
    c = win[2]
    hits = [(y, x) for y in range(120 - 31) for x in range(130 - 31)
            if img[y, x, 0] == c[0, 0, 0] and np.array_equal(img[y:y + 32, x:x + 32], c)]
    assert len(hits) == 1
    assert all(not np.array_equal(win[t], c) for t in (0, 1, 3, 4))


def test_videos_decode_through_opencv_where_pyav_is_absent(make_clip, monkeypatch):
    """The GPU image has OpenCV and no PyAV (whose wheel does not fit beside a training slice's checkpoint): the
    training data reads videos through OpenCV's FFmpeg reader there -- the same frames, count and size as PyAV
    gives (H.264 4:2:0 and FFV1 4:4:4 clips), and a file neither can read is one InputError."""
    import sys

    from vsr.errors import InputError
    from vsr.train.data import count_frames, decode_frames, video_size

    for clip in (make_clip("h264.mp4", width=48, height=40, frames=7),
                 make_clip("ffv1.mkv", codec="ffv1", pix_fmt="yuv444p", width=36, height=28, frames=5)):
        wanted = {0: [(0, 0, 8, 12)], 3: [(4, 6, 16, 20), (0, 0, 28, 36)], 4: [(2, 2, 4, 4)]}
        with_pyav = (count_frames(clip), video_size(clip), decode_frames(clip, wanted))
        with monkeypatch.context() as m:
            m.setitem(sys.modules, "av", None)  # `import av` raises ImportError, as with gpu_train.py's stand-in
            without = (count_frames(clip), video_size(clip), decode_frames(clip, wanted))
        assert with_pyav[:2] == without[:2] and with_pyav[0] >= 5
        assert with_pyav[2].keys() == without[2].keys() and len(without[2]) == 4
        assert all(np.array_equal(with_pyav[2][k], without[2][k]) for k in without[2])
    bad = clip.with_name("bad.mp4")
    bad.write_bytes(b"\0" * 4096)
    for blocked in (False, True):
        with monkeypatch.context() as m:
            if blocked:
                m.setitem(sys.modules, "av", None)
            with pytest.raises(InputError, match="not a video file: .*bad.mp4"):  # as vsr bench and preview say
                count_frames(bad)


def test_holdout_frames_are_written_into_the_runs_folder_never_through_a_link(clip, tmp_path):
    """The held-out tail as PNG ground truth (the frames PyAV decodes); a link planted at a frame's name is
    replaced (cv2.imwrite wrote through it), a link at the set's folder refused."""
    import cv2

    from vsr.errors import InputError
    from vsr.train.data import decode_frames
    from vsr.train.validate import holdout_sets

    src = find_sources([clip], holdout=0.25)
    (v,) = src.videos
    victim = tmp_path / "victim.png"
    victim.write_bytes(b"keep")
    d = tmp_path / "run" / "holdout" / f"holdout0_{clip.stem}"
    d.mkdir(parents=True)
    (d / "00000000.png").symlink_to(victim)
    [s] = holdout_sets(src.videos, tmp_path / "run" / "holdout")
    assert victim.read_bytes() == b"keep" and not (d / "00000000.png").is_symlink()
    tail = decode_frames(clip, {i: [(0, 0, 40, 48)] for i in range(9, 12)})
    for j, i in enumerate(range(9, 12)):
        got = cv2.cvtColor(cv2.imread(str(d / f"{j:08d}.png")), cv2.COLOR_BGR2RGB)
        np.testing.assert_array_equal(got, tail[(i, 0, 0, 40, 48)])
    other = tmp_path / "other"
    other.mkdir()
    elsewhere = tmp_path / "run2" / "holdout"
    elsewhere.mkdir(parents=True)
    (elsewhere / f"holdout0_{clip.stem}").symlink_to(other, target_is_directory=True)
    with pytest.raises(InputError, match="symbolic link"):
        holdout_sets(src.videos, elsewhere)
    assert not any(other.iterdir())
    planted = tmp_path / "run3" / "holdout"  # a link at the sets' folder itself: its target got the frames
    planted.parent.mkdir()
    planted.symlink_to(other, target_is_directory=True)
    with pytest.raises(InputError, match="symbolic link"):
        holdout_sets(src.videos, planted)
    assert not any(other.iterdir())


@pytest.mark.parametrize("data", ["d", "ABS/d", "./d/"])
@pytest.mark.parametrize("exclude, left", [
    ("d/sub/b.png", ["a.png", "c.png"]),  # a fragment of the path as --data spells it (or of a path holding it)
    ("B.PNG", ["a.png", "c.png"]),  # case-insensitively
    ("./d/sub/b.png", ["a.png", "c.png"]),
    ("ABS/d/sub/b.png", ["a.png", "c.png"]),
    ("../w/d/sub/", ["a.png"]),  # a folder: everything under it
    ("link", ["a.png"]),  # a link to the folder
])
def test_an_exclude_leaves_out_the_file_or_folder_it_names_however_spelt(tmp_path, monkeypatch, data, exclude,
                                                                         left):
    """(an --exclude was a fragment of the path as --data spelt it: ./d/sub/b.png, an absolute path or ../w/d/sub
    beside --data d excluded nothing, and the run trained on the files the user had left out)"""
    import cv2

    from vsr.train.data import list_files

    work = tmp_path / "w"
    (work / "d" / "sub").mkdir(parents=True)
    for name in ("d/a.png", "d/sub/b.png", "d/sub/c.png"):
        cv2.imwrite(str(work / name), np.zeros((8, 8, 3), np.uint8))
    (work / "link").symlink_to("d/sub")
    monkeypatch.chdir(work)
    data, exclude = (p.replace("ABS", str(work)) for p in (data, exclude))
    images, videos = list_files([data], ("vid4", exclude))
    assert [p.name for p in images] == left and videos == []


def test_an_exclude_that_leaves_out_nothing_is_said(tmp_path):
    """A mistyped --exclude (d/sub/bb.png) left out nothing without a word: the run trained on the file it was
    meant to leave out.  Said once per such exclude; the always-excluded vid4 is not (a clone alone has no Vid4)."""
    import cv2

    from vsr.train.data import list_files

    for name in ("a.png", "b.png"):
        cv2.imwrite(str(tmp_path / name), np.zeros((8, 8, 3), np.uint8))
    with pytest.warns(UserWarning) as said:
        images, _ = list_files([tmp_path], ("vid4", "bb.png", "b.png", str(tmp_path / "nope")))
    assert [p.name for p in images] == ["a.png"]
    assert [str(w.message) for w in said] == [
        f"--exclude {x!r} leaves out nothing in {tmp_path}: no image's or video's path there holds it or is under it"
        for x in ("bb.png", str(tmp_path / "nope"))]
