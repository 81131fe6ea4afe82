"""Closing compound ops that aggregation did not fuse (after APOLLO section 3.2's opening).

Section 3.2 opens every compound op (softmax, layer norm, ...) into primitive ops so that the
aggregation rules can fuse its reduction and element-wise parts with the ops around it. Where no
group took a piece of an op together with any other op, the opening gained no fusion and costs
what the op's own kernel saves: each piece is a kernel of its own, with its intermediates in
memory between them (Layer I without Layer II's memory stitching leaves a softmax as three
kernels). :func:`close_compound_ops` makes the pieces of such an op one group again, which
``FuseTIR`` fuses back into the op's loop nests, as ``LegalizeOps`` wrote them; so too, when a
judge (the profitability check) predicts it faster, an op of which some pieces were fused with
other ops and the rest left apart.

Pure functions over :class:`~tvm_fusion_ext.analysis.graph.DataflowGraph`; a node's piece comes
from its PrimFunc (:attr:`~tvm_fusion_ext.analysis.graph.OpNode.compound_piece`) or, on hand-built
graphs, from the ``pieces`` argument.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ...analysis.graph import DataflowGraph, NodeKind

# node id -> (compound op, position of the piece among the op's loop nests)
Pieces = dict[int, tuple[str, int]]

# (the groups holding an op's pieces, the op closed beside what is left of them) -> close it?
ClosingJudge = Callable[[list[frozenset], list[frozenset]], bool]


def graph_pieces(graph: DataflowGraph) -> Pieces:
    """The calls of ``graph`` that are pieces of opened compound ops."""
    return {node.index: node.compound_piece for node in graph.nodes
            if node.kind is NodeKind.CALL_TIR and node.compound_piece is not None}


def compound_instances(graph: DataflowGraph, pieces: Pieces | None = None) -> list[list[int]]:
    """The pieces of each opened call, sorted: pieces of one compound op linked by data edges from
    an earlier piece to a later one (through the tuple items of a piece with several outputs). Two
    calls of the same op in a row stay apart: the second one's pieces read the first one's last
    piece, never an earlier one."""
    pieces = graph_pieces(graph) if pieces is None else pieces
    parent = {n: n for n in pieces}

    def root(n: int) -> int:
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for consumer, (op, position) in pieces.items():
        for producer in _producer_calls(graph, consumer):
            if producer in pieces and pieces[producer][0] == op and pieces[producer][1] < position:
                parent[root(consumer)] = root(producer)
    instances: dict[int, list[int]] = {}
    for n in sorted(pieces):
        instances.setdefault(root(n), []).append(n)
    return [members for members in instances.values() if len(members) > 1]


def close_compound_ops(graph: DataflowGraph, groups: Sequence[Sequence[int]], pieces: Pieces | None = None,
                       closing_pays: ClosingJudge | None = None) -> tuple[list[list[int]], int]:
    """``groups`` with opened ops closed again, and how many were closed.

    An op whose pieces share one group is left as it is. An op whose groups hold none of the
    block's other calls is closed: its pieces, the tuple items between them and the groups they
    were in become one group. An op whose pieces are spread over several groups, some of which
    also hold other ops (Layer I without memory stitching fuses a layer norm's first reduction
    with the add before it, and leaves its second reduction and its normalisation as kernels of
    their own), is closed when that makes no more kernels than it replaces and
    ``closing_pays(current, closed)`` says so: ``current`` are the groups that hold its pieces (a
    piece in no group is one of its own), ``closed`` the op as one group beside what is left of
    them (each connected rest one group). Without a judge such an op stays as aggregation left
    it. A closing whose groups would not be convex or would depend on each other in a cycle is
    not made."""
    groups = [set(group) for group in groups]
    count = 0
    for instance in compound_instances(graph, pieces):
        members = set(instance)
        group_of = {n: gi for gi, group in enumerate(groups) for n in group}
        indices = {group_of[n] for n in instance if n in group_of}
        if len(indices) == 1 and members <= groups[next(iter(indices))]:
            continue
        items = {o for n in instance for o in graph.nodes[n].outputs
                 if graph.nodes[o].kind is NodeKind.TUPLE_GET_ITEM}
        if any(o in group_of and group_of[o] not in indices for o in items):
            continue
        touched = [groups[gi] for gi in sorted(indices)]
        union = members.union(items, *touched)
        if all(graph.nodes[m].kind is not NodeKind.CALL_TIR or m in members for m in union):
            replacement = [union]
        elif closing_pays is None:
            continue
        else:
            op = members | items
            replacement = [op] + [set(rest) for group in touched for rest in graph.connected_parts(group - op)]
            current = [frozenset(g) for g in touched] + [frozenset([n]) for n in instance if n not in group_of]
            if len(replacement) > len(current) or not closing_pays(current, [frozenset(g) for g in replacement]):
                continue
        candidate = [g for gi, g in enumerate(groups) if gi not in indices] + replacement
        if not all(graph.group_is_convex(g) for g in replacement) or not graph.groups_are_acyclic(candidate):
            continue
        groups = candidate
        count += 1
    return [sorted(group) for group in groups], count


def _producer_calls(graph: DataflowGraph, node: int) -> list[int]:
    """The producers of ``node``, a tuple item replaced by the call that made the tuple."""
    producers = []
    for p in graph.nodes[node].inputs:
        if graph.nodes[p].kind is NodeKind.TUPLE_GET_ITEM and graph.nodes[p].inputs:
            p = graph.nodes[p].inputs[0]
        producers.append(p)
    return producers
