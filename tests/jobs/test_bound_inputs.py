"""A job is bound to its input at add: a replaced input (other size, or the same size and time but other
pictures) fails the job with one line naming the file before a chunk is computed from it, and the job never
joins chunks of two versions; the key covers the input's contents."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest

from vsr.backends import BackendRequest, TorchOptions
from vsr.cli import main
from vsr.jobs import JobSpec, join_chunks, plan_job, run_chunk
from vsr.jobs.chunks import chunk_folder, is_committed
from vsr.pipeline.runner import RunnerSettings
from vsr.video import EncoderSettings
from vsr.video.source import SourceChanged

from tests.jobs.helpers import WindowBackend, added_ids

REQUEST = BackendRequest("random", "edvr-tiny", TorchOptions(threads=1))
TINY = ["--weights", "random", "--config", "edvr-tiny", "--backend", "torch", "--codec", "ffv1", "--threads", "1"]


def bound(src, out, chunk_frames=4):
    return plan_job(JobSpec.from_settings(src, out, REQUEST, EncoderSettings(codec="ffv1"), RunnerSettings()),
                    chunk_frames)


def test_a_replaced_input_fails_the_next_chunk_before_it_computes_anything(make_clip, tmp_path):
    src = make_clip("a.mp4", frames=12, seed=1)
    spec, chunks = bound(src, tmp_path / "out" / "a.mkv")
    backend = WindowBackend()
    run_chunk(spec, chunks[0], backend=backend)
    calls = backend.calls
    make_clip("a.mp4", frames=12, seed=7)  # another clip of the same length at the same path
    with pytest.raises(SourceChanged) as e:
        run_chunk(spec, chunks[1], backend=backend)
    assert str(e.value).startswith(f"the input {src} changed since the job was added") and "\n" not in str(e.value)
    assert backend.calls == calls and not is_committed(spec, chunks[1])


def test_an_input_replaced_after_its_last_chunk_is_not_joined(make_clip, tmp_path):
    src = make_clip("a.mp4", frames=8, seed=1)
    spec, chunks = bound(src, tmp_path / "a.mkv")
    for c in chunks:
        run_chunk(spec, c, backend=WindowBackend())
    make_clip("a.mp4", frames=8, seed=4)  # its audio and timestamps would be joined with the old pictures
    with pytest.raises(SourceChanged, match="changed since the job was added"):
        join_chunks(spec, chunks)
    assert not (tmp_path / "a.mkv").exists()


def test_same_size_and_time_but_other_pictures_is_seen_by_the_pictures_a_chunk_decodes(make_clip, tmp_path):
    """The stat check passes for a file given back its old size and time; the keyframe and edge digests that
    each chunk checks while it decodes do not."""
    one, two = (make_clip(f"{i}.mp4", frames=12, seed=s).read_bytes() for i, s in ((1, 1), (2, 5)))
    big, small = (one, two) if len(one) >= len(two) else (two, one)
    src = tmp_path / "a.mp4"
    src.write_bytes(big)
    spec, chunks = bound(src, tmp_path / "a.mkv")
    st = os.stat(src)
    src.write_bytes(small + b"\0" * (len(big) - len(small)))  # zeros after the clip's end: the same size
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))  # and the same time
    assert os.stat(src).st_size == st.st_size
    backend = WindowBackend()
    with pytest.raises(SourceChanged, match=f"{src} has changed: its frame 0 is not the picture"):
        run_chunk(spec, chunks[0], backend=backend)
    assert not is_committed(spec, chunks[0])


def test_the_key_covers_the_input_contents(make_clip, tmp_path):
    src = make_clip("a.mp4", frames=6, seed=1)
    first, _ = bound(src, tmp_path / "a.mkv")
    make_clip("a.mp4", frames=6, seed=2)
    second, _ = bound(src, tmp_path / "a.mkv")
    assert first.source.digest != second.source.digest and first.key != second.key
    assert first.source.frames == second.source.frames == 6
    assert replace(first, source=None).key != first.key
    assert JobSpec.from_json(first.to_json()) == first  # the identity travels with the job


def test_each_chunk_checks_the_pictures_it_reads(make_clip, tmp_path):
    src = make_clip("a.mp4", frames=10, seed=1)
    _, chunks = bound(src, tmp_path / "a.mkv", chunk_frames=4)
    for c in chunks:
        frames = [i for i, _ in c.checks]
        assert frames == sorted(frames) and all(len(d) == 24 for _, d in c.checks)
        assert frames[0] <= c.start and frames[-1] >= c.stop - 1  # the first and last frames it reads (halo)
    assert chunks[0].checks[0][0] == 0  # frame 0, the clip's keyframe


def jobs(capsys, *args) -> tuple[int, str, str]:
    rc = main(["jobs", *map(str, args)])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_a_shorter_replacement_says_the_input_changed_not_frames(make_clip, tmp_path, capsys):
    """Issue 23: it said "--frames 15:20: the source has only 13 frames" where no --frames was given."""
    src = make_clip("a.mp4", frames=20, seed=1)
    store, out = tmp_path / "q.db", tmp_path / "out"
    rc, text, err = jobs(capsys, "add", src, "--out-dir", out, "--ext", "mkv", "--chunk-frames", 5, "--store",
                         store, *TINY)
    assert rc == 0, err
    make_clip("a.mp4", frames=13, seed=2)
    from vsr.jobs.store import JobStore
    from vsr.jobs.worker import WorkerSettings, work

    work(store, WorkerSettings(poll_s=0.05, until_empty=True, quiet=True))
    rows = json.loads(jobs(capsys, "list", "--json", "--store", store)[1])
    assert rows[0]["state"] == "failed" and "--frames" not in rows[0]["error"]
    assert rows[0]["error"].startswith(f"the input {src} changed since the job was added (its size differs)")
    assert not out.joinpath("a.mkv").exists() and not (out / ".vsr-chunks").exists()
    rc, _, err = jobs(capsys, "retry", added_ids(text)[0], "--store", store)
    assert rc == 2 and err.startswith(f"vsr: error: the input {src} changed") and len(err.splitlines()) == 1
    with JobStore(store) as s:
        assert s.job(1).state == "failed"


def test_a_job_is_never_joined_from_two_versions(make_clip, tmp_path):
    """Chunks committed from the first version stay in its key's folder; the job of the second version has
    another key, so its join can never take them."""
    src = make_clip("a.mp4", frames=8, seed=1)
    old, old_chunks = bound(src, tmp_path / "a.mkv")
    run_chunk(old, old_chunks[0], backend=WindowBackend())
    make_clip("a.mp4", frames=8, seed=3)
    new, new_chunks = bound(src, tmp_path / "a.mkv")
    assert chunk_folder(new) != chunk_folder(old)
    assert is_committed(old, old_chunks[0]) and not is_committed(new, new_chunks[0])


def test_list_does_not_count_the_chunks_a_replaced_input_dropped(make_clip, tmp_path, capsys):
    """The failed job's chunk folder is removed (its chunks are of a file that is gone), so list said
    "25% (5/20)", chunks 1/4, of chunks that no longer exist."""
    src = make_clip("a.mp4", frames=20, seed=1)
    store, out = tmp_path / "q.db", tmp_path / "out"
    rc, text, err = jobs(capsys, "add", src, "--out-dir", out, "--ext", "mkv", "--chunk-frames", 5, "--store",
                         store, *TINY)
    assert rc == 0, err
    from vsr.jobs.worker import WorkerSettings, work

    class Replacer:  # replaces the input as the second chunk starts: the first one is committed by then
        def phase(self, text, detail=None):
            if "chunk 1" in text and not hasattr(self, "done"):
                self.done = make_clip("a.mp4", frames=13, seed=2)

        def close(self):
            pass

    work(store, WorkerSettings(poll_s=0.05, until_empty=True, status=Replacer))
    capsys.readouterr()
    row = json.loads(jobs(capsys, "list", "--json", "--store", store)[1])[0]
    assert row["state"] == "failed" and row["error"].startswith(f"the input {src} changed"), row
    assert not (out / ".vsr-chunks").exists()
    assert (row["chunks_done"], row["frames_done"]) == (0, 0), row
