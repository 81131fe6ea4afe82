"""Grouping sub-graphs (Algorithm 2, section 3.2, Fig. 4, rules (i) and (ii)).

Every op starts as its own sub-graph (SG). Straight, diamond and branch merges (Fig. 4) are applied
in turn, BestSplit (Eq. (1)) being recomputed for every merged SG, until none of the three passes
lowers the number of SGs. A merge is allowed only by the rules:

(i)  straight SG1->SG2 (or branch SG2->SG3): ``f(SG2) >= f(SG1)`` (no large splitting factor
     propagates past a down-sampling) and ``f(SG) <= f(SG2)`` (LB utilisation not worse);
(ii) diamond SG2..SG4 into SG: ``f(SG) <= max(f(SG2), f(SG3), f(SG4))``.

An SG of element-wise ops that follows an anchor's layer (its bias, batchnorm, activation,
residual add) joins it without rule (i)'s LB preconditions (``_Grouper._epilogue``): the nodes of
the paper's graphs are layers (section 1.1, Fig. 2), so its rules never separate a conv from its
batchnorm or ReLU; the nodes here are single ops. SGs whose SplitInfo is empty (no split fits
LB) merge with each other only where ``gb_bytes`` is given: section 3.6 suggests GB in place of LB to schedule what LB cannot
hold, so rules (i) and (ii) then compare the splitting factors Algorithm 1 gives against GB
(``gb_bytes``) for SGs none of which has a split fitting LB; an SG with a split fitting LB never
merges with one without. Merges that would create a cycle between SGs are refused, and so are merges of non-fusible
ops; ``max_ops`` (optional) caps an SG's size, and ``single_anchor`` lets an SG hold at most one anchor op (an op with a reduction loop:
conv, matmul, reduction), for code generators that tile one anchor per kernel (the CPU default
schedule, section 4.1). ``accept`` (optional) has the last word on every merge the rules allow:
given the SGs being merged, it says whether their union may be one kernel (on CPU targets, the
profitability check of :mod:`tvm_fusion_ext.cost`: its kernel is not predicted slower than theirs).
With ``single_anchor``, a union in which an op that computes precedes a conv or matmul counts as
predicted slower without asking ``accept`` (``_Grouper._recomputed_prologue``): the CPU generator
inlines that op into the contraction's operand load, once per column tile inside the micro-kernel,
and the cost model prices only its arithmetic, not the loads the micro-kernel gains.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .ops import TurboGraph
from .split_info import MAX_RECOMPUTE_RATIO, Split, best_split, split_info

# Whether SGs (op-id sets) may merge into one kernel; see the module docstring.
SubgraphCheck = Callable[[list[frozenset[int]]], bool]


@dataclass
class Grouping:
    """Result of Algorithm 2: SGs (sorted op ids, in topological order) and their BestSplit;
    ``gb_best``: each SG's BestSplit against GB (section 3.6; None where no split fits GB, empty
    without a GB)."""

    groups: list[list[int]]
    best: list[Split | None]
    merges: dict[str, int] = field(default_factory=dict)  # merges done per pattern
    gb_best: list[Split | None] = field(default_factory=list)


class _Grouper:
    def __init__(self, graph: TurboGraph, lb_bytes: int, max_ops: int | None,
                 max_recompute: float, single_anchor: bool = False, accept: SubgraphCheck | None = None,
                 gb_bytes: int | None = None):
        self.graph = graph
        self.accept = accept
        self.lb = lb_bytes
        self.gb = gb_bytes
        self.max_ops = max_ops
        self.max_recompute = max_recompute
        self.single_anchor = single_anchor
        self.groups: list[frozenset[int]] = [frozenset({i}) for i in range(len(graph))]
        self._best: dict[tuple[frozenset[int], int], Split | None] = {}
        self.merges = {"straight": 0, "diamond": 0, "branch": 0}

    # ---- BestSplit per SG (Algorithm 1 + Eq. (1)), memoised ----------------------------------
    def best(self, group: frozenset[int], capacity: int | None = None) -> Split | None:
        """BestSplit of ``group`` against ``capacity`` bytes (default: LB)."""
        key = (group, capacity or self.lb)
        if key not in self._best:
            self._best[key] = best_split(split_info(self.graph, group, key[1], self.max_recompute))
        return self._best[key]

    def factor(self, group, capacity: int | None = None) -> int | None:
        split = self.best(group, capacity)
        return split.factor if split is not None else None

    def capacity(self, parts: list[frozenset[int]]) -> int | None:
        """The memory whose splitting factors rules (i) and (ii) compare for ``parts``: LB when
        every part has a split fitting LB; GB (section 3.6) when none has and ``gb_bytes`` is
        given; None (no merge) otherwise."""
        unsplit = [self.factor(p) is None for p in parts]
        if not any(unsplit):
            return self.lb
        return self.gb if all(unsplit) else None

    # ---- SG-level structure -------------------------------------------------------------------
    def _owner(self) -> dict[int, int]:
        return {op: gi for gi, g in enumerate(self.groups) for op in g}

    def _edges(self):
        owner = self._owner()
        producers = [set() for _ in self.groups]
        consumers = [set() for _ in self.groups]
        for gi, g in enumerate(self.groups):
            for op in g:
                for p in self.graph.ops[op].inputs:
                    if owner[p] != gi:
                        producers[gi].add(owner[p])
                        consumers[owner[p]].add(gi)
        return producers, consumers

    def _mergeable(self, union: frozenset[int]) -> bool:
        if not self.graph.fusible_together(union):
            return False
        if self.max_ops is not None and len(union) > self.max_ops:
            return False
        if self.single_anchor and sum(self.graph.ops[op].anchor for op in union) > 1:
            return False
        return not self._creates_cycle(union)

    def _recomputed_prologue(self, union: frozenset[int]) -> bool:
        """Does an op that computes reach a conv or matmul of ``union`` inside it? The CPU kernel
        generator would inline it into the micro-kernel (an LSTM cell's ``o * tanh(c)`` ahead of
        the next step's matmul cost that matmul 1.7x its time; data movement, a reshape or a
        transpose, does not count)."""
        ops = self.graph.ops

        def inputs_inside(op):
            return [p for p in ops[op].inputs if p in union]

        reached = _reachable([p for op in union if ops[op].contraction for p in inputs_inside(op)],
                             inputs_inside)
        return any(ops[op].computes and not ops[op].anchor for op in reached)

    def _creates_cycle(self, union: frozenset[int]) -> bool:
        frontier = [c for op in union for c in self.graph.consumers[op] if c not in union]
        seen = _reachable(frontier, lambda op: self.graph.consumers[op])
        return any(p in seen for op in union for p in self.graph.ops[op].inputs)

    def _replace(self, parts: list[int], union: frozenset[int]) -> None:
        keep = [g for gi, g in enumerate(self.groups) if gi not in set(parts)]
        self.groups = sorted(keep + [union], key=min)

    # ---- rules ----------------------------------------------------------------------------------
    def rule_i(self, first: frozenset[int], second: frozenset[int]) -> frozenset[int] | None:
        union = first | second
        if self._epilogue(first, second):
            return union if self._mergeable(union) and self._accepted([first, second]) else None
        capacity = self.capacity([first, second])
        if capacity is None:
            return None
        f1, f2 = self.factor(first, capacity), self.factor(second, capacity)
        if f1 is None or f2 is None or f2 < f1 or not self._mergeable(union):
            return None
        f = self.factor(union, capacity)
        return union if f is not None and f <= f2 and self._accepted([first, second]) else None

    def _epilogue(self, first: frozenset[int], second: frozenset[int]) -> bool:
        """Is ``second`` an element-wise epilogue of the layer ``first`` ends with (section 1.1: a
        layer is an op with parameters and the auxiliary ops after it, e.g. conv, batchnorm and
        ReLU), joining it without rule (i)'s LB preconditions: no anchor of its own, every op of
        the output shape of ``first``'s last anchor, and (without ``single_anchor``) ``first``
        ending with that anchor's layer (every op after the anchor of its shape).

        The paper's graph nodes are layers, so its rules never weigh a layer's element-wise ops
        against its anchor; here they are ops of their own, and rule (i) would keep them apart
        wherever the anchor's input is larger than its output (a strided conv: ``f(SG2) <
        f(SG1)``) or the union fits no split where the parts do (ResNet-50's bottleneck block and
        its residual add at batch 64: the add's two inputs and output, 3 x 1.6 MB per image at
        28x28x512). Left apart, each such op is a kernel that takes the whole tensor DDR -> LB ->
        DDR. With ``single_anchor`` (the CPU kernel generator, ``first`` holding one anchor) the
        ops are applied to the register tile as it is written back (section 4.1's loop fusion);
        on a DSA, section 4.1 fuses the loops within a layer."""
        ops = self.graph.ops
        if any(ops[op].anchor for op in second):
            return False
        anchors = sorted(op for op in first if ops[op].anchor)
        if not anchors or (self.single_anchor and len(anchors) != 1):
            return False
        shape = ops[anchors[-1]].shape
        if not self.single_anchor and any(ops[op].shape != shape for op in first if op > anchors[-1]):
            return False
        return all(ops[op].shape == shape for op in second)

    def rule_ii(self, parts: list[frozenset[int]]) -> frozenset[int] | None:
        capacity = self.capacity(parts)
        if capacity is None:
            return None
        factors = [self.factor(p, capacity) for p in parts]
        if any(f is None for f in factors):
            return None
        union = frozenset().union(*parts)
        if not self._mergeable(union):
            return None
        f = self.factor(union, capacity)
        return union if f is not None and f <= max(factors) and self._accepted(parts) else None

    def _accepted(self, parts: list[frozenset[int]]) -> bool:
        if self.accept is None:
            return True
        if self.single_anchor and self._recomputed_prologue(frozenset().union(*parts)):
            return False
        return self.accept(parts)

    # ---- Fig. 4 patterns ---------------------------------------------------------------------------
    def straight_merge(self) -> int:
        """Fig. 4(a): SG1 is SG2's only producer and SG2 is SG1's only consumer."""
        i = 0
        while i < len(self.groups):
            producers, consumers = self._edges()
            merged = False
            if len(consumers[i]) == 1:
                j = next(iter(consumers[i]))
                if producers[j] == {i}:
                    union = self.rule_i(self.groups[i], self.groups[j])
                    if union is not None:
                        self._replace([i, j], union)
                        self.merges["straight"] += 1
                        merged = True
            if not merged:
                i += 1
        return len(self.groups)

    def diamond_merge(self) -> int:
        """Fig. 4(b): one entry SG1, one exit SG4, two or more paths between them; SG2..SG4 merge.

        The exit is the entry's nearest common descendant of all its consumers (its post-dominator
        at SG level); every SG on a path strictly after the entry must be fed only by the entry or by
        SGs of the diamond, and only the exit may feed SGs outside it.
        """
        i = 0
        while i < len(self.groups):
            producers, consumers = self._edges()
            merged = False
            if len(consumers[i]) >= 2:
                members = self._diamond(i, producers, consumers)
                if members is not None:
                    union = self.rule_ii([self.groups[m] for m in members])
                    if union is not None:
                        self._replace(members, union)
                        self.merges["diamond"] += 1
                        merged = True
            if not merged:
                i += 1
        return len(self.groups)

    def _diamond(self, entry: int, producers, consumers) -> list[int] | None:
        def reached(g):
            return _reachable([g], lambda n: consumers[n])

        reach = [reached(c) for c in consumers[entry]]
        common = set.intersection(*reach)
        if not common:
            return None
        exit_ = min(common, key=lambda g: min(self.groups[g]))
        members = {g for g in set().union(*reach) if exit_ in reached(g)}
        for m in members:
            if not producers[m] <= members | {entry}:
                return None
            if m != exit_ and not consumers[m] <= members:
                return None
        return sorted(members)

    def branch_merge(self) -> int:
        """Fig. 4(c): an exit SG3 with several producers; a producer SG2 whose only consumer is SG3
        merges into it (the latest such producer, so SG1 may feed SG2)."""
        i = 0
        while i < len(self.groups):
            producers, consumers = self._edges()
            merged = False
            if len(producers[i]) >= 2:
                for p in sorted(producers[i], key=lambda g: -min(self.groups[g])):
                    if consumers[p] != {i}:
                        continue
                    union = self.rule_i(self.groups[p], self.groups[i])
                    if union is not None:
                        self._replace([p, i], union)
                        self.merges["branch"] += 1
                        merged = True
                        break
            if not merged:
                i += 1
        return len(self.groups)

    def run(self) -> Grouping:
        """Algorithm 2 lines 5-15."""
        while True:
            before = len(self.groups)
            self.straight_merge()
            self.diamond_merge()
            self.branch_merge()
            if len(self.groups) >= before:
                break
        groups = [sorted(g) for g in self.groups]
        best = [self.best(g) for g in self.groups]
        gb_best = [] if self.gb is None else [self.best(g, self.gb) for g in self.groups]
        return Grouping(groups, best, dict(self.merges), gb_best)


def _reachable(starts: list[int], neighbours: Callable[[int], list[int]]) -> set[int]:
    """Ops reached from ``starts`` (included) by following ``neighbours``."""
    seen, stack = set(), list(starts)
    while stack:
        op = stack.pop()
        if op not in seen:
            seen.add(op)
            stack.extend(neighbours(op))
    return seen


def group_subgraphs(graph: TurboGraph, lb_bytes: int, max_ops: int | None = None,
                    max_recompute: float = MAX_RECOMPUTE_RATIO,
                    single_anchor: bool = False, accept: SubgraphCheck | None = None,
                    gb_bytes: int | None = None) -> Grouping:
    """Algorithm 2: group ``graph``'s ops into SGs for a local buffer of ``lb_bytes`` (and a global
    buffer of ``gb_bytes`` for the SGs no split of which fits LB, section 3.6)."""
    return _Grouper(graph, lb_bytes, max_ops, max_recompute, single_anchor, accept, gb_bytes).run()
