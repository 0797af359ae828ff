"""A job's chunk folder in a shared output folder: links planted at ``.vsr-chunks`` or ``.vsr-chunks/<key>`` are
refused, never written through; a folder vsr did not make (no marker, another owner) is refused; a folder
renamed away while open is still the one written; a link planted at the output path is not replaced."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vsr.backends import BackendRequest, TorchOptions
from vsr.errors import InputError
from vsr.jobs import JobSpec, join_chunks, plan_job, run_chunk
from vsr.jobs.chunks import chunk_folder
from vsr.jobs.folder import MARKER, ChunkFolder
from vsr.pipeline.runner import RunnerSettings
from vsr.video import EncoderSettings

from tests.jobs.helpers import WindowBackend

REQUEST = BackendRequest("random", "edvr-tiny", TorchOptions(threads=1))


@pytest.fixture
def job(make_clip, tmp_path):
    src = make_clip("a.mp4", frames=6, seed=1)
    (tmp_path / "out").mkdir()
    spec, chunks = plan_job(JobSpec.from_settings(src, tmp_path / "out" / "a.mkv", REQUEST,
                                                  EncoderSettings(codec="ffv1"), RunnerSettings()), 3)
    victim = tmp_path / "victim"
    victim.mkdir()
    return spec, chunks, victim


def everything(folder):
    return sorted(p.relative_to(folder) for p in folder.rglob("*"))


def test_a_link_planted_at_the_key_folder_is_refused(job):
    spec, chunks, victim = job
    chunk_folder(spec).parent.mkdir()
    chunk_folder(spec).symlink_to(victim)
    with pytest.raises(InputError, match="it is a symbolic link or not a folder"):
        run_chunk(spec, chunks[0], backend=WindowBackend())
    assert everything(victim) == []


def test_a_link_planted_at_the_chunks_folder_is_refused(job):
    spec, chunks, victim = job
    (victim / spec.key).mkdir()  # even a folder of the right name behind the link
    (victim / spec.key / MARKER).write_text(spec.key)
    chunk_folder(spec).parent.symlink_to(victim)
    with pytest.raises(InputError, match=r"\.vsr-chunks: it is a symbolic link"):
        run_chunk(spec, chunks[0], backend=WindowBackend())
    assert everything(victim) == [Path(spec.key), Path(spec.key) / MARKER]


def test_a_folder_vsr_did_not_make_is_refused(job):
    spec, chunks, _ = job
    chunk_folder(spec).mkdir(parents=True)
    (chunk_folder(spec) / "00000.mkv").write_bytes(b"someone else's chunk")
    with pytest.raises(InputError, match="vsr did not make it"):
        run_chunk(spec, chunks[0], backend=WindowBackend())
    with pytest.raises(InputError, match="vsr did not make it"):
        join_chunks(spec, chunks)  # nor are its "chunks" ever joined


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root")
def test_a_folder_of_another_user_is_refused(job):
    spec, chunks, _ = job
    run_chunk(spec, chunks[0], backend=WindowBackend())
    os.chown(chunk_folder(spec), 54321, -1)
    with pytest.raises(InputError, match="belongs to another user"):
        run_chunk(spec, chunks[1], backend=WindowBackend())


def test_a_folder_renamed_away_while_open_is_still_the_one_written(job, tmp_path):
    spec, _, victim = job
    with ChunkFolder.open(spec.output, spec.key, create=True) as folder:
        moved = tmp_path / "out" / ".vsr-chunks" / "elsewhere"
        chunk_folder(spec).rename(moved)
        chunk_folder(spec).symlink_to(victim)  # and a link in its place
        folder.write_text("00000.json", "{}")
    assert (moved / "00000.json").read_text() == "{}" and everything(victim) == []
    assert oct(moved.stat().st_mode & 0o777) == "0o700"


def test_the_join_never_writes_through_a_link_at_the_output(job):
    spec, chunks, victim = job
    backend = WindowBackend()
    for c in chunks:
        run_chunk(spec, c, backend=backend)
    target = victim / "bashrc"
    target.write_text("mine\n")
    os.symlink(target, spec.output)
    with pytest.raises(InputError, match="it is a symbolic link"):
        join_chunks(spec, chunks)
    assert target.read_text() == "mine\n"
    os.unlink(spec.output)
    join_chunks(spec, chunks)
    assert os.path.isfile(spec.output) and not chunk_folder(spec).parent.exists()
