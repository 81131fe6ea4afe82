"""Execution-order scheduling: BFS vs DFS kernel orders and their peak live memory.

mindspore-jit-graph-kernel-fusion ("Execution Order Scheduling"): the same graph run in BFS order
can need more memory than in DFS order, because BFS starts every independent branch before any of
them finishes. MindSpore offers both (``exec_order="bfs"/"dfs"``); we compute both orders, estimate
each one's peak of live tensor memory, and keep the lower (GraphTurbo section 3.3 orders kernels for
the same reason).

Memory model (the paper's 6-kernel example, reproduced in the tests): a kernel's output is
allocated when it runs, while its inputs are still live; a tensor is freed right after its last
consumer has run; tensors visible after the block live to the end; function parameters are not
counted. Both orders are topological orders produced by Kahn's algorithm and differ only in which
ready node runs next:

* BFS: the node that became ready *earliest* (FIFO);
* DFS: the node that became ready *latest* (LIFO), so a branch is finished before the next starts.

Ties go to the lower binding position, so the result is deterministic.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from .graph import DataflowGraph

BFS = "bfs"
DFS = "dfs"
ORDERS = (BFS, DFS)


@dataclass(frozen=True)
class OrderChoice:
    """The chosen order of a block, and the peak live bytes of both candidates."""

    order: list[int]
    strategy: str
    peak_bytes: int
    peaks: dict


def topological_order(graph: DataflowGraph, strategy: str) -> list[int]:
    """A BFS or DFS topological order of the graph's nodes (see the module docstring)."""
    if strategy not in ORDERS:
        raise ValueError(f"unknown order {strategy!r}; expected one of {ORDERS}")
    pending = [len(n.inputs) for n in graph.nodes]
    clock = 0
    sign = 1 if strategy == BFS else -1
    ready = [(0, n.index) for n in graph.nodes if not n.inputs]
    heapq.heapify(ready)
    order = []
    while ready:
        _, node = heapq.heappop(ready)
        order.append(node)
        clock += 1
        for consumer in graph.nodes[node].outputs:
            pending[consumer] -= 1
            if pending[consumer] == 0:
                heapq.heappush(ready, (sign * clock, consumer))
    if len(order) != len(graph.nodes):
        raise ValueError("the graph has a cycle")
    return order


def peak_live_bytes(graph: DataflowGraph, order: list[int]) -> int:
    """Peak of live tensor bytes when the nodes run in ``order`` (memory model above)."""
    remaining = [len(n.outputs) for n in graph.nodes]
    live = 0
    peak = 0
    for node in order:
        n = graph.nodes[node]
        live += n.out_bytes
        peak = max(peak, live)
        for producer in n.inputs:
            remaining[producer] -= 1
            if remaining[producer] == 0 and not graph.nodes[producer].is_block_output:
                live -= graph.nodes[producer].out_bytes
        if not n.outputs and not n.is_block_output:
            live -= n.out_bytes
    return peak


def choose_order(graph: DataflowGraph) -> OrderChoice:
    """Both orders and their peaks; the lower peak wins (DFS on a tie: it keeps branches local)."""
    peaks, orders = {}, {}
    for strategy in ORDERS:
        orders[strategy] = topological_order(graph, strategy)
        peaks[strategy] = peak_live_bytes(graph, orders[strategy])
    best = BFS if peaks[BFS] < peaks[DFS] else DFS
    return OrderChoice(orders[best], best, peaks[best], peaks)
