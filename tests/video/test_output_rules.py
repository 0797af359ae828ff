"""What `vsr upscale` may replace or clean up: the overwrite rules, symlinked outputs, stale partials.

Every refused case must leave the whole folder tree exactly as it was (names, bytes, links), give one line and
exit 2; every allowed case must leave exactly the new output.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from vsr.cli import main
from vsr.errors import InputError
from vsr.video import EncoderSettings, check_output, open_sink, open_source
from vsr.video.output import MARKER, remove_stale_partials

TINY = ["--weights", "random", "--config", "edvr-tiny", "--backend", "torch", "--threads", "1", "--quiet"]


def snapshot(root: Path) -> dict[str, str]:
    """Every entry under ``root`` (hidden ones too) -> its kind and content hash or link target."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = "link:" + os.readlink(p)
            elif p.is_dir():
                out[rel] = "dir"
            else:
                out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def upscale(capsys, src, dst, *extra) -> tuple[int, list[str]]:
    rc = main(["upscale", str(src), str(dst), *TINY, "--frames", "0:2", *extra])
    err = capsys.readouterr().err
    return rc, [line for line in err.splitlines() if line.startswith("vsr: error:")]


def frames_folder(path: Path, n: int = 3, marker: bool = False) -> Path:
    path.mkdir(parents=True)
    for i in range(n):
        (path / f"{i:08d}.png").write_bytes(b"old frame %d" % i)
    if marker:
        (path / MARKER).write_text("written by vsr\n")
    return path


def _project(tmp_path, make_clip):
    """project/ with the input, keep.txt and a subtree; output: project itself."""
    proj = tmp_path / "project"
    proj.mkdir()
    src = make_clip("clip.mp4", frames=2)
    src.rename(proj / "clip.mp4")
    (proj / "keep.txt").write_text("mine\n")
    (proj / "sub" / "deeper").mkdir(parents=True)
    (proj / "sub" / "deeper" / "notes.md").write_text("notes\n")
    return proj / "clip.mp4", proj


def _input_only_folder(tmp_path, make_clip):
    """The output is the input's folder, which holds nothing else."""
    proj = tmp_path / "project"
    proj.mkdir()
    return make_clip("clip.mp4", frames=2).rename(proj / "clip.mp4"), proj


def _parent_of_input(tmp_path, make_clip):
    src, _ = _input_only_folder(tmp_path, make_clip)
    return src, tmp_path


def _stale_frames_with_other_file(tmp_path, make_clip):
    out = frames_folder(tmp_path / "frames", marker=True)
    (out / "keep.txt").write_text("mine\n")
    return make_clip("clip.mp4", frames=2), out


def _users_own_frames(tmp_path, make_clip):
    """Frames named as vsr names them (``ffmpeg -i x %08d.png``), without vsr's marker: the user's (issue 37)."""
    return make_clip("clip.mp4", frames=2), frames_folder(tmp_path / "frames", n=5)


def _frames_with_subfolder(tmp_path, make_clip):
    out = frames_folder(tmp_path / "frames")
    (out / "more").mkdir()
    return make_clip("clip.mp4", frames=2), out


def _frames_with_symlink(tmp_path, make_clip):
    out = frames_folder(tmp_path / "frames")
    (tmp_path / "precious.txt").write_text("mine\n")
    (out / "00000009.png").symlink_to(tmp_path / "precious.txt")
    return make_clip("clip.mp4", frames=2), out


def _home_folder(tmp_path, make_clip, monkeypatch):
    home = frames_folder(tmp_path / "home")  # frames only, so only the home rule refuses it
    monkeypatch.setenv("HOME", str(home))
    return make_clip("clip.mp4", frames=2), home


def _current_folder(tmp_path, make_clip, monkeypatch):
    here = frames_folder(tmp_path / "here")
    monkeypatch.chdir(here)
    return make_clip("clip.mp4", frames=2), Path(".")


def _link_to_refused_folder(tmp_path, make_clip):
    src, proj = _project(tmp_path, make_clip)
    (tmp_path / "link").symlink_to(proj)
    return src, tmp_path / "link"


def _file_where_frames_go(tmp_path, make_clip):
    (tmp_path / "notes").write_text("a file without a suffix\n")
    return make_clip("clip.mp4", frames=2), tmp_path / "notes"


def _broken_link(tmp_path, make_clip):
    (tmp_path / "out.mp4").symlink_to(tmp_path / "nowhere.mp4")
    return make_clip("clip.mp4", frames=2), tmp_path / "out.mp4"


REFUSED = {
    "folder holding the input, keep.txt and a subtree": (_project, "holds the input"),
    "the input's own folder": (_input_only_folder, "holds the input"),
    "a parent of the input": (_parent_of_input, "holds the input"),
    "marked frame folder with another file": (_stale_frames_with_other_file, "keep.txt"),
    "frame folder without vsr's marker": (_users_own_frames, f"carry no {MARKER} marker"),
    "frame folder with a subfolder": (_frames_with_subfolder, "more"),
    "frame folder with a link": (_frames_with_symlink, "00000009.png"),
    "home folder": (_home_folder, "home folder"),
    "current folder": (_current_folder, "current folder"),
    "symlink to a refused folder": (_link_to_refused_folder, "holds the input"),
    "a file where frames would go": (_file_where_frames_go, "is a file"),
    "broken symlink": (_broken_link, "broken symbolic link"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_overwrite_refuses_what_vsr_did_not_write_and_touches_nothing(case, tmp_path, make_clip, capsys,
                                                                      monkeypatch):
    build, why = REFUSED[case]
    args = (tmp_path, make_clip, monkeypatch) if case in ("home folder", "current folder") else (tmp_path, make_clip)
    src, dst = build(*args)
    before = snapshot(tmp_path)
    rc, errors = upscale(capsys, src, dst, "--overwrite")
    assert rc == 2 and len(errors) == 1, errors
    assert why in errors[0]
    assert snapshot(tmp_path) == before


def test_without_overwrite_an_existing_output_is_refused(tmp_path, make_clip, capsys):
    src = make_clip("clip.mp4", frames=2)
    out = frames_folder(tmp_path / "frames")
    before = snapshot(tmp_path)
    rc, errors = upscale(capsys, src, out)
    assert rc == 2 and len(errors) == 1 and "--overwrite" in errors[0]
    assert snapshot(tmp_path) == before


def _new_frames(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_overwrite_replaces_a_folder_of_frames_vsr_marked(tmp_path, make_clip, capsys):
    src = make_clip("clip.mp4", frames=2)
    out = frames_folder(tmp_path / "frames", n=5, marker=True)
    rc, errors = upscale(capsys, src, out, "--overwrite")
    assert rc == 0, errors
    assert _new_frames(out) == sorted(["00000000.png", "00000001.png", MARKER])  # old frames 2..4 gone
    assert not (out / "00000000.png").read_bytes().startswith(b"old frame")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clip.mp4", "frames"]  # nothing aside, no temporary


def test_a_folder_vsr_wrote_is_marked_and_can_be_replaced(tmp_path, make_clip, capsys):
    src = make_clip("clip.mp4", frames=2)
    out = tmp_path / "frames"
    assert upscale(capsys, src, out) == (0, [])
    assert (out / MARKER).is_file()
    first = snapshot(out)
    assert upscale(capsys, src, out, "--overwrite") == (0, [])
    assert snapshot(out) == first  # same input, same frames


def test_an_empty_folder_is_written_into_without_overwrite(tmp_path, make_clip, capsys):
    src = make_clip("clip.mp4", frames=2)
    (tmp_path / "frames").mkdir()
    assert upscale(capsys, src, tmp_path / "frames") == (0, [])
    assert _new_frames(tmp_path / "frames") == sorted(["00000000.png", "00000001.png", MARKER])


def test_overwrite_replaces_a_file(tmp_path, make_clip, capsys):
    src = make_clip("clip.mp4", frames=2)
    out = tmp_path / "out.mp4"
    out.write_bytes(b"an old output")
    assert upscale(capsys, src, out, "--overwrite") == (0, [])
    assert open_source(out).info.width == 4 * 24


@pytest.mark.parametrize("kind", ["folder", "file"])
def test_overwrite_through_a_symlink_replaces_its_target_and_keeps_the_link(tmp_path, make_clip, capsys, kind):
    src = make_clip("clip.mp4", frames=2)
    (tmp_path / "real").mkdir()
    if kind == "folder":
        target = frames_folder(tmp_path / "real" / "frames", n=4, marker=True)
        link = tmp_path / "frames-link"
    else:
        target = tmp_path / "real" / "out.mp4"
        target.write_bytes(b"an old output")
        link = tmp_path / "link.mp4"
    link.symlink_to(target)
    assert upscale(capsys, src, link, "--overwrite") == (0, [])
    assert link.is_symlink() and link.resolve() == target
    if kind == "folder":
        assert _new_frames(target) == sorted(["00000000.png", "00000001.png", MARKER])
    else:
        assert open_source(target).info.frames == 2
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == [target.name]


def test_commit_refuses_an_output_that_appeared_during_the_run(tmp_path, make_clip):
    src = make_clip("clip.mp4", frames=2)
    out = tmp_path / "frames"
    check_output(out, src, overwrite=False)
    source = open_source(src)
    sink = open_sink(out, source.info, EncoderSettings())
    sink.write(np.zeros((3, 64, 96), sink.plane_dtype()), 0, 1)
    out.mkdir()
    (out / "keep.txt").write_text("mine\n")
    with pytest.raises(InputError, match="keep.txt"):
        sink.commit()
    sink.abort()
    source.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clip.mp4", "frames"]
    assert _new_frames(out) == ["keep.txt"]


def _dead_pids(n: int) -> list[int]:
    """Ids of processes that have ended (and been reaped), so no run of vsr owns them."""
    procs = [subprocess.Popen([sys.executable, "-c", "pass"]) for _ in range(n)]
    for p in procs:
        p.wait()
    return [p.pid for p in procs]


def test_stale_partials_only_vsrs_own(tmp_path):
    (dead, dead1, dead2, dead3), alive = _dead_pids(4), os.getppid()
    out = tmp_path / "out.mp4"
    frames = tmp_path / "frames"
    gone = [tmp_path / f".out.vsr-partial-{dead}.mp4"]
    gone[0].write_bytes(b"partial video")
    frames_folder(gone_folder := tmp_path / f".frames.vsr-partial-{dead}", marker=True)
    kept = {
        f".out.vsr-partial-{alive}.mp4": "file",  # a run still going
        f".out.vsr-partial-0{dead}.mp4": "file",  # not the exact pattern
        f".out.vsr-partial-{dead}.mp4.bak": "file",
        f"out.vsr-partial-{dead}.mp4": "file",  # not hidden
        f".out.vsr-partial-{dead}.mkv": "file",  # another output's
        f".frames.vsr-partial-{dead}.mp4": "file",
        f".frames.vsr-partial-{dead1}": "frames without marker",
        f".frames.vsr-partial-{dead2}": "marked, with a user's file",
        f".frames.vsr-partial-{dead3}": "file named like a partial folder",
    }
    for name, kind in kept.items():
        p = tmp_path / name
        if kind == "file":
            p.write_bytes(b"not vsr's")
        elif kind == "frames without marker":
            frames_folder(p)
        elif kind == "marked, with a user's file":
            frames_folder(p, marker=True)
            (p / "keep.txt").write_text("mine\n")
        else:
            p.write_bytes(b"not vsr's")
    (tmp_path / f".out.vsr-partial-{dead1}.mp4").mkdir()  # a folder named like a video partial
    (tmp_path / f".out.vsr-partial-{dead2}.mp4").symlink_to(tmp_path / f"out.vsr-partial-{dead}.mp4")
    for p in tmp_path.iterdir():  # a day and more ago
        t = time.time() - 1.5 * 86400
        os.utime(p, (t, t), follow_symlinks=False)
    # written now: maybe a run on another host sharing the folder, whose process id means nothing here
    (tmp_path / f".out.vsr-partial-{dead3}.mp4").write_bytes(b"being written")
    before = snapshot(tmp_path)
    assert remove_stale_partials(out, frames=False) == gone
    assert remove_stale_partials(frames, frames=True) == [gone_folder]
    after = snapshot(tmp_path)
    removed = {k for k in before if k == gone[0].name or k.split("/")[0] == gone_folder.name}
    assert {k: v for k, v in before.items() if k not in removed} == after
    assert len(removed) == 1 + 5  # the video partial; the folder, its 3 frames and marker


def test_a_link_planted_at_the_temporary_name_is_never_written_through(tmp_path, make_clip, capsys):
    """The temporary name is predictable (the process id): FFmpeg opened it following a link planted there and
    overwrote the link's target with the video (a file of the user's, anywhere they may write)."""
    src = make_clip("clip.mp4", frames=2)
    victim = tmp_path / "elsewhere" / "notes.txt"
    victim.parent.mkdir()
    victim.write_text("the user's own notes")
    out = tmp_path / "out" / "o.mp4"
    out.parent.mkdir()
    (out.parent / f".o.vsr-partial-{os.getpid()}.mp4").symlink_to(victim)
    assert upscale(capsys, src, out) == (0, [])
    assert victim.read_text() == "the user's own notes"
    assert not out.is_symlink() and open_source(out).info.frames == 2
    assert [p.name for p in out.parent.iterdir()] == ["o.mp4"]  # the planted link removed, not followed
