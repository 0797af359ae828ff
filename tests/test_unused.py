"""Cache entries no run used for UNUSED_DAYS are removed when another of their model is written (vsr.unused): files
and plan folders (whole), only this user's, never through a link, and never one a run marked used meanwhile."""

from __future__ import annotations

import os
import time

from vsr import unused
from vsr.unused import UNUSED_DAYS, mark_used, remove_unused


def _aged(path, days: float):
    t = time.time() - days * 86400
    os.utime(path, (t, t), follow_symlinks=False)
    return path


def _plan(folder, name: str, days: float, model: str = "m"):
    d = folder / name
    (d / "sub").mkdir(parents=True)
    (d / "manifest.json").write_text(f'{{"source": "{model}"}}')
    (d / "sub" / "segment00.onnx").write_bytes(b"x")
    return _aged(d, days)


def test_old_folders_are_removed_whole_and_links_never_followed(tmp_path):
    cache = tmp_path / "plans"
    cache.mkdir(mode=0o700)
    old, recent, other = _plan(cache, "a" * 24, 8), _plan(cache, "b" * 24, 6), _plan(cache, "c" * 24, 8, "n")
    outside = _plan(tmp_path, "d" * 24, 8)
    (cache / ("e" * 24)).symlink_to(outside)
    (old / "link").symlink_to(outside / "manifest.json")  # inside a folder removed: unlinked, not followed
    _aged(old, 8)  # (adding the link marked the folder)
    (cache / "f.txt").write_text("x")
    _aged(cache / "f.txt", 8)

    def belongs(fd: int) -> bool:
        with open(os.open("manifest.json", os.O_RDONLY, dir_fd=fd)) as f:
            return '"m"' in f.read()

    removed = remove_unused(cache, lambda n: len(n) == 24, UNUSED_DAYS, keep="k" * 24, belongs=belongs, folders=True)
    assert removed == ["a" * 24] and not os.path.lexists(old)
    assert sorted(os.listdir(cache)) == sorted(["b" * 24, "c" * 24, "e" * 24, "f.txt"])  # nothing left moved out
    assert (recent / "sub" / "segment00.onnx").is_file() and (other / "manifest.json").is_file()
    assert (outside / "manifest.json").is_file() and (outside / "sub" / "segment00.onnx").is_file()


def test_an_entry_a_run_marks_used_while_it_is_removed_is_put_back(tmp_path):
    """The run marks it (mark_used) after the check saw it unused, before it was moved out of its name: the
    check after the move sees the mark, and the entry is put back where the run will read it."""
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    plan = _plan(cache, "a" * 24, 1)
    (cache / "x.onnx").write_bytes(b"model")
    fd = os.open(cache, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert not unused._remove(fd, "a" * 24, UNUSED_DAYS) and not unused._remove(fd, "x.onnx", UNUSED_DAYS)
    finally:
        os.close(fd)
    assert sorted(os.listdir(cache)) == ["a" * 24, "x.onnx"]
    assert (plan / "sub" / "segment00.onnx").read_bytes() == b"x" and (cache / "x.onnx").read_bytes() == b"model"


def test_what_a_stopped_removal_left_is_removed(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    _plan(cache, f".{'a' * 24}.unused-123", 8)
    _plan(cache, f".{'b' * 24}.unused-123", 1)  # (one being put back)
    assert remove_unused(cache, lambda n: len(n) == 24) == []  # a cache of files: its folders are not its own
    assert remove_unused(cache, lambda n: len(n) == 24, folders=True) == [f".{'a' * 24}.unused-123"]
    assert os.listdir(cache) == [f".{'b' * 24}.unused-123"]


def test_nothing_is_removed_from_a_folder_others_can_write_or_through_a_link(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    _plan(cache, "a" * 24, 8)
    (tmp_path / "link").symlink_to(cache)
    assert remove_unused(tmp_path / "link", lambda n: True, folders=True) == []
    cache.chmod(0o777)
    assert remove_unused(cache, lambda n: True, folders=True) == [] and (cache / ("a" * 24)).is_dir()


def test_a_use_marks_an_entry_at_most_daily_never_through_a_link(tmp_path):
    entry = tmp_path / "e.onnx"
    entry.write_bytes(b"x")
    _aged(entry, 0.5)
    stamp = entry.stat().st_mtime
    mark_used(entry)
    assert entry.stat().st_mtime == stamp  # marked within the day: left as it is
    _aged(entry, 2)
    (tmp_path / "link").symlink_to(entry)
    mark_used(_aged(tmp_path / "link", 2))  # the link itself marked, not what it names
    assert time.time() - entry.stat().st_mtime > 86400
    mark_used(entry)
    assert time.time() - entry.stat().st_mtime < 60


def test_a_folder_writable_by_the_users_private_group_alone_is_pruned_a_shared_groups_is_not(tmp_path):
    """Under Ubuntu's umask 002 the cache folders a user makes are group-writable by their private group:
    remove_unused kept everything in them for good, although vsr.files.untrusted trusts such a folder."""
    import grp

    import pytest

    from vsr.files import own_group

    gid = os.getegid()
    if not own_group(gid, os.geteuid()):
        pytest.skip("this user's group is not a private one")
    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o770)
    (cache / "x-1.onnx").write_bytes(b"old")
    _aged(cache / "x-1.onnx", 8)
    assert remove_unused(cache, lambda n: n.startswith("x-")) == ["x-1.onnx"]
    shared = [g.gr_gid for g in grp.getgrall() if not own_group(g.gr_gid, os.geteuid())]
    if os.geteuid() == 0 and shared:  # (only root can give the folder a group of others)
        (cache / "x-2.onnx").write_bytes(b"old")
        _aged(cache / "x-2.onnx", 8)
        os.chown(cache, -1, shared[0])
        assert remove_unused(cache, lambda n: n.startswith("x-")) == [] and (cache / "x-2.onnx").is_file()
        cache.chmod(0o750)
        assert remove_unused(cache, lambda n: n.startswith("x-")) == ["x-2.onnx"]
