"""Micro-graphs: the disjoint node groups APOLLO's algorithms merge (sections 3.3, 4.2, 4.3).

:class:`MicroGraphs` keeps a partition of a :class:`~tvm_fusion_ext.analysis.graph.DataflowGraph`
with one APOLLO type per group (Algorithm 1, line 2: ``G = {op}; G.type = op.type``), answers the
``acyclic(Gp, Gc)`` test of Algorithms 1 and 2 on the graph of groups, and refuses merges whose
composition pattern the downstream compiler rejected before (upward feedback, section 4.1).

Sub-graph extraction (section 3.1) lives here too: only ``call_tir`` kernels are eligible; packed
library calls, tuples, match-casts and other bindings stay out of every micro-graph.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from tvm import relax

from ...analysis.graph import DataflowGraph, NodeKind, OpNode, OpPattern
from ...analysis.primitive_types import PrimitiveType


def is_eligible(graph: DataflowGraph, node: int) -> bool:
    """Section 3.1: a node APOLLO may fuse: a TIR kernel (``call_tir`` / ``call_tir_inplace``).

    Library calls (``call_dps_packed``, collectives), control flow and Relax-level bindings are not.
    """
    return graph.nodes[node].kind is NodeKind.CALL_TIR


def apollo_type(node: OpNode) -> PrimitiveType:
    """The type a node's micro-graph starts with (Algorithm 1, line 2: ``G.type = op.type``).

    The node's primitive type, with opaque ops that only move data (no arithmetic, TVM op pattern
    at most injective) refined into the two sub-kinds that have rules in :data:`~.rules.TABLE_1`:

    * :attr:`PrimitiveType.RESHAPE`, the *reshaping ops* of section 3.3 (reshape, squeeze,
      flatten): the output holds the input's elements in the same row-major order, as
      :func:`tvm.relax.analysis.has_reshape_pattern` proves;
    * :attr:`PrimitiveType.DATA_MOVEMENT`: slicing, concatenation, padding, gathers, whose output
      does not cover its input element for element.

    Hand-built graphs give these types directly.
    """
    ptype = node.ptype
    if (ptype is not PrimitiveType.OPAQUE or node.prim_func is None or node.flops
            or node.pattern > OpPattern.INJECTIVE):
        return ptype
    if relax.analysis.has_reshape_pattern(node.prim_func):
        return PrimitiveType.RESHAPE
    return PrimitiveType.DATA_MOVEMENT


def extract_subgraphs(graph: DataflowGraph) -> list[list[int]]:
    """Section 3.1: the maximal connected sub-graphs ``F_x`` of eligible nodes, in program order."""
    return graph.connected_parts(n.index for n in graph.nodes if is_eligible(graph, n.index))


def op_name(graph: DataflowGraph, node: int) -> str:
    """The op's name without the numeric suffix the module adds to repeated PrimFuncs."""
    n = graph.nodes[node]
    return re.sub(r"_?\d+$", "", n.callee or n.name)


def composition_pattern(graph: DataflowGraph, nodes: Iterable[int]) -> str:
    """The composition pattern of a group of ops, as recorded in the feedback file.

    Ops in program order as ``type:name``, then the producer-consumer edges inside the group by
    position. Shapes are left out: the pattern is a rule-level fact ("this op composition does not
    compile"), as the paper's feedback updates Table 1.
    """
    members = sorted(nodes)
    pos = {m: i for i, m in enumerate(members)}
    ops = ";".join(f"{apollo_type(graph.nodes[m]).value}:{op_name(graph, m)}" for m in members)
    edges = ",".join(f"{pos[p]}>{pos[m]}" for m in members for p in graph.nodes[m].inputs if p in pos)
    return f"{ops}|{edges}"


class MicroGraphs:
    """A partition of ``graph`` into typed micro-graphs, merged by APOLLO's algorithms.

    Every node starts as its own micro-graph (Algorithm 1, lines 1-3). Ineligible nodes (section
    3.1) are micro-graphs that never merge. ``forbidden`` holds composition patterns the downstream
    compiler rejected; a merge producing one of them is refused.
    """

    def __init__(self, graph: DataflowGraph, forbidden: Iterable[str] = ()):
        self.graph = graph
        self.forbidden = frozenset(forbidden)
        self._parent = list(range(len(graph)))
        self.members: dict[int, set[int]] = {n.index: {n.index} for n in graph.nodes}
        self.types: dict[int, PrimitiveType] = {n.index: apollo_type(n) for n in graph.nodes}
        self.eligible = {n.index for n in graph.nodes if is_eligible(graph, n.index)}
        self.merges: list[tuple] = []  # (rule name, members of Gp, members of Gc[, ...]) per merge

    # ---- groups ------------------------------------------------------------------------------
    def find(self, node: int) -> int:
        while self._parent[node] != node:
            self._parent[node] = self._parent[self._parent[node]]
            node = self._parent[node]
        return node

    def groups(self) -> list[int]:
        """Representatives of the current micro-graphs, in program order of their first op."""
        return sorted(self.members)

    def type_of(self, group: int) -> PrimitiveType:
        return self.types[self.find(group)]

    def nodes_of(self, group: int) -> set[int]:
        return self.members[self.find(group)]

    def is_eligible_group(self, group: int) -> bool:
        return self.find(group) in self.eligible

    def successors(self, group: int) -> list[int]:
        group = self.find(group)
        out = {self.find(o) for n in self.members[group] for o in self.graph.nodes[n].outputs}
        out.discard(group)
        return sorted(out)

    def predecessors(self, group: int) -> list[int]:
        group = self.find(group)
        ins = {self.find(p) for n in self.members[group] for p in self.graph.nodes[n].inputs}
        ins.discard(group)
        return sorted(ins)

    def edges(self) -> list[tuple[int, int]]:
        """Producer-consumer edges between distinct eligible micro-graphs (``e`` in Algorithm 1),
        ordered by consumer then producer op, as node pairs resolved with :meth:`find` on use."""
        result, eligible = [], self.eligible_nodes
        for node in self.graph.nodes:
            if node.index not in eligible:
                continue
            for p in node.inputs:
                if p in eligible and self.find(p) != self.find(node.index):
                    result.append((p, node.index))
        return result

    @property
    def eligible_nodes(self) -> set[int]:
        return {n for g in self.eligible for n in self.members[g]}

    # ---- legality ----------------------------------------------------------------------------
    def reaches(self, source: int, target: int) -> bool:
        """Is there a path of data edges from group ``source`` to group ``target``?"""
        source, target = self.find(source), self.find(target)
        seen, stack = set(), self.successors(source)
        while stack:
            g = stack.pop()
            if g == target:
                return True
            if g not in seen:
                seen.add(g)
                stack.extend(self.successors(g))
        return False

    def creates_cycle(self, groups: Iterable[int]) -> bool:
        """``!acyclic``: would merging ``groups`` into one kernel create a cycle between kernels?

        Checked on the graph of groups: a path that leaves the union and comes back into it.
        """
        union = {self.find(g) for g in groups}
        stack = [s for g in union for s in self.successors(g) if s not in union]
        seen = set()
        while stack:
            g = stack.pop()
            if g in union:
                return True
            if g in seen:
                continue
            seen.add(g)
            stack.extend(self.successors(g))
        return False

    def pattern_of(self, groups: Iterable[int]) -> str:
        nodes = set().union(*(self.nodes_of(g) for g in groups))
        return composition_pattern(self.graph, nodes)

    def can_merge(self, groups: Iterable[int]) -> bool:
        """Eligible, distinct, acyclic after merging, and not a pattern the feedback forbids."""
        groups = {self.find(g) for g in groups}
        if len(groups) < 2 or not groups <= self.eligible:
            return False
        if self.creates_cycle(groups):
            return False
        return not self.forbidden or self.pattern_of(groups) not in self.forbidden

    # ---- merging -----------------------------------------------------------------------------
    def merge(self, groups: Iterable[int], result: PrimitiveType, rule: str = "") -> int:
        """``aggregate``: union the micro-graphs, give the result type ``result``."""
        ordered = list(dict.fromkeys(self.find(g) for g in groups))
        if rule:
            self.merges.append((rule, *(tuple(sorted(self.members[g])) for g in ordered)))
        groups = sorted(ordered)
        root = groups[0]
        for g in groups[1:]:
            self._parent[g] = root
            self.members[root] |= self.members.pop(g)
            self.types.pop(g)
            self.eligible.discard(g)
        self.types[root] = result
        return root

    def partition(self) -> list[list[int]]:
        """The groups as sorted node lists, in program order (input of ``MaterializePartition``)."""
        return [sorted(self.members[g]) for g in self.groups()]
