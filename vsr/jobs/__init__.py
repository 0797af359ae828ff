"""Batch jobs: a ``vsr upscale`` run as data (:class:`JobSpec`), bound to its input and cut into resumable chunks
(:mod:`vsr.jobs.plan`) that join frame-exactly into the output a single pass writes (:mod:`vsr.jobs.chunks`)."""

from vsr.jobs.chunks import chunk_path, is_committed, join_chunks, run_chunk
from vsr.jobs.plan import DEFAULT_CHUNK_FRAMES, plan_chunks, plan_job
from vsr.jobs.spec import ChunkSpec, JobSpec

__all__ = ["DEFAULT_CHUNK_FRAMES", "ChunkSpec", "JobSpec", "chunk_path", "is_committed", "join_chunks",
           "plan_chunks", "plan_job", "run_chunk"]
