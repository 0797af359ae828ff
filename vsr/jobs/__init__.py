"""Batch jobs: a ``vsr upscale`` run as data (:class:`JobSpec`), bound to its input and cut into resumable chunks
(:mod:`vsr.jobs.chunking`) that join frame-exactly into the output a single pass writes (:mod:`vsr.jobs.chunks`).

The names below are imported when first used: ``vsr jobs list`` reads only the store (:mod:`vsr.jobs.store`),
and must not wait for the model's imports (torch: seconds, a minute beside a busy worker) to show it."""

import importlib

_EXPORTS = {"chunk_path": "chunks", "is_committed": "chunks", "join_chunks": "chunks", "run_chunk": "chunks",
            "DEFAULT_CHUNK_FRAMES": "chunking", "plan_chunks": "chunking", "plan_job": "chunking",
            "ChunkSpec": "spec", "JobSpec": "spec"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
