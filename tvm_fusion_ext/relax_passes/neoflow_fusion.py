"""``NeoFlowFusion`` and the ``neoflow`` strategy (neoflow-training-compilation sections 4.3, 5.1).

The strategy, phase by phase:

* high-level pre-processing (on Relax ops, before ``LegalizeOps``): MindSpore graph simplification
  to a fixed point (:class:`~.simplify.Simplify`), NeoFlow's parallel fusion
  (:class:`~.parallel_fusion.ParallelFusion`), and simplification again (it removes the
  concat-of-slices a parallel fusion leaves when the results were concatenated back, as in the
  capsule convolution);
* fusion: greedy fusion by best Eq. (4) reward (:class:`GreedyRewardPartitioner` through the shared
  :class:`~.materialize_partition.MaterializePartition`), with ``Pd``, ``Pc``, ``L`` measured on the
  machine (:func:`~tvm_fusion_ext.hardware.device_costs.load_or_measure`); with the profitability
  check on (``cost_check``) a merge's reward is the time the cost model predicts it saves on the
  scheduled kernels (:mod:`tvm_fusion_ext.cost`), and merges towards a kernel the target's
  attention rule takes whole are not refused for the recomputation Eq. (4) assumes (see
  :mod:`~tvm_fusion_ext.partitioners.neoflow`);
* the forward/backward coupling: where a fused group's tensor is still needed by other kernels
  (saved for the backward pass), :func:`~tvm_fusion_ext.partitioners.neoflow.recompute_decisions`
  weighs recomputing it in those kernels against keeping it, by the same reward; chosen
  recomputations are copies of the producing binding placed before each consumer, and the greedy
  fusion then runs on the rewritten block (a block without recomputation keeps the groups of the
  first search, :class:`BlockPartitions`);
* MindSpore execution-order scheduling of the fused kernels
  (:class:`~.schedule_execution_order.ScheduleExecutionOrder`).
"""

from __future__ import annotations

import tvm
from tvm import relax

from ..analysis.graph import DataflowGraph, build_graphs
from ..cost import ProfitabilityCheck, profitability_for
from ..hardware.device_costs import DeviceCosts, load_or_measure
from ..ir_utils import VarRemapper, non_primitive_functions
from ..partitioners.neoflow import (
    MAX_GROUP_SIZE,
    GreedyRewardPartitioner,
    Recompute,
    RewardModel,
    recompute_decisions,
)
from ..registration import register_pass
from .materialize_partition import MaterializePartition


@register_pass
@tvm.transform.module_pass(opt_level=0, name="tvm_fusion_ext.NeoFlowFusion")
class NeoFlowFusion:
    """Group every dataflow block greedily by best fusion reward (section 5.1).

    ``costs``: the device's Pd/Pc/L; ``None`` loads (or measures and caches) them for the current
    target. ``recompute``: weigh recomputation of coupled tensors (module docstring).
    ``cost_check``: rewards are predicted savings of the scheduled kernels (CPU targets;
    ``profitability`` replaces the check, e.g. with fixed rates).
    ``self.merges`` lists ``(reward, binding names)`` of every merge, ``self.rejected`` the pairs the
    cost model refused (``(predicted saving, binding names)``) and ``self.recomputed`` the
    names of the bindings copied for recomputation, across blocks.
    """

    def __init__(self, costs: DeviceCosts | None = None, max_group_size: int = MAX_GROUP_SIZE,
                 recompute: bool = True, cost_check: bool = True,
                 profitability: ProfitabilityCheck | None = None):
        self.costs = costs
        self.max_group_size = max_group_size
        self.recompute = recompute
        self.cost_check = cost_check
        self.profitability = profitability
        self.merges: list = []
        self.rejected: list = []
        self.recomputed: list[str] = []

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        target = tvm.target.Target.current(allow_none=True)
        costs = self.costs or load_or_measure(target)
        model = RewardModel(costs)
        profit = (self.profitability or profitability_for(target)) if self.cost_check else None
        partitioner = BlockPartitions(GreedyRewardPartitioner(model, self.max_group_size, _gain(profit),
                                                              _whole(profit)))
        if self.recompute:
            mod = self._apply_recompute(mod, model, partitioner)
        partitioner.used.clear()
        out = MaterializePartition(partitioner)(mod)
        for key in partitioner.used:
            _, merges, rejected = partitioner.found[key]
            self.merges.extend(merges)
            self.rejected.extend(rejected)
        return out

    def _apply_recompute(self, mod: tvm.IRModule, model: RewardModel,
                         partitioner: BlockPartitions) -> tvm.IRModule:
        mod = mod.clone()
        for gvar, func in non_primitive_functions(mod):
            blocks = list(func.body.blocks) if isinstance(func.body, relax.SeqExpr) else []
            changed = False
            for graph in build_graphs(mod, gvar.name_hint):
                decisions = recompute_decisions(graph, partitioner(graph), model)
                if decisions:
                    blocks[graph.block_index] = _with_copies(graph, decisions)
                    self.recomputed.extend(graph.nodes[d.producer].name for d in decisions)
                    changed = True
            if changed:
                # Normalised (the SeqExpr needs its type), and without the originals whose every
                # consumer now reads a copy (they would be fused and computed for nothing).
                body = relax.BlockBuilder(mod).normalize(relax.SeqExpr(blocks, func.body.body))
                mod[gvar] = relax.analysis.remove_all_unused(
                    relax.Function(func.params, body, func.ret_ty, func.is_pure, func.attrs))
        return mod


class BlockPartitions:
    """The greedy partitioner, run once per dataflow block: the recomputation phase partitions
    every block, and a block it leaves as it was (the same bindings, the same block outputs) is
    given the same groups again when the partition is materialised, instead of a second search.
    ``found`` maps a block to ``(groups, merges, rejected)``; ``used`` lists the blocks asked for
    since it was last cleared."""

    def __init__(self, partitioner: GreedyRewardPartitioner):
        self.partitioner = partitioner
        self.found: dict[tuple, tuple[list[list[int]], list, list]] = {}
        self.used: list[tuple] = []

    def __call__(self, graph: DataflowGraph) -> list[list[int]]:
        key = (tuple(graph.bindings), tuple(node.is_block_output for node in graph.nodes))
        if key not in self.found:
            merged, rejected = len(self.partitioner.merges), len(self.partitioner.rejected)
            groups = self.partitioner(graph)
            self.found[key] = (groups, self.partitioner.merges[merged:], self.partitioner.rejected[rejected:])
        self.used.append(key)
        return [list(group) for group in self.found[key][0]]


def _gain(profit: ProfitabilityCheck | None):
    """The partitioner's ``predicted_gain`` hook: seconds a merge saves, by ``profit``."""
    return None if profit is None else (lambda graph, parts: profit.verdict(graph, parts).gain_s)


def _whole(profit: ProfitabilityCheck | None):
    """The partitioner's ``admitted`` hook: merges inside a kernel a rule takes whole, by ``profit``."""
    return None if profit is None else profit.takes_whole


def _with_copies(graph, decisions: list[Recompute]) -> relax.DataflowBlock:
    """The block with each decided producer's binding copied right before each of its consumers
    (the consumer then reads the copy)."""
    copies_for: dict[int, list[int]] = {}
    for d in decisions:
        for c in d.consumers:
            copies_for.setdefault(c, []).append(d.producer)
    bindings = []
    for i, binding in enumerate(graph.bindings):
        rename = {}
        for p in copies_for.get(i, []):
            original = graph.bindings[p]
            copy = relax.DataflowVar(f"{original.var.name}_recompute", original.var.ty)
            bindings.append(relax.VarBinding(copy, original.value))
            rename[original.var] = copy
        if rename:
            binding = relax.VarBinding(binding.var, VarRemapper(rename).visit_expr(binding.value))
        bindings.append(binding)
    return relax.DataflowBlock(bindings)


