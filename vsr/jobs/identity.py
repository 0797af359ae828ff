"""What a job's input was when the job was added, and the check that it still is.

A job is bound to its input at ``vsr jobs add``: the file's size and modification time, and a digest of its
video stream (its frame count, and each keyframe's timestamp and decoded picture, from the decode that planning
makes anyway, :func:`vsr.video.seek.scan_video`).  The digest is part of the job's key, so the chunks of two
versions of an input never share a folder.  Before every chunk and before the join (and again before either is
committed) the size and modification time must still be those recorded; each chunk also checks, while it
decodes, the pictures of the keyframes and of the first and last frames it reads against the same decode
(:class:`ChunkSpec.checks <vsr.jobs.spec.ChunkSpec>`).  A changed input fails its job with one line naming the
file, before a chunk is computed from it; a job is never joined from two versions of its input.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from vsr.files import sha256_file
from vsr.video.png_frames import frame_paths
from vsr.video.seek import VideoScan
from vsr.video.source import SourceChanged


@dataclass(frozen=True)
class InputIdentity:
    """A job's input as it was added: ``size`` (bytes; a PNG folder: its frames' total), ``mtime_ns`` (the
    file's modification time; a folder: the latest of the folder's and its frames'), ``frames`` and ``digest``
    (``sha256:`` of the video stream's keyframes, or of a folder's frame files)."""

    size: int
    mtime_ns: int
    frames: int
    digest: str


def stat_of(path: str | os.PathLike) -> tuple[int, int]:
    """(size, mtime_ns) of a file, or of a folder of PNG frames (its frames' total size, and the latest
    modification time of the folder and its frames: adding, removing or renaming a frame changes the folder's)."""
    path = Path(path)
    st = path.stat()
    if not path.is_dir():
        return st.st_size, st.st_mtime_ns
    frames = [p.stat() for p in sorted(frame_paths(path))]
    return sum(f.st_size for f in frames), max([st.st_mtime_ns, *(f.st_mtime_ns for f in frames)])


def video_identity(path: Path, scan: VideoScan, before: tuple[int, int]) -> InputIdentity:
    """The identity of the video file ``path``, whose stat was ``before`` when ``scan`` (a decode from the top)
    began; a file that changed during the scan is :class:`~vsr.video.source.SourceChanged`."""
    _same(path, before, "while it was being read")
    keys = [[k, scan.pts[k], scan.digests[k]] for k in scan.keyframes]
    digest = hashlib.sha256(json.dumps({"frames": scan.frames, "keyframes": keys}).encode()).hexdigest()
    return InputIdentity(before[0], before[1], scan.frames, "sha256:" + digest)


def folder_identity(path: Path, frames: int) -> InputIdentity:
    """The identity of a folder of PNG frames: every frame file's name and contents."""
    before = stat_of(path)
    h = hashlib.sha256()
    for p in sorted(frame_paths(path)):
        h.update(json.dumps([p.name, sha256_file(p)]).encode())
    _same(path, before, "while it was being read")
    return InputIdentity(before[0], before[1], frames, "sha256:" + h.hexdigest())


def check_unchanged(input: str, identity: InputIdentity | None) -> None:
    """:class:`~vsr.video.source.SourceChanged` naming ``input`` when its size or modification time is not that
    of ``identity``
    (None: a job made without one, by a library call, is not checked)."""
    if identity is not None:
        _same(Path(input), (identity.size, identity.mtime_ns), "since the job was added")


def _same(path: Path, expected: tuple[int, int], when: str) -> None:
    try:
        now = stat_of(path)
    except OSError as e:
        raise SourceChanged(f"the input {path} is gone {when} ({e.strerror}); the job's chunks come from the "
                            "file as it was") from None
    if now != expected:
        what = "size" if now[0] != expected[0] else "modification time"
        raise SourceChanged(f"the input {path} changed {when} (its {what} differs): a job upscales the file it "
                            "was added with; add the new one as a new job")
