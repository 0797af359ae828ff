"""Batch jobs: a ``vsr upscale`` run as data (:class:`JobSpec`), cut into resumable chunks that join
frame-exactly into the output a single pass writes (:mod:`vsr.jobs.chunks`)."""

from vsr.jobs.chunks import (DEFAULT_CHUNK_FRAMES, chunk_path, is_committed, join_chunks, plan_chunks,
                             run_chunk)
from vsr.jobs.spec import ChunkSpec, JobSpec

__all__ = ["DEFAULT_CHUNK_FRAMES", "ChunkSpec", "JobSpec", "chunk_path", "is_committed", "join_chunks",
           "plan_chunks", "run_chunk"]
