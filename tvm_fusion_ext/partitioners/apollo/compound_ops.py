"""Closing compound ops that aggregation did not fuse (after APOLLO section 3.2's opening).

Section 3.2 opens every compound op (softmax, layer norm, ...) into primitive ops so that the
aggregation rules can fuse its reduction and element-wise parts with the ops around it. Where no
group took a piece of an op together with any other op, the opening gained no fusion and costs
what the op's own kernel saves: each piece is a kernel of its own, with its intermediates in
memory between them (Layer I without Layer II's memory stitching leaves a softmax as three
kernels). :func:`close_unfused_compound_ops` makes the pieces of such an op one group again, which
``FuseTIR`` fuses back into the op's loop nests, as ``LegalizeOps`` wrote them.

Pure functions over :class:`~tvm_fusion_ext.analysis.graph.DataflowGraph`; a node's piece comes
from its PrimFunc (:attr:`~tvm_fusion_ext.analysis.graph.OpNode.compound_piece`) or, on hand-built
graphs, from the ``pieces`` argument.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...analysis.graph import DataflowGraph, NodeKind

# node id -> (compound op, position of the piece among the op's loop nests)
Pieces = dict[int, tuple[str, int]]


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


def close_unfused_compound_ops(graph: DataflowGraph, groups: Sequence[Sequence[int]],
                               pieces: Pieces | None = None) -> tuple[list[list[int]], int]:
    """``groups`` with every opened op whose groups hold none of the block's other calls merged into
    one group (its pieces, the tuple items between them and the groups they were in), and how many
    ops were closed. An op whose pieces already share one group, or whose merged group would not
    be convex, is left as it is."""
    group_of = {n: gi for gi, group in enumerate(groups) for n in group}
    merged: set[int] = set()
    closed: list[list[int]] = []
    for instance in compound_instances(graph, pieces):
        members = set(instance)
        indices = {group_of[n] for n in instance if n in group_of}
        if len(indices) == 1 and members <= set(groups[next(iter(indices))]):
            continue
        union = members.union(*(groups[gi] for gi in indices))
        items = {o for n in instance for o in graph.nodes[n].outputs
                 if graph.nodes[o].kind is NodeKind.TUPLE_GET_ITEM}
        if any(o in group_of and group_of[o] not in indices for o in items):
            continue
        union |= items
        if any(graph.nodes[m].kind is NodeKind.CALL_TIR and m not in members for m in union):
            continue
        if not graph.group_is_convex(union):
            continue
        merged |= indices
        closed.append(sorted(union))
    kept = [list(group) for gi, group in enumerate(groups) if gi not in merged]
    return kept + closed, len(closed)


def _producer_calls(graph: DataflowGraph, node: int) -> list[int]:
    """The producers of ``node``, a tuple item replaced by the call that made the tuple."""
    producers = []
    for p in graph.nodes[node].inputs:
        if graph.nodes[p].kind is NodeKind.TUPLE_GET_ITEM and graph.nodes[p].inputs:
            p = graph.nodes[p].inputs[0]
        producers.append(p)
    return producers
