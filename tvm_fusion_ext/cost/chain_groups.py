"""The groups of a dataflow graph whose kernel the CPU's contraction-chain rule schedules whole:
a convolution, the element-wise ops after it and the convolution that reads them (a depthwise
conv, its bias and ReLU6, and the pointwise conv of an inverted residual block), which
:class:`~tvm_fusion_ext.tir_passes.contraction_chain.ContractionChain` runs as one loop nest with
the intermediate a block of image rows (GraphTurbo section 4.1's loop fusion along a chain).

A strategy that builds its groups a merge at a time (NeoFlow's greedy Eq. (4)) refuses the last
merge of such a group: Eq. (4) charges the second conv with recomputing the first for every
read of its window-free input, which the chain kernel does not do. The profitability check
(:meth:`~.profitability.ProfitabilityCheck.takes_whole`) admits that merge, and the predicted
time of the chain kernel against its two parts decides it, as for attention
(:mod:`.attention_groups`).

A chain is found from its first conv: the path of single-consumer element-wise and broadcast ops
(at most :data:`MAX_EPILOGUE_NODES`) that leads to another conv, with the element-wise ops after
that conv (its bias, a residual add) or without them, the first whose fused kernel the rule
schedules (remembered per kernel structure, :func:`.attention_groups.schedules_whole`): a merge
is admitted in whichever order the greedy search meets the epilogues. Chains
of matmuls (a transformer's MLP) are not offered: at BERT-base and ViT-Ti sizes the rule declines
them (every block would read the weights again, more bytes than the intermediate saves), and a
small MLP's chain kernel gains nothing measurable over its parts
(``scripts/bench_contraction_chain.py --only mlp``: 1.03x at 64 x 32 -> 128).
"""

from __future__ import annotations

import weakref

import tvm

from ..analysis.graph import DataflowGraph, NodeKind, OpPattern
from ..analysis.primitive_types import PrimitiveType
from ..hardware import CPUSpec, spec_for_target
from ..tir_passes.contraction_chain import ContractionChain
from .attention_groups import schedules_whole
from .group_kernel import fused_kernel

# Element-wise ops between the two convs (bias, batch norm's scale and shift, an activation).
MAX_EPILOGUE_NODES = 6

_FOUND: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def chain_groups(graph: DataflowGraph, target: tvm.target.Target) -> list[frozenset[int]]:
    """Every conv -> element-wise ops -> conv group of ``graph`` the target's chain rule
    schedules whole (CPU targets only; none elsewhere), remembered per graph."""
    if graph not in _FOUND:
        _FOUND[graph] = _find(graph, target)
    return _FOUND[graph]


def _find(graph: DataflowGraph, target: tvm.target.Target) -> list[frozenset[int]]:
    if not isinstance(spec_for_target(target), CPUSpec) or "dsa" in target.keys or "gpu" in target.keys:
        return []
    rule = ContractionChain()
    groups = []
    for first in graph.nodes:
        if first.kind is not NodeKind.CALL_TIR or first.ptype is not PrimitiveType.CONV:
            continue
        path = _path_to_next_conv(graph, first.index)
        if path is None:
            continue
        for members in (path + _epilogue(graph, path[-1]), path):
            kernel = fused_kernel(graph, members)
            if kernel is not None and schedules_whole(rule, kernel, target):
                groups.append(frozenset(members))
                break
    return groups


def _epilogue(graph: DataflowGraph, last: int) -> list[int]:
    """The element-wise and broadcast ops after ``last`` (bias, residual add, activation), each
    the only consumer of the one before."""
    epilogue, node = [], graph.nodes[last]
    while len(node.outputs) == 1 and not node.is_block_output and len(epilogue) < MAX_EPILOGUE_NODES:
        node = graph.nodes[node.outputs[0]]
        if node.kind is not NodeKind.CALL_TIR or node.pattern > OpPattern.BROADCAST:
            break
        epilogue.append(node.index)
    return epilogue


def _path_to_next_conv(graph: DataflowGraph, first: int) -> list[int] | None:
    """``first``, the element-wise ops each the only consumer of the one before, and the conv
    that consumes the last of them; ``None`` when the path branches, leaves the block or meets
    anything else first."""
    path, node = [first], graph.nodes[first]
    while len(path) <= MAX_EPILOGUE_NODES + 1:
        if len(node.outputs) != 1 or node.is_block_output:
            return None
        node = graph.nodes[node.outputs[0]]
        if node.kind is not NodeKind.CALL_TIR:
            return None
        path.append(node.index)
        if node.ptype is PrimitiveType.CONV:
            return path
        if node.pattern > OpPattern.BROADCAST:
            return None
    return None
