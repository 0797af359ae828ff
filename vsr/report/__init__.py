"""Run reports: per-stage timing (:class:`StageTimer`) and the JSON / table a run writes."""

from vsr.report.timer import RunReport, StageStats, StageTimer

__all__ = ["RunReport", "StageStats", "StageTimer"]
