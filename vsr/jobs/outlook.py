"""What a local worker says of the job it computes a chunk of (:mod:`vsr.jobs.worker`): frames written of the
job's total, this chunk's speed, the job's time left at that speed, and how many other jobs this machine has
left to run."""

from __future__ import annotations

import time

from vsr.jobs.rows import JobRow, clock


class Progress:
    """What a running chunk has done, for its heartbeat to record: frames written, and when its first frame
    started (after the backend's warm-up); ``stopped``: its heartbeat found the job stopped (cancelled) or the
    claim lost, so the job's other chunks do not start here."""

    def __init__(self):
        self.frames = 0
        self.started: float | None = None
        self.stopped = False

    def start(self) -> None:
        self.started = time.monotonic()

    def add(self, n: int) -> None:
        self.frames += n

    def now(self) -> tuple[int, float]:
        return self.frames, (time.monotonic() - self.started) if self.started is not None else 0.0


class Outlook:
    """What a worker says of the job it computes a chunk of: the job's frames written of its total (what its
    other chunks had when this one was claimed, and this one's), this chunk's speed and, at that speed, the
    job's time left; how many other jobs wait (those this machine runs: the store's ``outlook(job, fits)``)."""

    def __init__(self, job: int, row: JobRow, others: int, progress: Progress):
        self.job, self.others, self.progress = job, others, progress
        self.before = row.frames_done + row.frames_running
        self.total = row.frames_total

    def update(self, row: JobRow, others: int, chunk_frames: int) -> None:
        """The job as the store has it now, this chunk (``chunk_frames``) committed: the other workers' chunks
        done meanwhile count too."""
        self.before = max(0, row.frames_done + row.frames_running - chunk_frames)
        self.total, self.others = row.frames_total, others

    def text(self, chunk_done: int = 0) -> str:
        """The line; ``chunk_done``: the chunk's frames once it is committed (found on disk, it counted none)."""
        frames, seconds = self.progress.now()
        done = min(self.before + max(frames, chunk_done), self.total)
        speed = ""
        if frames and seconds > 0:
            fps = frames / seconds
            speed = f", {fps:.2f} fps" + (f", ETA {clock((self.total - done) / fps)}"
                                          if done < self.total and not self.progress.stopped else "")
        if self.progress.stopped:  # the chunk finishes, none of the job's starts: no time left to say
            speed += ", job stopped"
        left = f"{self.others} other job{'s' * (self.others != 1)} left" if self.others else "no other job left"
        return f"{done}/{self.total} frames of job {self.job}{speed}; {left}"
