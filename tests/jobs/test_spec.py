"""``JobSpec`` is plain JSON: every backend's options (with bucket policies, tuples, None) survive a round trip
exactly, the key is a stable hash of what decides the chunks, and a spec that cannot be a job is one line."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

import pytest

from vsr.backends import BackendRequest, BucketPolicy, OrtOptions, SplitOptions, TorchOptions
from vsr.errors import InputError
from vsr.jobs import ChunkSpec, JobSpec
from vsr.jobs.spec import from_data, to_data
from vsr.pipeline.runner import RunnerSettings
from vsr.video import EncoderSettings

ENCODER = EncoderSettings(codec="libx264", crf=18.5, preset="slow", pix_fmt="yuv420p10le",
                          options=(("x264-params", "keyint=60"), ("tune", "film")), quiet=True)
RUNNER = RunnerSettings(batch=2, tile=128, overlap=8, memory_budget_mb=2048, queue=3, batch_wait_s=0.05,
                        stop_grace_s=1.5)
OPTIONS = [
    TorchOptions(device="cpu", threads=2, buckets=BucketPolicy(sizes=((180, 320), (240, 256)), align=4)),
    OrtOptions(threads=1, providers=("CPUExecutionProvider",), io_binding=False),
    SplitOptions(threads=2, bridge_ops=("DeformConv",), fuse_activations=False, cache_dir="/tmp/plans",
                 buckets=BucketPolicy(pad_mode="edge", max_pad=8)),
]


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: type(o).__name__)
def test_json_round_trip_is_exact_for_every_backend(options, tmp_path):
    spec = JobSpec.from_settings(tmp_path / "in.mp4", tmp_path / "out.mkv",
                                 BackendRequest("/w/edvr.pth", "edvr-m", options), ENCODER, RUNNER, overwrite=True)
    text = spec.to_json()
    back = JobSpec.from_json(json.loads(json.dumps(text)))  # as a message broker carries it
    assert back == spec and back.key == spec.key
    assert type(back.backend.options) is type(options) and back.settings() == spec.settings()
    assert json.loads(text)["backend"]["options"]["type"] == type(options).__name__


def test_defaults_round_trip_and_paths_are_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = JobSpec.from_settings("in.mp4", "out/x.mp4", BackendRequest(), EncoderSettings(), RunnerSettings())
    assert spec.input == str(tmp_path / "in.mp4") and spec.output == str(tmp_path / "out" / "x.mp4")
    assert JobSpec.from_json(spec.to_json()) == spec


def test_key_follows_what_decides_the_chunks():
    spec = JobSpec("/a/in.mp4", "/b/out.mkv", BackendRequest("random", "edvr-tiny"), ENCODER, RUNNER)
    assert spec.key == JobSpec.from_json(spec.to_json()).key and len(spec.key) == 16
    assert replace(spec, overwrite=True).key == spec.key
    for other in (replace(spec, output="/b/out2.mkv"), replace(spec, encoder=replace(ENCODER, crf=18.0)),
                  replace(spec, runner=replace(RUNNER, tile=64)),
                  replace(spec, backend=BackendRequest("random", "edvr-m"))):
        assert other.key != spec.key


def test_key_counts_the_weights_by_their_contents(tmp_path):
    """New weights at one path make a new key (their chunks differ); the same weights at two paths make one
    key (their chunks are the same, so a job may reuse them)."""
    import os
    import torch

    def job(weights) -> JobSpec:
        return JobSpec("/a/in.mp4", "/b/out.mkv", BackendRequest(str(weights), "edvr-tiny"), ENCODER, RUNNER)

    w = tmp_path / "w.pth"
    torch.save({"conv.weight": torch.zeros(4)}, w)
    before = job(w).key
    torch.save({"conv.weight": torch.ones(4)}, w)  # the same size: only the contents differ
    t = os.stat(w).st_mtime_ns + 1_000_000_000
    os.utime(w, ns=(t, t))
    assert job(w).key != before and job(w).key == job(w).key
    twin = tmp_path / "copy" / "w.pth"
    twin.parent.mkdir()
    twin.write_bytes(w.read_bytes())
    assert job(twin).key == job(w).key
    assert job(tmp_path / "missing.pth").key != job(tmp_path / "other.pth").key  # no file: the path counts
    assert job("random").key != job(w).key


def test_a_bundled_name_counts_as_its_file():
    from vsr.model.weights import DEFAULT_WEIGHTS

    if not DEFAULT_WEIGHTS.is_file():
        pytest.skip("this build bundles no default weights")
    spec = JobSpec("/a/in.mp4", "/b/out.mkv", BackendRequest("default", "edvr-m"), ENCODER, RUNNER)
    assert spec.key == replace(spec, backend=BackendRequest(str(DEFAULT_WEIGHTS), "edvr-m")).key


@dataclass(frozen=True)
class Cuts:
    threshold: float = 0.3
    min_frames: int = 12


@dataclass(frozen=True)
class Settings:
    batch: int = 1
    scene_cuts: Cuts | None = None
    frames: tuple[int, int | None] = (0, None)
    wait_s: float = 0.5


def test_a_field_added_to_a_settings_dataclass_travels_without_changes_here():
    value = Settings(4, Cuts(0.25, 8), (3, None), 2.0)
    data = json.loads(json.dumps(to_data(value)))
    assert data["scene_cuts"] == {"type": "Cuts", "threshold": 0.25, "min_frames": 8}
    back = from_data(Settings, data)
    assert back == value and type(back.wait_s) is float and back.frames == (3, None)


def test_chunk_spec_round_trip():
    chunk = ChunkSpec(3, 24, 32, decode_from=16, entry_pts=8192, entry_digest="ab" * 12)
    assert ChunkSpec.from_dict(json.loads(json.dumps(chunk.to_dict()))) == chunk


@pytest.mark.parametrize("text, message", [
    ("{", "not a vsr job"),
    ('{"type": "vsr-job/1", "input": "/a", "output": "/b.mp4", "colour": 1}', "has no field 'colour'"),
    ('{"type": "vsr-job/1", "input": "/a", "output": "/b.mp4", "backend": {"options": {"type": "Tpu"}}}',
     "'Tpu' is none of"),
    ('{"input": "/a", "output": "/b.mp4"}', "not a vsr job"),
])
def test_a_malformed_job_is_one_line(text, message):
    with pytest.raises(InputError, match=message):
        JobSpec.from_json(text)


def test_a_job_writes_a_video_file_of_all_or_some_frames():
    part = JobSpec("/a.mp4", "/b.mp4", runner=RunnerSettings(frames=(2, 9)))
    assert part.trimmed and not JobSpec("/a.mp4", "/b.mp4").trimmed
    assert part.key != JobSpec("/a.mp4", "/b.mp4").key
    with pytest.raises(InputError, match="PNG folders"):
        JobSpec("/a.mp4", "/frames")


def test_key_counts_the_config_by_its_contents(tmp_path):
    """An edited config TOML at one path makes a new key; a name and its configs/ file make the same key."""
    import os

    from vsr.model.config import config_dir

    def job(config) -> JobSpec:
        return JobSpec("/a/in.mp4", "/b/out.mkv", BackendRequest("random", config), ENCODER, RUNNER)

    c = tmp_path / "mine.toml"
    text = (config_dir() / "edvr-tiny.toml").read_text()
    c.write_text(text)
    assert job(str(c)).key == job("edvr-tiny").key
    before = job(str(c)).key
    c.write_text(text.replace("num_feat = 16", "num_feat = 17"))
    t = os.stat(c).st_mtime_ns + 1_000_000_000
    os.utime(c, ns=(t, t))
    assert "num_feat = 17" in c.read_text() and job(str(c)).key != before
    assert job(None).key != job("edvr-tiny").key


def test_a_job_without_a_budget_plans_within_the_same_one_on_every_machine(monkeypatch):
    """vsr upscale's default budget follows the machine; a job's does not: tiles change the output (within 1/255),
    so chunks run on machines with different memory must tile alike.  The default job's key is what it was."""
    import vsr.pipeline.memory as memory
    from vsr.jobs.spec import JOB_MEMORY_BUDGET_MB

    keys = set()
    for total in (2_000.0, 60_000.0):
        monkeypatch.setattr(memory, "total_memory_mb", lambda: total)
        spec = JobSpec("/a/in.mp4", "/b/out.mkv", BackendRequest("random", "edvr-tiny"), ENCODER, RunnerSettings())
        assert spec.runner.memory_budget_mb == JOB_MEMORY_BUDGET_MB == 3072
        keys.add(spec.key)
    fixed = JobSpec("/a/in.mp4", "/b/out.mkv", BackendRequest("random", "edvr-tiny"), ENCODER,
                    RunnerSettings(memory_budget_mb=3072))
    assert keys == {fixed.key}
    assert JobSpec.from_json(fixed.to_json()).runner.memory_budget_mb == 3072
