"""Scene cuts: the detector finds a hard cut between two real clips and none inside one, decides every cut from a
bounded neighbourhood (so a chunked run sees the cuts a single pass sees), and no window crosses a cut: the
frames next to the cut come out as if each clip were upscaled alone."""

from __future__ import annotations

import json
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np
import pytest

from tests.data import NEEDS_SHARED, REDS, VIDEOS
from vsr.errors import ConfigError, InputError
from vsr.pipeline import RunnerSettings, upscale
from vsr.pipeline.scenes import (CUT_CONTEXT, WINDOW, CutDetector, CutRule, detect_cuts, mark_listed,
                                 read_cut_file)
from vsr.pipeline.windows import scene_window_indices, window_indices, windows
from vsr.report import load as report_load
from vsr.report.render import render_text
from vsr.video.source import SourceFrame

BBB = VIDEOS / "vp9_320x180_30fps_10s_bbb.webm"
H, W = 64, 96


def reds(n: int) -> list[np.ndarray]:
    """The first ``n`` REDS frames, a 64x96 crop, uint8 (H, W, 3) RGB."""
    paths = sorted(REDS.glob("*.png"))[:n]
    if len(paths) < n:
        pytest.skip(NEEDS_SHARED)
    return [cv2.imread(str(p))[40:40 + H, 100:100 + W, ::-1].copy() for p in paths]


def bbb(first: int, n: int) -> list[np.ndarray]:
    """Frames ``first..first+n-1`` of the Big Buck Bunny clip, the same crop."""
    if not BBB.exists():
        pytest.skip(NEEDS_SHARED)
    out = []
    with av.open(str(BBB)) as c:
        for i, f in enumerate(c.decode(video=0)):
            if i >= first:
                out.append(f.to_ndarray(format="rgb24")[60:60 + H, 100:100 + W].copy())
            if len(out) == n:
                break
    return out


def as_frames(rgb: list[np.ndarray]) -> list[SourceFrame]:
    return [SourceFrame(i, i, 1, f.transpose(2, 0, 1).astype(np.float32) / 255) for i, f in enumerate(rgb)]


def write_ffv1(path: Path, rgb: list[np.ndarray]) -> Path:
    """A lossless clip (FFV1, yuv444p, 25 fps) of ``rgb`` frames."""
    with av.open(str(path), "w") as oc:
        vs = oc.add_stream("ffv1", rate=Fraction(25))
        vs.width, vs.height, vs.pix_fmt = W, H, "yuv444p"
        for i, f in enumerate(rgb):
            frame = av.VideoFrame.from_ndarray(f, format="rgb24").reformat(format="yuv444p")
            frame.pts = i
            oc.mux(vs.encode(frame))
        oc.mux(vs.encode(None))
    return path


def read_out(folder: Path) -> list[np.ndarray]:
    return [cv2.imread(str(p)) for p in sorted(folder.glob("*.png"))]


# -- the detector ----------------------------------------------------------------------------------------------
def test_a_hard_cut_between_two_real_clips_is_found_and_nothing_inside_either():
    a, b = reds(8), bbb(30, 8)
    assert detect_cuts(as_frames(a + b)) == [8]
    assert detect_cuts(as_frames(a)) == [] and detect_cuts(as_frames(b)) == []
    assert detect_cuts(as_frames(a + b), CutRule(threshold=1e6)) == []  # the threshold is what decides


def test_each_cut_is_decided_from_its_bounded_neighbourhood():
    """A run that starts decoding CUT_CONTEXT frames before a boundary, or stops CUT_CONTEXT - 1 after it, decides
    it as a pass over the whole clip does: a chunked run with that halo sees the same cuts."""
    clip = as_frames(reds(7) + bbb(30, 6) + reds(21)[14:21])  # cuts at 7 and 13
    whole = {f.index: cut for f, cut in CutDetector().mark(clip)}
    assert [k for k, cut in whole.items() if cut] == [7, 13]
    for first in range(1, len(clip)):
        for stop in range(first + 1, len(clip) + 1):
            part = dict((f.index, cut) for f, cut in CutDetector().mark(clip[first:stop]))
            assert list(part) == list(range(first, stop))  # every frame comes out once, in order
            for k, cut in part.items():
                if k >= first + CUT_CONTEXT and (k + CUT_CONTEXT - 1 < stop or stop == len(clip)):
                    assert cut == whole[k], (first, stop, k)
                elif k < first + CUT_CONTEXT:
                    assert not cut  # undecidable there: never a cut
    assert CUT_CONTEXT == WINDOW + 1


def test_the_rule_comes_from_the_config_and_a_broken_config_is_one_error(tmp_path):
    rule = CutRule.load()
    assert rule.threshold > 1 and rule.min_score > 0
    assert CutRule.load(threshold=7.5) == CutRule(7.5, rule.min_score)
    bad = tmp_path / "scenes.toml"
    bad.write_text("threshold = 'high'\n")
    with pytest.raises(ConfigError, match="malformed scene-cut config"):
        CutRule.load(bad)


def test_a_cut_file_lists_frame_indices(tmp_path):
    p = tmp_path / "cuts.txt"
    p.write_text("# shots\n120\n48, 300  # two more\n\n48\n")
    assert read_cut_file(p) == (48, 120, 300)
    p.write_text("12\n1.5\n")
    with pytest.raises(InputError, match="line 2: '1.5' is not a frame index"):
        read_cut_file(p)
    with pytest.raises(InputError, match="cannot read --scene-cuts file"):
        read_cut_file(tmp_path / "missing.txt")


# -- windows -------------------------------------------------------------------------------------------------
def numbered(n: int) -> list[SourceFrame]:
    return [SourceFrame(i, i, 1, np.full((3, 2, 2), i, np.float32)) for i in range(n)]


@pytest.mark.parametrize("padding", ["reflection_circle", "replicate"])
@pytest.mark.parametrize("num_frame", [3, 5, 7])
def test_no_window_crosses_a_cut_each_scene_is_padded_as_a_clip(padding, num_frame):
    n, cuts = 24, [5, 6, 9, 17]  # a one-frame scene, a three-frame one, longer ones
    bounds = [0] + cuts + [n]
    got = list(windows(mark_listed(numbered(n), cuts), num_frame, padding, scenes=True))
    assert [w.index for w in got] == list(range(n))
    for w in got:
        a = max(b for b in bounds if b <= w.index)
        b = min(b for b in bounds if b > w.index)
        want = [a + j for j in window_indices(w.index - a, b - a, num_frame, padding)]
        assert list(w.sources) == want == scene_window_indices(w.index, n, num_frame, padding, cuts)
        assert [int(f[0, 0, 0]) for f in w.frames] == want


@pytest.mark.parametrize("start,stop", [(0, 24), (6, 11), (10, 18), (17, 20)])
def test_frames_a_to_b_with_cuts_match_the_whole_run(start, stop):
    """The windows of output frames start..stop-1 are those of a whole run, from the frames the runner decodes."""
    n, cuts, num_frame = 24, [5, 6, 9, 17], 5
    whole = {w.index: w.sources for w in windows(mark_listed(numbered(n), cuts), num_frame, "reflection_circle",
                                                      scenes=True)}
    first = max(start - 2 * (num_frame // 2), 0)
    part = list(windows(mark_listed(numbered(n)[first:], cuts), num_frame, "reflection_circle", start, stop,
                        scenes=True))
    assert {w.index: w.sources for w in part} == {k: whole[k] for k in range(start, stop)}


# -- the runner: the "done means" of the issue ----------------------------------------------------------------
def test_with_cuts_the_frames_next_to_a_cut_equal_each_clip_upscaled_alone(tmp_path, tiny_backend):
    a, b = reds(6), bbb(30, 6)
    joined = write_ffv1(tmp_path / "joined.mkv", a + b)
    alone = [upscale(write_ffv1(tmp_path / f"{k}.mkv", x), tmp_path / f"out_{k}", backend=tiny_backend)
             for k, x in (("a", a), ("b", b))]
    assert [r.settings["scene_cuts"]["cuts"] for r in alone] == [[], []]
    report = upscale(joined, tmp_path / "on", backend=tiny_backend)
    off = upscale(joined, tmp_path / "off", backend=tiny_backend, runner=RunnerSettings(scene_cuts="off"))
    assert report.settings["scene_cuts"]["cuts"] == [6] and off.settings["scene_cuts"] == {"mode": "off"}
    want = read_out(tmp_path / "out_a") + read_out(tmp_path / "out_b")
    on, across = read_out(tmp_path / "on"), read_out(tmp_path / "off")
    assert len(on) == len(across) == len(want) == 12
    for i in range(12):
        assert np.array_equal(on[i], want[i]), i  # bit-identical, the frames next to the cut included
    r = tiny_backend.num_frame // 2
    for i in range(6 - r, 6 + r):  # across the cut, the other shot leaks in
        assert not np.array_equal(across[i], want[i]), i
    for i in [0, 11]:  # far from it, nothing changes
        assert np.array_equal(across[i], want[i])


def test_a_run_of_frames_a_to_b_sees_the_cuts_of_the_whole_run(tmp_path, tiny_backend):
    joined = write_ffv1(tmp_path / "joined.mkv", reds(6) + bbb(30, 6))
    upscale(joined, tmp_path / "whole", backend=tiny_backend)
    part = upscale(joined, tmp_path / "part", backend=tiny_backend, runner=RunnerSettings(frames=(5, 8)))
    assert part.settings["scene_cuts"]["cuts"] == [6]
    assert all(np.array_equal(x, y) for x, y in zip(read_out(tmp_path / "part"), read_out(tmp_path / "whole")[5:8]))


def test_the_cuts_show_in_vsr_report(tmp_path, tiny_backend):
    joined = write_ffv1(tmp_path / "joined.mkv", reds(3) + bbb(30, 3))
    report = upscale(joined, tmp_path / "list", backend=tiny_backend,
                     runner=RunnerSettings(scene_cuts="list", scene_list=(2, 3, 40)))
    text = render_text(report_load.parse_run(report.to_dict(), "run.json"))
    assert "scene cuts (list): 2, before frames 2, 3" in text  # 40 is past the clip's end


# -- the command line ---------------------------------------------------------------------------------------
def vsr_upscale(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vsr", "upscale", *args, "--weights", "random", "--config",
                           "edvr-tiny", "--backend", "torch", "--quiet"], capture_output=True, text=True, cwd=cwd,
                          timeout=600)


def test_scene_cuts_from_a_file_reach_the_report(tmp_path, make_clip):
    clip = make_clip("clip.mp4", width=24, height=16, frames=4)
    (tmp_path / "cuts.txt").write_text("2  # the second shot\n")
    res = vsr_upscale(str(clip), "out.mp4", "--scene-cuts", "cuts.txt", "--report", "run.json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert json.loads((tmp_path / "run.json").read_text())["settings"]["scene_cuts"] == {"mode": "list", "cuts": [2]}


@pytest.mark.parametrize("args,message", [
    (["--scene-threshold", "0"], "--scene-threshold must be a positive number"),
    (["--scene-threshold", "high"], "--scene-threshold must be a number"),
    (["--scene-cuts", "off", "--scene-threshold", "2"], "--scene-threshold applies to --scene-cuts auto only"),
])
def test_bad_scene_options_are_one_line(tmp_path, make_clip, args, message):
    clip = make_clip("clip.mp4", width=24, height=16, frames=3)
    res = vsr_upscale(str(clip), "out.mp4", *args, cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and message in res.stderr, res.stderr
    assert list(tmp_path.iterdir()) == [clip]
