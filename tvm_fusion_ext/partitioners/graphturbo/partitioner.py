"""The GraphTurbo partitioner: Algorithm 2's sub-graphs of one dataflow block, plus the plan.

Called by :class:`~tvm_fusion_ext.MaterializePartition` once per dataflow block; each SG becomes one
kernel through ``FuseTIR``. For every block it also records the plan of sections 3.3-3.4 (instances,
the chosen BFS/DFS order and its LB peak, bindings and output scopes) and, per fused SG, the
:class:`~.kernel_plan.SubgraphPlan` the kernel generator realises (keyed by the SG's sequence of
PrimFunc names, which is also the body of the grouped function ``MaterializePartition`` makes).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from ...analysis.graph import DataflowGraph, NodeKind
from .binding import BindingResult, infer_bindings
from .grouping import Grouping, group_subgraphs
from .instances import InstanceGraph, build_instances, choose_order, order_peak
from .kernel_plan import KernelOptions, SubgraphPlan
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
    kernels: dict[tuple[str, ...], SubgraphPlan]


class GraphTurboPartitioner:
    """``partitioner(graph) -> groups`` for ``lb_bytes`` of local buffer and ``cores`` per cluster.

    ``max_ops`` caps an SG's op count and ``single_anchor_above`` lets an SG larger than that many
    bytes hold one anchor op only (see :mod:`.grouping`); ``plans`` collects one
    :class:`BlockPlan` per partitioned block; ``options`` (Fig. 15's switches) go into every
    sub-graph plan.
    """

    def __init__(self, lb_bytes: int, cores: int, max_ops: int | None = None,
                 options: KernelOptions | None = None, single_anchor_above: int | None = None):
        self.lb_bytes = lb_bytes
        self.cores = cores
        self.max_ops = max_ops
        self.single_anchor_above = single_anchor_above
        self.options = options or KernelOptions()
        self.plans: list[BlockPlan] = []

    def __call__(self, graph: DataflowGraph) -> list[list[int]]:
        symbolic = [n.name for n in graph.nodes if n.kind == NodeKind.CALL_TIR and len(n.shapes) < len(n.dtypes)]
        if symbolic:  # SplitInfo sizes tensors in bytes: symbolic shapes are left unfused
            warnings.warn(f"graphturbo: {graph.func_name} block {graph.block_index} left unfused: "
                          f"SplitInfo needs static shapes, {', '.join(symbolic[:4])} have symbolic ones",
                          stacklevel=2)
            return []
        tg = from_dataflow_graph(graph)
        grouping = group_subgraphs(tg, self.lb_bytes, self.max_ops,
                                   single_anchor_above=self.single_anchor_above)
        callees = [str(b.value.args[0].name_hint) if n.kind == NodeKind.CALL_TIR else ""
                   for b, n in zip(graph.bindings, graph.nodes)]
        self.plans.append(plan(tg, grouping, self.cores, callees, self.options))
        return [g for g in grouping.groups if len(g) > 1]


def plan(tg: TurboGraph, grouping: Grouping, cores: int, callees: list[str] | None = None,
         options: KernelOptions | None = None) -> BlockPlan:
    """Sections 3.3-3.4 over a grouping: instances, the better order, bindings and scopes; with
    ``callees`` (each op's PrimFunc name) also the kernel plan of every fused SG."""
    ig = build_instances(tg, grouping)
    kind, order = choose_order(ig)
    binding = infer_bindings(order, {i: inst.shape for i, inst in enumerate(ig.instances)},
                             {i: inst.producers for i, inst in enumerate(ig.instances)}, cores)
    kernels = {}
    if callees is not None:
        first = {}
        for i, inst in enumerate(ig.instances):
            first.setdefault(inst.sg, i)
        for sg, (group, split) in enumerate(zip(grouping.groups, grouping.best)):
            if len(group) < 2:
                continue
            shape = tg.ops[max(group)].shape
            inst = first[sg]
            kernels.setdefault(tuple(callees[m] for m in group), SubgraphPlan(
                dim=split.dim if split is not None else 0,
                instances=split.factor if split is not None else 1,
                binding=tuple(binding.bind[inst]), output_shape=tuple(shape),
                scope=binding.scope[inst], options=options or KernelOptions()))
    return BlockPlan(tg, grouping, ig, kind, order, order_peak(ig, order), binding, kernels)
