"""Subgraph plans: the exported graph cut at its DCN and PixelShuffle nodes into ONNX segments, bridged by
vsr's own kernels (:mod:`vsr.kernels`).

* :func:`~vsr.plan.partition.partition` -- cut a model into segments and steps;
* :func:`~vsr.plan.plan.write_plan` / :class:`~vsr.plan.plan.PlanCache` -- plans on disk (``engines/plans``);
* :class:`~vsr.plan.executor.PlanExecutor` -- run a plan with a static memory arena and per-step timings;
* :class:`~vsr.plan.backend.SplitBackend` -- the :class:`~vsr.backends.base.Backend` built on all of it.
"""

from vsr.plan.backend import SplitBackend, SplitOptions
from vsr.plan.buckets import BucketPolicy
from vsr.plan.executor import PlanExecutor
from vsr.plan.partition import DEFAULT_BRIDGE_OPS, partition
from vsr.plan.plan import PlanCache, PlanKey, SubgraphPlan, write_plan
from vsr.plan.segments import OrtSegmentBackend

__all__ = ["BucketPolicy", "DEFAULT_BRIDGE_OPS", "OrtSegmentBackend", "PlanCache", "PlanExecutor", "PlanKey",
           "SplitBackend", "SplitOptions", "SubgraphPlan", "partition", "write_plan"]
