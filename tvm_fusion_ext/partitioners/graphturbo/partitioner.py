"""The GraphTurbo partitioner: Algorithm 2's sub-graphs of one dataflow block, plus the plan.

Called by :class:`~tvm_fusion_ext.MaterializePartition` once per dataflow block; each SG becomes one
kernel through ``FuseTIR``. For every block it also records the plan of sections 3.3-3.4 (instances,
the chosen BFS/DFS order and its LB peak, bindings and output scopes), for reports and benchmarks.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from ...analysis.graph import DataflowGraph, NodeKind
from .binding import BindingResult, infer_bindings
from .grouping import Grouping, group_subgraphs
from .instances import InstanceGraph, build_instances, choose_order, order_peak
from .ops import TurboGraph, from_dataflow_graph


@dataclass
class BlockPlan:
    graph: TurboGraph
    grouping: Grouping
    instances: InstanceGraph
    order_kind: str
    order: list[int]
    lb_peak: int
    binding: BindingResult


class GraphTurboPartitioner:
    """``partitioner(graph) -> groups`` for ``lb_bytes`` of local buffer and ``cores`` per cluster.

    ``max_ops`` caps an SG's op count (see :mod:`.grouping`); ``plans`` collects one
    :class:`BlockPlan` per partitioned block.
    """

    def __init__(self, lb_bytes: int, cores: int, max_ops: int | None = None):
        self.lb_bytes = lb_bytes
        self.cores = cores
        self.max_ops = max_ops
        self.plans: list[BlockPlan] = []

    def __call__(self, graph: DataflowGraph) -> list[list[int]]:
        symbolic = [n.name for n in graph.nodes if n.kind == NodeKind.CALL_TIR and len(n.shapes) < len(n.dtypes)]
        if symbolic:  # SplitInfo sizes tensors in bytes: symbolic shapes are left unfused
            warnings.warn(f"graphturbo: {graph.func_name} block {graph.block_index} left unfused: "
                          f"SplitInfo needs static shapes, {', '.join(symbolic[:4])} have symbolic ones",
                          stacklevel=2)
            return []
        tg = from_dataflow_graph(graph)
        grouping = group_subgraphs(tg, self.lb_bytes, self.max_ops)
        self.plans.append(plan(tg, grouping, self.cores))
        return [g for g in grouping.groups if len(g) > 1]


def plan(tg: TurboGraph, grouping: Grouping, cores: int) -> BlockPlan:
    """Sections 3.3-3.4 over a grouping: instances, the better order, bindings and scopes."""
    ig = build_instances(tg, grouping)
    kind, order = choose_order(ig)
    binding = infer_bindings(order, {i: inst.shape for i, inst in enumerate(ig.instances)},
                             {i: inst.producers for i, inst in enumerate(ig.instances)}, cores)
    return BlockPlan(tg, grouping, ig, kind, order, order_peak(ig, order), binding)
