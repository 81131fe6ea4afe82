"""Whether a group of a dataflow graph is a chain of two contractions, the kind of kernel the CPU
schedule's :class:`~tvm_fusion_ext.tir_passes.contraction_chain.ContractionChain` takes as one
loop nest (GraphTurbo section 4.1, loop fusion along a chain; APOLLO section 4.2).

NeoFlow's Eq. (4) charges a producer fused into a reusing consumer (a 1x1 expansion conv into the
3x3 depthwise conv reading it, a matmul into the matmul reading it) with recomputing it for every
read: nine times for a 3x3 window. The chain rule recomputes only a block's halo rows (two rows
of a block of seven, for a 3x3 window at stride 1) and keeps the intermediate in a tile, so for a
chain that term is wrong, as it is for attention (:mod:`.attention_groups`): such a merge is
admitted (:meth:`.profitability.ProfitabilityCheck.takes_whole`) and judged by the predicted time
of the kernel the default schedule makes of it. The test here is structural, from the graph alone:
the prediction schedules the kernel anyway, and prices what the schedule makes of it (a chain
the rule declines keeps one contraction a plain loop nest, and is predicted slow).
"""

from __future__ import annotations

from collections.abc import Iterable

import tvm

from ..analysis.graph import DataflowGraph, NodeKind, OpPattern
from ..analysis.primitive_types import PrimitiveType
from ..hardware import CPUSpec, spec_for_target

# Ops a chain group may hold besides its two contractions: epilogues, paddings, reshapes.
_BETWEEN = frozenset({OpPattern.ELEMWISE, OpPattern.BROADCAST, OpPattern.INJECTIVE})


def takes_chains(target: tvm.target.Target) -> bool:
    """Whether ``target``'s default schedule has the chain rule: CPUs (not a GPU's rules, not a
    DSA, whose simulator judges)."""
    return "dsa" not in target.keys and "gpu" not in target.keys and isinstance(spec_for_target(target), CPUSpec)


def is_chain_group(graph: DataflowGraph, members: Iterable[int], target: tvm.target.Target) -> bool:
    """Whether ``members`` hold exactly two contractions (matmul, conv) and otherwise element-wise,
    broadcast and injective ops only, the second contraction reads the first's output through
    them, and nothing outside ``members`` reads what the first computes (the intermediate stays
    in the kernel's tile) - on a target whose schedule takes chains."""
    members = set(members)
    calls = [graph.nodes[m] for m in members if graph.nodes[m].kind is NodeKind.CALL_TIR]
    contractions = [node for node in calls if node.pattern is OpPattern.OUT_EWISE_FUSABLE
                    and node.ptype in (PrimitiveType.MATMUL, PrimitiveType.CONV)]
    if len(contractions) != 2 or any(node.pattern not in _BETWEEN for node in calls
                                     if all(node is not c for c in contractions)):
        return False
    for producer, consumer in (contractions, contractions[::-1]):
        if _one_row(producer):
            continue
        between, stack = set(), [producer.index]
        while stack:
            for reader in graph.nodes[stack.pop()].outputs:
                if reader in members and reader not in between and reader != consumer.index:
                    between.add(reader)
                    stack.append(reader)
        reads = {m for n in between | {producer.index} for m in graph.nodes[n].outputs}
        if consumer.index in reads and reads <= members and not any(
                graph.nodes[n].is_block_output for n in between | {producer.index}):
            return takes_chains(target)
    return False


def _one_row(node) -> bool:
    """Whether ``node`` computes a single row: one output dimension longer than 1 (a
    vector-matrix product: squeeze-excite's FC on pooled ``[1, C, 1, 1]`` features, a batch-1
    linear layer). The chain rule keeps blocks of the first contraction's rows in a tile; a single
    row leaves nothing to block, and the schedule recomputes it, as a plain loop nest, for every
    tile of the second contraction: EfficientNet-B0's two squeeze-excite FCs and the scale as one
    kernel ran 72 us against 30 us as two."""
    return bool(node.shapes) and sum(1 for extent in node.shapes[0] if extent > 1) <= 1
