"""Subgraph plans: the exported graph cut at its DCN and PixelShuffle nodes into ONNX segments, bridged by
vsr's own kernels (:mod:`vsr.kernels`).

* :func:`~vsr.plan.partition.partition` -- cut a model into segments and steps;
* :func:`~vsr.plan.plan.write_plan` / :class:`~vsr.plan.plan.PlanCache` -- plans on disk (``<engine dir>/plans``);
* :func:`~vsr.plan.arena.plan_arena` -- one memory arena for every tensor a bound plan exchanges;
* :class:`~vsr.plan.executor.PlanExecutor` -- run a plan with that arena and per-step timings;
* :mod:`~vsr.plan.segments`, :mod:`~vsr.plan.tensorrt` -- what runs the segments (ONNX Runtime, TensorRT).

The model backend built on all of it is :class:`vsr.backends.split.SplitBackend`.
"""

from vsr.plan.arena import ArenaPlan, plan_arena
from vsr.plan.executor import PlanExecutor
from vsr.plan.partition import DEFAULT_BRIDGE_OPS, partition
from vsr.plan.plan import PlanCache, PlanKey, SubgraphPlan, write_plan
from vsr.plan.segments import OrtSegmentBackend

__all__ = ["ArenaPlan", "DEFAULT_BRIDGE_OPS", "OrtSegmentBackend", "PlanCache", "PlanExecutor", "PlanKey",
           "SubgraphPlan", "partition", "plan_arena", "write_plan"]
