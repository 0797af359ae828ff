"""Run reports: per-stage timing (:class:`StageTimer`), per-step backend times (:class:`StepTimes`), the JSON a
run writes, and its rendering as terminal tables or one HTML page (``vsr report``)."""

from vsr.report.sample import Reservoir, StepStats, StepTimes, merge_step_stats, step_kind
from vsr.report.timer import REPORT_FORMAT, RunReport, StageStats, StageTimer

__all__ = ["REPORT_FORMAT", "Reservoir", "RunReport", "StageStats", "StageTimer", "StepStats", "StepTimes",
           "merge_step_stats", "step_kind"]
