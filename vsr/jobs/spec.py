"""``JobSpec``: one ``vsr upscale`` run as plain JSON data (what a queue stores and Celery sends), and
``ChunkSpec``: the part of it that one chunk computes.

The settings dataclasses (:class:`~vsr.backends.BackendRequest` with its options, :class:`EncoderSettings`,
:class:`RunnerSettings`) are serialised field by field from their type hints, so a field added to any of them
travels with the job without a change here.  Every dataclass is written with its class name (``"type"``), which
picks the right member of a union such as :data:`vsr.backends.BackendOptions`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import stat
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path

from vsr.backends import BackendRequest
from vsr.errors import InputError
from vsr.files import sha256_once
from vsr.jobs.identity import InputIdentity
from vsr.model.config import config_path
from vsr.model.weights import bundled_path
from vsr.pipeline.runner import RunnerSettings
from vsr.video import EncoderSettings

JOB_FORMAT = "vsr-job/1"
# A job without --memory-budget plans within this, on every machine: not a share of the memory of the machine
# that adds it or runs it, as vsr upscale's default is.  The budget picks the tiles, and tiles change the output
# (within 1/255: a tile sees 16 LR pixels of context, EDVR's receptive field is wider), so a budget that followed
# each worker would join chunks tiled differently, and one that followed the adding machine would give each of
# `jobs run --workers N` that much.  `vsr jobs add --memory-budget MB` raises it for the whole job.
JOB_MEMORY_BUDGET_MB = 3072


def to_data(value):
    """A settings value -> JSON data: dataclasses as ``{"type": class name, field: ...}``, tuples as lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        data = {"type": type(value).__name__}
        data.update((f.name, to_data(getattr(value, f.name))) for f in dataclasses.fields(value))
        return data
    if isinstance(value, (tuple, list)):
        return [to_data(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_data(v) for k, v in value.items()}
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return value


def from_data(hint, data):
    """JSON data -> a value of type ``hint`` (the inverse of :func:`to_data`, led by the type hints)."""
    if data is None:
        return None
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(hint) if a is not type(None)]
        if isinstance(data, dict) and "type" in data:
            named = [a for a in members if isinstance(a, type) and a.__name__ == data["type"]]
            if not named:
                raise InputError(f"job file: {data['type']!r} is none of {[a.__name__ for a in members]}")
            return from_data(named[0], data)
        return from_data(members[0], data) if len(members) == 1 else data
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _dataclass_from(hint, data)
    if origin is tuple:
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(from_data(args[0], v) for v in data)
        return tuple(from_data(a, v) for a, v in zip(args, data)) if args else tuple(data)
    if hint is float and isinstance(data, int) and not isinstance(data, bool):
        return float(data)
    return data


def _dataclass_from(cls, data: dict):
    if not isinstance(data, dict) or data.get("type", cls.__name__) != cls.__name__:
        raise InputError(f"job file: expected {cls.__name__}, got {str(data)[:80]}")
    try:
        hints = typing.get_type_hints(cls)
    except NameError:  # a hint that does not resolve (a class local to a function): values as they are
        hints = {}
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(data) - names - {"type"}
    if unknown:
        raise InputError(f"job file: {cls.__name__} has no field {sorted(unknown)[0]!r}")
    return cls(**{k: from_data(hints.get(k), v) for k, v in data.items() if k != "type"})


@dataclass(frozen=True)
class JobSpec:
    """One upscale: ``input`` -> ``output`` (absolute paths) with everything ``vsr upscale`` takes.

    ``runner.frames``: the output frames ``A:B``, as ``vsr upscale --frames``; a job is cut into chunks of them
    by :func:`vsr.jobs.chunking.plan_job`.  ``overwrite``: the join may replace an existing output (under
    :mod:`vsr.video.output`'s rules).  ``source``: the input as it was added (:mod:`vsr.jobs.identity`), set
    by :func:`~vsr.jobs.chunking.plan_job`; the job checks it before every chunk, and its key covers it.
    """

    input: str
    output: str
    backend: BackendRequest = field(default_factory=BackendRequest)
    encoder: EncoderSettings = field(default_factory=EncoderSettings)
    runner: RunnerSettings = field(default_factory=RunnerSettings)
    overwrite: bool = False
    source: InputIdentity | None = None

    def __post_init__(self):
        if Path(self.output).suffix == "":
            raise InputError(f"vsr jobs writes video files, not PNG folders: {self.output} has no suffix")
        if self.runner.memory_budget_mb is None:  # a fixed budget, not the machine's (JOB_MEMORY_BUDGET_MB)
            object.__setattr__(self, "runner", dataclasses.replace(self.runner, memory_budget_mb=JOB_MEMORY_BUDGET_MB))

    @classmethod
    def from_settings(cls, input: str | os.PathLike, output: str | os.PathLike, backend: BackendRequest,
                      encoder: EncoderSettings, runner: RunnerSettings, overwrite: bool = False) -> "JobSpec":
        return cls(os.path.abspath(input), os.path.abspath(output), backend, encoder, runner, overwrite)

    @property
    def trimmed(self) -> bool:
        """Whether the job writes part of its input (``--frames A:B``): its output starts at frame A's time."""
        start, stop = self.runner.frames
        return start > 0 or stop is not None

    def settings(self) -> tuple[BackendRequest, EncoderSettings, RunnerSettings]:
        return self.backend, self.encoder, self.runner

    def to_dict(self) -> dict:
        data = to_data(self)
        data["type"] = JOB_FORMAT
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict) -> "JobSpec":
        if not isinstance(data, dict) or data.get("type") != JOB_FORMAT:
            raise InputError(f"not a vsr job ({JOB_FORMAT}): {str(data)[:80]}")
        return _dataclass_from(cls, {**data, "type": cls.__name__})

    @classmethod
    def from_json(cls, text: str) -> "JobSpec":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise InputError(f"not a vsr job: {e}") from None
        return cls.from_dict(data)

    @property
    def key(self) -> str:
        """A hash of everything that decides the chunks' content (all but ``overwrite``): names their folder.

        The weights and the model config count by their contents (:func:`weights_identity`,
        :func:`config_identity`): new weights or an edited config TOML at the same path make a new key, and the
        same file at two paths (or a bundled name and its file) the same key.
        """
        data = self.to_dict()
        data.pop("overwrite")
        data["backend"]["weights"] = weights_identity(self.backend.weights)
        data["backend"]["config"] = config_identity(self.backend.config)
        data["backend"].pop("precision", None)  # why the options' precision was chosen: the options count
        if data["encoder"].get("scale") is None:  # (no --scale: the key of a job added before there was one)
            data["encoder"].pop("scale", None)
        if data["runner"].get("frame_rate") is None:  # (no --frame-rate: likewise)
            data["runner"].pop("frame_rate", None)
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def weights_identity(weights: str) -> str:
    """``weights`` as :attr:`JobSpec.key` counts it: ``sha256:<hex>`` of its file (a bundled name's file), else
    ``weights`` itself (``random``; a file that is not there, which opening the backend reports)."""
    if weights == "random":
        return weights
    try:
        path = bundled_path(weights).resolve()
        st = path.stat()
    except (InputError, OSError):
        return weights
    return _file_identity(path, st) or weights


def config_identity(config: str | None) -> str | None:
    """``config`` as :attr:`JobSpec.key` counts it: ``sha256:<hex>`` of its TOML file (a name's
    ``configs/<name>.toml``), else ``config`` itself (None: the one stored in the weights; an unknown name)."""
    if config is None:
        return None
    path = config_path(config).resolve()
    try:
        st = path.stat()
    except OSError:
        return config
    return _file_identity(path, st) or config


def _file_identity(path: Path, st: os.stat_result) -> str | None:
    if not stat.S_ISREG(st.st_mode):
        return None
    return "sha256:" + sha256_once(path, st)  # the key is asked for at every chunk


@dataclass(frozen=True)
class ChunkSpec:
    """Output frames ``start <= i < stop`` of a job, numbered ``index``.

    ``decode_from``: the frame where its decoding starts (0: the top of the file, else a keyframe checked at
    planning to decode exactly as a decode from the top, see :mod:`vsr.video.seek`), at timestamp ``entry_pts``,
    whose decoded picture hashes to ``entry_digest``.  ``checks``: ``(frame, picture digest)`` of frames the
    chunk decodes (the first and last it reads and the keyframes between), as planning decoded them: a frame
    that decodes otherwise means the input changed (:mod:`vsr.jobs.identity`).
    """

    index: int
    start: int
    stop: int
    decode_from: int = 0
    entry_pts: int | None = None
    entry_digest: str | None = None
    checks: tuple[tuple[int, str], ...] = ()

    def to_dict(self) -> dict:
        data = to_data(self)
        del data["type"]
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "ChunkSpec":
        return _dataclass_from(cls, data)
