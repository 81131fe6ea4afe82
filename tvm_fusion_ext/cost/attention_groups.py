"""The groups of a dataflow graph whose kernel the target's attention rule schedules whole:
:class:`~tvm_fusion_ext.tir_passes.flash_attention.FlashAttention` (one FlashAttention kernel) on
CUDA, :class:`~tvm_fusion_ext.tir_passes.cpu_attention.CPUAttention` (one cache-blocked loop nest)
on a CPU (:func:`attention_rule`).

A strategy that builds its groups a merge at a time (NeoFlow's greedy Eq. (4)) reaches such a
group through smaller ones - the score matmul with its scaling, then the softmax - whose kernels
the attention rule does not take (``Fallback`` on CUDA, a plain loop nest per op on a CPU).
Judged alone they would be refused and the attention kernel never formed; the check
(:class:`~.profitability.ProfitabilityCheck`) abstains on them instead, and refuses merges that
would take an attention op together with an op the attention kernel cannot hold (a bias add
before ``Q``), which would leave the attention to the other rules.

An attention group is found from its two contractions: for a pair of contraction nodes (``Q·Kᵀ``
and ``P·V``, matmuls of pattern ``OUT_EWISE_FUSABLE``) with a path between them, the ``core`` is the nodes on
those paths (at most :data:`MAX_CORE_NODES`, one of them a softmax: ``exp`` and a ``max``
reduction, and no third matmul or conv; the match is tried on no other pair, so conv chains cost a
graph walk, and is remembered per kernel structure). The group (``members``) is the core with the
ops that only feed it - first every element-wise and injective one, else the injective ones only
(reshapes, transposes, slices: index changes the match inlines into the loads of ``Q``, ``K``,
``V``), else none - and with the chain of injective ops after it (the output's reshape and
transpose, which the match allows) or without, the first of these whose fused kernel the
attention rule schedules.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass

import tvm
import tvm_ffi
from tvm import tirx
from tvm.s_tir import dlight as dl
from tvm.s_tir.stmt import SBlock

from ..analysis.graph import DataflowGraph, NodeKind, OpPattern
from ..analysis.primitive_types import PrimitiveType
from ..hardware import CPUSpec, spec_for_target
from ..ir_utils import StructuralMemo
from ..tir_passes.cpu_attention import CPUAttention
from ..tir_passes.flash_attention import FlashAttention
from .group_kernel import fused_kernel, group_signature

# Nodes between the two contractions of an attention: scaling, masking-free softmax (max,
# subtract, exp, sum, divide), reshapes and broadcasts; a longer path is no attention.
MAX_CORE_NODES = 12
# Ops that may feed an attention group: element-wise, broadcast and injective ones, or only the
# injective ones (reshapes, transposes, slices).
ELEMENT_WISE_OR_INDEX = frozenset({OpPattern.ELEMWISE, OpPattern.BROADCAST, OpPattern.INJECTIVE})
INDEX_ONLY = frozenset({OpPattern.INJECTIVE})

MEMO_SIZE = 512  # kernels whose verdict :func:`schedules_whole` remembers (least recently used dropped)

_FOUND: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_SCHEDULES_WHOLE = StructuralMemo(MEMO_SIZE)  # kernel, rule, target -> whether the rule schedules it
_SOFTMAX: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # PrimFunc -> (calls exp, reduces by max)
_EXP_OP = tvm.ir.Op.get("tirx.exp")


@dataclass(frozen=True)
class AttentionGroup:
    """The nodes between the two contractions (``core``) and the whole group (``members``)."""

    core: frozenset[int]
    members: frozenset[int]


def attention_rule(target: tvm.target.Target) -> dl.ScheduleRule | None:
    """The rule that schedules an attention kernel whole on ``target``: FlashAttention on a GPU,
    CPUAttention on a CPU; ``None`` elsewhere (a DSA)."""
    if "gpu" in target.keys:
        return FlashAttention()
    if isinstance(spec_for_target(target), CPUSpec) and "dsa" not in target.keys:
        return CPUAttention()
    return None


def attention_groups(graph: DataflowGraph, target: tvm.target.Target,
                     remembered: Callable[[str, Callable[[], float]], float] | None = None
                     ) -> list[AttentionGroup]:
    """Every attention group of ``graph`` (module docstring), remembered per graph. With
    ``remembered`` (a cost model's persistent store, :meth:`~.model.KernelCostModel.remembered`),
    the rule's verdict on each candidate group is kept under the group's structure
    (:func:`~.group_kernel.group_signature`), so a second compile neither fuses nor schedules it."""
    if graph not in _FOUND:
        _FOUND[graph] = _find(graph, target, remembered)
    return _FOUND[graph]


def _find(graph: DataflowGraph, target: tvm.target.Target, remembered) -> list[AttentionGroup]:
    rule = attention_rule(target)
    if rule is None:
        return []
    products = {n.index for n in graph.nodes if n.ptype in (PrimitiveType.MATMUL, PrimitiveType.CONV)}
    contractions = [n.index for n in graph.nodes if n.kind is NodeKind.CALL_TIR
                    and n.pattern == OpPattern.OUT_EWISE_FUSABLE and n.index in products]
    reaching = {b: _reaching(graph, b) for b in contractions}
    groups = []
    for a in contractions:
        below = graph.reachable_from([a])
        for b in contractions:
            core = below & reaching[b]
            if (b == a or b not in below or len(core) > MAX_CORE_NODES or not _holds_softmax(graph, core)
                    or core & products - {a, b}):
                continue
            tail = _output_chain(graph, b)
            for members in (core | feeding | after
                            for feeding in (_feeding(graph, core, ELEMENT_WISE_OR_INDEX),
                                            _feeding(graph, core, INDEX_ONLY), set())
                            for after in (tail, set())):
                if _taken_whole(rule, graph, members, target, remembered):
                    groups.append(AttentionGroup(frozenset(core), frozenset(members)))
                    break
    return groups


def _taken_whole(rule: dl.ScheduleRule, graph: DataflowGraph, members: set[int], target: tvm.target.Target,
                 remembered) -> bool:
    """Whether ``rule`` schedules the kernel ``members`` become; through ``remembered`` when given."""
    def verdict() -> float:
        kernel = fused_kernel(graph, members)
        return float(kernel is not None and schedules_whole(rule, kernel, target))

    signature = group_signature(graph, sorted(members)) if remembered is not None else None
    if signature is None:
        return verdict() > 0
    return remembered(f"whole:{type(rule).__name__}:{signature}", verdict) > 0


def schedules_whole(rule: dl.ScheduleRule, kernel: tirx.PrimFunc, target: tvm.target.Target) -> bool:
    """Whether ``rule`` schedules ``kernel``, remembered per structure (a model's repeated layers
    ask about structurally equal kernels, as do the graphs of a model compiled again)."""
    return _SCHEDULES_WHOLE.get(kernel, lambda: rule.apply(kernel, target, False) is not None,
                                (type(rule).__name__, str(target)))


def _softmax_traits(func) -> tuple[bool, bool]:
    """Whether PrimFunc ``func`` (``None`` for a node without one) calls ``exp``, and whether it
    reduces by ``max``."""
    if func is None:
        return False, False
    if func not in _SOFTMAX:
        calls, max_reductions = [], []
        tvm_ffi.structural_walk(func.body, [(tvm.ir.Call, lambda call: calls.append(call.op))], order="pre")
        tvm_ffi.structural_walk(func.body, [(SBlock, lambda block: max_reductions.append(
            block.init is not None and isinstance(block.body, tirx.BufferStore)
            and isinstance(block.body.value, tirx.Max)))], order="pre")
        _SOFTMAX[func] = (any(op.same_as(_EXP_OP) for op in calls), any(max_reductions))
    return _SOFTMAX[func]


def _holds_softmax(graph: DataflowGraph, core) -> bool:
    """Whether the nodes of ``core`` compute an ``exp`` and a ``max`` reduction, as a softmax does
    (one op or several); a sigmoid between two convs (EfficientNet's SiLU) only calls ``exp``."""
    traits = [_softmax_traits(graph.nodes[n].prim_func) for n in core]
    return any(exp for exp, _ in traits) and any(reduce for _, reduce in traits)


def _reaching(graph: DataflowGraph, target: int) -> set[int]:
    """Nodes from which ``target`` is reachable (``target`` included)."""
    seen, stack = set(), [target]
    while stack:
        n = stack.pop()
        if n not in seen:
            seen.add(n)
            stack.extend(graph.nodes[n].inputs)
    return seen


def _output_chain(graph: DataflowGraph, last: int) -> set[int]:
    """The injective ops after ``last`` each of which is the only consumer of the one before."""
    chain = set()
    node = graph.nodes[last]
    while len(node.outputs) == 1 and not node.is_block_output:
        node = graph.nodes[node.outputs[0]]
        if node.kind is not NodeKind.CALL_TIR or node.pattern != OpPattern.INJECTIVE or len(node.inputs) != 1:
            break
        chain.add(node.index)
    return chain


def _feeding(graph: DataflowGraph, core: set[int], patterns: frozenset[OpPattern]) -> set[int]:
    """Ops of ``patterns`` whose every consumer is in ``core`` or is such an op, transitively."""
    group = set(core)
    changed = True
    while changed:
        changed = False
        for n in {p for m in group for p in graph.nodes[m].inputs} - group:
            node = graph.nodes[n]
            if (node.kind is NodeKind.CALL_TIR and node.pattern in patterns and not node.is_block_output
                    and set(node.outputs) <= group):
                group.add(n)
                changed = True
    return group - set(core)
