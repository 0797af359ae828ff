"""``JobRow``: one job as ``vsr jobs list`` shows it, made from the store's rows of the job and its chunks."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from vsr.jobs.leases import lost
from vsr.jobs.needs import job_need
from vsr.report.combine import damage_of


@dataclass(frozen=True)
class JobRow:
    """One job.  ``state`` is the stored state, except that a running job whose workers are all gone (no lease
    on any of its chunks or its join is held by a live worker: Ctrl-C, ``kill -9``, a lost host whose lease ran
    out) shows as ``interrupted`` until a runner takes it up again.

    ``frames_done``/``compute_s`` sum the committed chunks' reports; ``frames_running``/``running_s`` the
    progress the running chunks' heartbeats recorded (frames written, seconds since their first frame).
    ``ended_early``: what a chunk's report recorded of an input that ended before what it declared (a job that
    ends short, :mod:`vsr.video.ends`), else None; ``damaged``: its chunks' records of a damaged input, summed
    (:mod:`vsr.video.damage`), else None.  ``needs``: what a queued or interrupted job asks of its worker's
    machine beyond a CPU (``a GPU (backend cuda)``, :mod:`vsr.jobs.needs`), else None.
    """

    id: int
    input: str
    output: str
    state: str
    error: str | None
    chunks_done: int
    chunks_total: int
    chunks_running: int
    frames_done: int
    frames_total: int
    compute_s: float
    frames_running: int = 0
    running_s: float = 0.0
    ended_early: dict | None = None
    needs: str | None = None
    damaged: dict | None = None

    @property
    def progress(self) -> float:
        """The share of the job's frames written, committed or in a running chunk (0..1)."""
        if self.state == "done":
            return 1.0
        done = self.frames_done + self.frames_running
        return min(1.0, done / self.frames_total) if self.frames_total else 0.0

    @property
    def fps(self) -> float | None:
        """Frames per second of one worker, over the committed chunks and the progress of the running ones."""
        seconds, frames = self.compute_s + self.running_s, self.frames_done + self.frames_running
        return frames / seconds if seconds > 0 and frames > 0 else None

    @property
    def eta_s(self) -> float | None:
        """Seconds left at :attr:`fps` per running chunk (None when nothing works on it or nothing is measured)."""
        if self.state not in ("queued", "running") or self.fps is None:
            return None
        left = max(0, self.frames_total - self.frames_done - self.frames_running)
        return left / self.fps / max(1, self.chunks_running)

    def to_dict(self) -> dict:
        return {"id": self.id, "input": self.input, "output": self.output, "state": self.state,
                "chunks_done": self.chunks_done, "chunks_total": self.chunks_total,
                "chunks_running": self.chunks_running, "frames_done": self.frames_done + self.frames_running,
                "frames_total": self.frames_total, "progress": round(self.progress, 4), "fps": self.fps,
                "eta_s": self.eta_s, "error": self.error, "ended_early": self.ended_early, "needs": self.needs,
                "damaged": self.damaged}


def job_row(job, chunks: list, now: float) -> JobRow:
    """The store's row of a job and the rows of its chunks -> :class:`JobRow`."""
    done = [c for c in chunks if c["state"] == "done"]
    live = [c for c in chunks if c["state"] == "running" and not lost(c["owner"], c["expiry"], now)]
    joining = job["join_owner"] is not None and not lost(job["join_owner"], job["join_expiry"], now)
    state = job["state"]
    if state == "running" and not live and not joining:
        state = "interrupted"
    reports = [decode_report(c["report"])[0] for c in done]
    # a job no worker works on only (its spec is parsed for it): a running one has a worker that runs it
    need = job_need(job["spec"]) if state in ("queued", "interrupted") and "spec" in job.keys() else None
    return JobRow(job["id"], job["input"], job["output"], state, job["error"], len(done), len(chunks), len(live),
                  sum(c["stop"] - c["start"] for c in done), sum(c["stop"] - c["start"] for c in chunks),
                  sum(report_seconds(r) for r in reports),
                  sum(min(c["progress"], c["stop"] - c["start"]) for c in live),
                  sum(c["progress_s"] for c in live), ended_early(reports), need and need.text(),
                  damage_of([r.get("settings", {}).get("input_damaged") for r in reports
                             if isinstance(r, dict) and isinstance(r.get("settings"), dict)]))


def ended_early(reports: list) -> dict | None:
    """The first of the chunks' run reports' record of an input that ended early (``input_ended_early``)."""
    for r in reports:
        settings = r.get("settings") if isinstance(r, dict) else None
        early = settings.get("input_ended_early") if isinstance(settings, dict) else None
        if isinstance(early, dict):
            return early
    return None


def decode_report(text: str | None) -> tuple[dict | None, str | None]:
    """A chunk's stored run report -> (the report, None), or (None, why it is not one)."""
    if text is None:
        return None, None
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as e:
        return None, f"not JSON ({type(e).__name__})"
    if not isinstance(data, dict):
        return None, "not a JSON object"
    return data, None


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number")


def report_seconds(report: dict | None) -> float:
    """A stored report's ``wall_s``, or 0 where it has none that makes sense."""
    v = report.get("wall_s") if report else None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return 0.0
    try:
        v = float(v)
    except OverflowError:  # an integer beyond any float
        return 0.0
    return v if math.isfinite(v) and v > 0 else 0.0


def clock(seconds: float | None) -> str:
    """``H:MM:SS`` of a duration (an ETA), ``-`` where there is none."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    s = int(round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"
