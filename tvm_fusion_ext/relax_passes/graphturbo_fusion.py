"""``GraphTurboFusion`` and the ``graphturbo`` strategy (graphturbo-dsa-scheduling.txt section 3).

Each dataflow block is partitioned into GraphTurbo's sub-graphs (Algorithm 2 with SplitInfo /
BestSplit from the target's LB, :mod:`tvm_fusion_ext.partitioners.graphturbo`) and every sub-graph
becomes one kernel through the shared :class:`~.materialize_partition.MaterializePartition` and
``FuseTIR``. The LB is ``spec_for_target(target).fast_memory_bytes``: the DSA's local buffer on
``dsa/*`` targets, the per-core cache the CPU spec describes on ``llvm`` (section 3.6). The plan of
sections 3.3-3.4 (instances, BFS/DFS order, bindings, output scopes) is computed per block and kept
in ``self.plans``; it is not yet materialised in the IR (each sub-graph is one kernel over its
whole output, not one kernel per instance).

``max_ops`` caps a sub-graph's op count (default :data:`MAX_GROUP_OPS`): every op of a fused kernel
becomes a loop nest of one PrimFunc that the default schedules (anchor loop fusion on CPU,
``DSASchedule`` on the DSA) stage one by one. The bound is a guard, not a measured optimum: no
larger group has failed so far, but whole ResNet-50 stages (about 100 legalized ops) are cut into
consecutive pieces until the instance-level kernels of section 4 exist. ``max_ops=None`` lifts it.
"""

from __future__ import annotations

import tvm

from ..hardware.spec import spec_for_target
from ..partitioners.graphturbo import GraphTurboPartitioner
from ..pipelines import register_fusion
from ..registration import register_pass
from .materialize_partition import MaterializePartition

MAX_GROUP_OPS = 48


@register_pass
@tvm.transform.module_pass(opt_level=0, name="GraphTurboFusion")
class GraphTurboFusion:
    """Group every dataflow block into GraphTurbo sub-graphs (module docstring).

    ``lb_bytes`` / ``cores``: override the target spec's LB and cores per cluster.
    """

    def __init__(self, lb_bytes: int | None = None, cores: int | None = None,
                 max_ops: int | None = MAX_GROUP_OPS):
        self.lb_bytes = lb_bytes
        self.cores = cores
        self.max_ops = max_ops
        self.plans: list = []

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        spec = spec_for_target(tvm.target.Target.current(allow_none=True))
        lb = self.lb_bytes or spec.fast_memory_bytes
        cores = self.cores or getattr(spec, "cores_per_cluster", spec.num_cores)
        partitioner = GraphTurboPartitioner(lb, cores, self.max_ops)
        out = MaterializePartition(partitioner)(mod)
        self.plans.extend(partitioner.plans)
        return out


@register_fusion(
    "graphturbo",
    "GraphTurbo: sub-graphs grouped by straight/diamond/branch merges under SplitInfo from the "
    "target's LB (rules (i)/(ii)), each one kernel")
def _graphturbo(target):
    return [GraphTurboFusion()]
