"""Whether a group of a dataflow graph is a chain of two contractions that the CPU schedule's
:class:`~tvm_fusion_ext.tir_passes.contraction_chain.ContractionChain` takes as one loop nest
(GraphTurbo section 4.1, loop fusion along a chain; APOLLO section 4.2).

NeoFlow's Eq. (4) charges a producer fused into a reusing consumer (a 1x1 expansion conv into the
3x3 depthwise conv reading it, a matmul into the matmul reading it) with recomputing it for every
read: nine times for a 3x3 window. The chain rule recomputes only a block's halo rows (two rows
of a block of seven, for a 3x3 window at stride 1) and keeps the intermediate in a tile, so for a
group it schedules that term is wrong, as it is for attention (:mod:`.attention_groups`): such a
merge is admitted and judged by its predicted time (:meth:`.profitability.ProfitabilityCheck.takes_whole`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import tvm

from ..analysis.graph import DataflowGraph, NodeKind, OpPattern
from ..analysis.primitive_types import PrimitiveType
from ..hardware import CPUSpec, spec_for_target
from ..tir_passes.contraction_chain import ContractionChain
from .attention_groups import schedules_whole
from .group_kernel import fused_kernel, group_signature

# Ops a chain group may hold besides its two contractions: epilogues, paddings, reshapes.
_BETWEEN = frozenset({OpPattern.ELEMWISE, OpPattern.BROADCAST, OpPattern.INJECTIVE})


def chain_rule(target: tvm.target.Target) -> ContractionChain | None:
    """The chain rule on a CPU target; ``None`` elsewhere (a GPU's rules, a DSA's simulator)."""
    if "dsa" in target.keys or "gpu" in target.keys or not isinstance(spec_for_target(target), CPUSpec):
        return None
    return ContractionChain()


def is_chain_group(graph: DataflowGraph, members: Iterable[int], target: tvm.target.Target,
                   remembered: Callable[[str, Callable[[], float]], float] | None = None) -> bool:
    """Whether ``members`` hold exactly two contractions (matmul, conv) and otherwise element-wise,
    broadcast and injective ops only, and the chain rule schedules the kernel they become. With
    ``remembered`` (a cost model's persistent store), the rule's verdict is kept under the group's
    structure, so a second compile neither fuses nor schedules the kernel again."""
    members = sorted(set(members))
    nodes = [graph.nodes[m] for m in members]
    calls = [node for node in nodes if node.kind is NodeKind.CALL_TIR]
    contractions = [node for node in calls if node.pattern is OpPattern.OUT_EWISE_FUSABLE
                    and node.ptype in (PrimitiveType.MATMUL, PrimitiveType.CONV)]
    if len(contractions) != 2 or any(node.pattern not in _BETWEEN for node in calls if node not in contractions):
        return False
    rule = chain_rule(target)
    if rule is None:
        return False

    def verdict() -> float:
        kernel = fused_kernel(graph, members)
        return float(kernel is not None and schedules_whole(rule, kernel, target))

    signature = group_signature(graph, members) if remembered is not None else None
    if signature is None:
        return verdict() > 0
    return remembered(f"whole:{type(rule).__name__}:{signature}", verdict) > 0
