"""``NeoFlowFusion`` and the ``neoflow`` strategy (neoflow-training-compilation sections 4.3, 5.1).

The strategy, phase by phase:

* high-level pre-processing (on Relax ops, before ``LegalizeOps``): MindSpore graph simplification
  to a fixed point (:class:`~.simplify.Simplify`), NeoFlow's parallel fusion
  (:class:`~.parallel_fusion.ParallelFusion`), and simplification again (it removes the
  concat-of-slices a parallel fusion leaves when the results were concatenated back, as in the
  capsule convolution);
* fusion: greedy fusion by best Eq. (4) reward (:class:`GreedyRewardPartitioner` through the shared
  :class:`~.materialize_partition.MaterializePartition`), with ``Pd``, ``Pc``, ``L`` measured on the
  machine (:func:`~tvm_fusion_ext.hardware.device_costs.load_or_measure`);
* MindSpore execution-order scheduling of the fused kernels
  (:class:`~.schedule_execution_order.ScheduleExecutionOrder`).
"""

from __future__ import annotations

import tvm

from ..hardware.device_costs import DeviceCosts, load_or_measure
from ..partitioners.neoflow import MAX_GROUP_SIZE, GreedyRewardPartitioner, RewardModel
from ..pipelines import register_fusion
from ..registration import register_pass
from .materialize_partition import MaterializePartition
from .parallel_fusion import ParallelFusion
from .schedule_execution_order import ScheduleExecutionOrder
from .simplify import Simplify


@register_pass
@tvm.transform.module_pass(opt_level=0, name="NeoFlowFusion")
class NeoFlowFusion:
    """Group every dataflow block greedily by best fusion reward (section 5.1).

    ``costs``: the device's Pd/Pc/L; ``None`` loads (or measures and caches) them for the current
    target. ``self.merges`` lists ``(reward, binding names)`` of every merge, across blocks.
    """

    def __init__(self, costs: DeviceCosts | None = None, max_group_size: int = MAX_GROUP_SIZE):
        self.costs = costs
        self.max_group_size = max_group_size
        self.merges: list = []

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        costs = self.costs or load_or_measure(tvm.target.Target.current(allow_none=True))
        partitioner = GreedyRewardPartitioner(RewardModel(costs), self.max_group_size)
        out = MaterializePartition(partitioner)(mod)
        self.merges.extend(partitioner.merges)
        return out


def _neoflow_high_level(target):
    return [Simplify(), ParallelFusion(), Simplify()]


@register_fusion(
    "neoflow",
    "NeoFlow: greedy fusion by best Eq. (4) reward with measured Pd/Pc/L; own pre-processing on "
    "high-level Relax: MindSpore simplification, parallel fusion of ops sharing an input, "
    "simplification again; then MindSpore BFS/DFS execution order by peak memory",
    high_level_preprocess=_neoflow_high_level)
def _neoflow(target):
    return [NeoFlowFusion(), ScheduleExecutionOrder()]
