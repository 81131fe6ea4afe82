"""Algorithm 3 (Appendix A): Layer III parallelism stitching (section 4.3).

Candidates come from three patterns, in order (line 1):

* **multi-head**: a micro-graph with several consumers; each branch is traversed forward from one
  consumer until another multi-head / multi-tail micro-graph is reached: a multi-tail terminator is
  collected, a multi-head one excluded;
* **multi-tail**: a micro-graph with several producers; each branch is traversed backward: a
  multi-head terminator is collected, a multi-tail one excluded;
* **independent**: disconnected sub-graphs, made a multi-tail case by a virtual common tail (the
  paper prefers a tail when both are legal): each sub-graph's sinks start a backward traversal.

The common head / tail itself is never a candidate; compute-bound micro-graphs are excluded (they
end a traversal), and a virtual head / tail joins at most :data:`MAX_BRANCHES` branches.

For each set, one unvisited op is taken from every branch, the round is sorted by cost (descending)
and composed greedily with Cost Model (3) (lines 6-10). A composition is one kernel, so its ops must
be mutually independent and the merge acyclic: a round keeps only ops with no path between them,
and a composition the partition refuses (cycle, forbidden pattern) counts as not profitable.
Compositions the cost model rejects are reported (section 5, auto-tuning) for the feedback file.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .cost_model import CostModel, gain
from .micro_graphs import MicroGraphs, extract_subgraphs

MAX_BRANCHES = 7  # "at most 7 independent branches for fast compilation" (Appendix A)
PATTERNS = ("multi-head", "multi-tail", "independent")


@dataclass
class ParallelReport:
    stitched: list[tuple[tuple[int, ...], ...]] = field(default_factory=list)
    rejected: list[tuple[tuple[tuple[int, ...], ...], float]] = field(default_factory=list)


def _excluded(state: MicroGraphs, group: int, model: CostModel) -> bool:
    return not state.is_eligible_group(group) or model.is_compute_bound(frozenset(state.nodes_of(group)))


def _eligible_neighbours(state: MicroGraphs, group: int, forward: bool) -> list[int]:
    nbrs = state.successors(group) if forward else state.predecessors(group)
    return [g for g in nbrs if state.is_eligible_group(g)]


def _traverse(state: MicroGraphs, start: int, forward: bool, model: CostModel) -> list[int]:
    """One branch from ``start``, forward (multi-head) or backward (multi-tail)."""
    branch, cur, seen = [], start, set()
    while cur not in seen:
        seen.add(cur)
        if _excluded(state, cur, model):
            break
        heads = len(_eligible_neighbours(state, cur, True)) >= 2
        tails = len(_eligible_neighbours(state, cur, False)) >= 2
        if (heads and forward) or (tails and not forward):
            break  # a terminator of the traversal's own kind is excluded
        branch.append(cur)
        if (tails and forward) or (heads and not forward):
            break  # the other kind is collected, then ends the branch
        nxt = _eligible_neighbours(state, cur, forward)
        if len(nxt) != 1:
            break
        cur = nxt[0]
    return branch


def _chunks(branches: list[list[int]]) -> list[list[list[int]]]:
    branches = [b for b in branches if b]
    return [branches[i:i + MAX_BRANCHES] for i in range(0, len(branches), MAX_BRANCHES)]


def extract_candidate_sets(state: MicroGraphs, pattern: str, model: CostModel) -> list[list[list[int]]]:
    """Line 2: sets of parallelisable branches (each a list of micro-graphs) for one pattern."""
    sets: list[list[list[int]]] = []
    if pattern == "independent":
        sinks = []
        for component in extract_subgraphs(state.graph):
            groups = sorted({state.find(n) for n in component})
            sinks.append([g for g in groups if not _eligible_neighbours(state, g, True)])
        branches = [_traverse(state, s, False, model) for comp in sinks for s in comp]
        return _chunks(branches) if len(branches) >= 2 else []
    forward = pattern == "multi-head"
    for group in state.groups():
        if not state.is_eligible_group(group):
            continue
        nbrs = _eligible_neighbours(state, group, forward)
        if len(nbrs) >= 2:
            sets.extend(_chunks([_traverse(state, n, forward, model) for n in nbrs]))
    return sets


def _independent(state: MicroGraphs, a: int, b: int) -> bool:
    return not state.reaches(a, b) and not state.reaches(b, a)


def stitch_parallel(state: MicroGraphs, model: CostModel) -> ParallelReport:
    """Algorithm 3 (merges in place; returns stitched and rejected compositions)."""
    report = ParallelReport()
    for pattern in PATTERNS:  # line 1
        for branches in extract_candidate_sets(state, pattern, model):  # line 2
            visited: set[int] = set()  # line 3, by first op of each micro-graph
            while sum(any(b not in visited for b in branch) for branch in branches) >= 2:
                heads = [next(b for b in branch if b not in visited) for branch in branches
                         if any(b not in visited for b in branch)]  # line 4
                visited.update(heads)  # line 11
                group: list[int] = []
                for op in dict.fromkeys(state.find(h) for h in heads):
                    if all(_independent(state, op, other) for other in group):
                        group.append(op)
                _compose(state, model, group, report)
    return report


def _compose(state: MicroGraphs, model: CostModel, group: list[int], report: ParallelReport) -> None:
    """Lines 5-10: sort by cost, compose ops ``m..m+k-1`` while Cost Model (3) gains."""
    cost = {g: model.cost(frozenset(state.nodes_of(g)), 1) for g in group}
    group = sorted(group, key=lambda g: -cost[g])  # line 5
    n = len(group)
    m, k = 1, n  # line 6 (1-based, as in the paper)
    while m <= n and k >= 2:
        ops = group[m - 1:m - 1 + k]
        members = [frozenset(state.nodes_of(g)) for g in ops]
        value = gain(model, members)
        if value > 0 and state.can_merge(ops):
            report.stitched.append(tuple(tuple(sorted(x)) for x in members))
            state.merge(ops, state.type_of(ops[0]), "parallel")  # line 7
            m, k = m + k, n - (m + k) + 1  # line 8
        else:
            if value <= 0:
                report.rejected.append((tuple(tuple(sorted(x)) for x in members), value))
            k -= 1  # line 9
        if m != n and k == 1:  # line 10
            m, k = m + k, n - (m + k) + 1
