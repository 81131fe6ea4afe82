"""Sub-graph instances and their order (section 3.3, Algorithm 3, Fig. 6 and Fig. 7).

Each SG is split into ``f`` instances along its BestSplit dimension (Fig. 6: 8/4/2/1 for the four
ResNet-50 stages). Instance edges are inherited from SG edges; an edge is redundant, and dropped,
when SplitInfo shows that the producer instance's slice is not read by the consumer instance (the
consumer's split reaches the producer's split dimension without a halo, through reshapes and
transposes too, and the slices do not overlap). Instances are then ordered breadth-first
(Fig. 7(a)) and by Algorithm 3 (depth-first, Fig. 7(f)); the order with the lower LB peak is kept.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from .grouping import Grouping
from .ops import TurboGraph
from .split_info import Split, output_op, peak_bytes, propagate


@dataclass
class Instance:
    """Instance ``index`` of SG ``sg`` (of ``count``): output ``shape`` and LB footprint."""

    name: str
    sg: int
    index: int
    count: int
    shape: tuple[int, ...]
    out_bytes: int
    footprint: int
    producers: list[int] = field(default_factory=list)
    consumers: list[int] = field(default_factory=list)


@dataclass
class InstanceGraph:
    instances: list[Instance]
    redundant_edges: int = 0

    def index_of(self, name: str) -> int:
        return next(i for i, inst in enumerate(self.instances) if inst.name == name)

    def names(self, order: list[int]) -> list[str]:
        return [self.instances[i].name for i in order]


def build_instances(graph: TurboGraph, grouping: Grouping, labels: list[str] | None = None,
                    splits: list[Split | None] | None = None) -> InstanceGraph:
    """Split every SG into its BestSplit factor's instances and connect them (module docstring).

    SGs without a split (nothing fits LB) are one instance. ``labels`` name the SGs (instance
    ``k`` of SG ``a`` is ``a{k+1}``, as in Fig. 6); default ``sg{i}_``. ``splits`` replaces the
    BestSplits (the partitioner's chains re-split their SGs along the chain's dimension).
    """
    splits = grouping.best if splits is None else splits
    owner = {op: gi for gi, g in enumerate(grouping.groups) for op in g}
    first: list[int] = []
    instances: list[Instance] = []
    for gi, (group, split) in enumerate(zip(grouping.groups, splits)):
        out = graph.ops[output_op(graph, group)]
        count = split.factor if split is not None else 1
        shape = list(out.shape)
        if split is not None:
            shape[split.dim] = -(-shape[split.dim] // count)
        label = labels[gi] if labels else f"sg{gi}_"
        first.append(len(instances))
        for k in range(count):
            instances.append(Instance(f"{label}{k + 1}", gi, k, count, tuple(shape),
                                      -(-out.out_bytes // count),
                                      -(-peak_bytes(graph, group) // count)))
    redundant = 0
    sg_edges = sorted({(owner[p], owner[c]) for c, op in enumerate(graph.ops) for p in op.inputs
                       if owner[p] != owner[c]})
    for p_sg, c_sg in sg_edges:
        slices = _aligned_slices(graph, grouping, p_sg, c_sg, splits)
        for i in range(instances[first[p_sg]].count):
            for j in range(instances[first[c_sg]].count):
                if slices is not None and _disjoint(*slices, i, j):
                    redundant += 1
                    continue
                pi, cj = first[p_sg] + i, first[c_sg] + j
                instances[pi].consumers.append(cj)
                instances[cj].producers.append(pi)
    return InstanceGraph(instances, redundant)


def _aligned_slices(graph: TurboGraph, grouping: Grouping, p_sg: int, c_sg: int,
                    splits: list[Split | None]) -> tuple[int, int, int, int] | None:
    """When consumer SG ``c_sg``'s split reaches producer SG ``p_sg``'s output (:func:`propagate`,
    match_dim through reshapes and transposes) along the producer's split dimension with no halo,
    ``(producer extent, producer factor, consumer extent, consumer factor)`` along the two split
    dimensions, from which :func:`_disjoint` tells the redundant instance edges; else None (every
    instance edge stays)."""
    sp, sc = splits[p_sg], splits[c_sg]
    if sp is None or sc is None:
        return None
    p_out = output_op(graph, grouping.groups[p_sg])
    c_out = output_op(graph, grouping.groups[c_sg])
    need, dim = propagate(graph, grouping.groups[p_sg] + grouping.groups[c_sg], sc.dim,
                          sc.factor)[p_out]
    if dim != sp.dim or need > 1.0 / sc.factor + 1e-9:
        return None
    return graph.ops[p_out].shape[sp.dim], sp.factor, graph.ops[c_out].shape[sc.dim], sc.factor


def _disjoint(p_extent: int, p_factor: int, c_extent: int, c_factor: int, i: int, j: int) -> bool:
    """Whether producer instance ``i``'s slice and consumer instance ``j``'s, as fractions of
    their extents, do not overlap: the edge between them is redundant (section 3.3, Fig. 6)."""
    p_lo, p_hi = i * p_extent // p_factor, (i + 1) * p_extent // p_factor
    c_lo, c_hi = j * c_extent // c_factor, (j + 1) * c_extent // c_factor
    return p_hi * c_extent <= c_lo * p_extent or c_hi * p_extent <= p_lo * c_extent


def bfs_order(ig: InstanceGraph) -> list[int]:
    """Breadth-first (Kahn) order over the instance edges: Fig. 7(a)."""
    indegree = [len(inst.producers) for inst in ig.instances]
    queue = deque(i for i, d in enumerate(indegree) if d == 0)
    order = []
    while queue:
        n = queue.popleft()
        order.append(n)
        for c in ig.instances[n].consumers:
            indegree[c] -= 1
            if indegree[c] == 0:
                queue.append(c)
    return order


def dfs_order(ig: InstanceGraph, visit: list[int] | None = None) -> list[int]:
    """Algorithm 3 (depth-first): Fig. 7(b)-(f).

    ``visit`` is G's instances in any order (default: the BFS order, as Fig. 7 assumes). Instances
    with no in-degree move to ``ready`` (lines 3-4); the last ready instance with zero in-degree is
    scheduled (lines 6-9); its consumers lose a producer and join the end of ``ready`` (lines 10-14).
    """
    # ``visit`` keeps its order as a dict (O(1) removal); ``waiting`` holds what ``ready`` holds.
    visit_left = dict.fromkeys(visit if visit is not None else bfs_order(ig))
    indegree = [len(inst.producers) for inst in ig.instances]
    ready: list[int] = []
    waiting: set[int] = set()
    order: list[int] = []
    while visit_left:
        for s in [s for s in visit_left if indegree[s] == 0]:
            ready.append(s)
            waiting.add(s)
            del visit_left[s]
        while ready:
            p = len(ready) - 1
            while indegree[ready[p]] != 0:
                p -= 1
            sgi = ready.pop(p)
            waiting.discard(sgi)
            order.append(sgi)
            for c in ig.instances[sgi].consumers:
                if c in visit_left or c in waiting:
                    indegree[c] -= 1
                    if c in visit_left:
                        del visit_left[c]
                        ready.append(c)
                        waiting.add(c)
    return order


def order_peak(ig: InstanceGraph, order: list[int]) -> int:
    """LB bytes needed by ``order``: outputs live from their instance until their last consumer,
    plus the running instance's footprint."""
    position = {n: k for k, n in enumerate(order)}
    last = {n: max((position[c] for c in ig.instances[n].consumers), default=position[n])
            for n in order}
    change = [0] * (len(order) + 1)  # an output is live at steps position + 1 .. last
    for m in order:
        if last[m] > position[m]:
            change[position[m] + 1] += ig.instances[m].out_bytes
            change[last[m] + 1] -= ig.instances[m].out_bytes
    peak = live = 0
    for k, n in enumerate(order):
        live += change[k]
        peak = max(peak, live + ig.instances[n].footprint)
    return peak


def choose_order(ig: InstanceGraph) -> tuple[str, list[int]]:
    """Section 3.3: the BFS or the Algorithm 3 (DFS) order, whichever has the lower LB peak (BFS on
    a tie)."""
    bfs, dfs = bfs_order(ig), dfs_order(ig)
    return ("dfs", dfs) if order_peak(ig, dfs) < order_peak(ig, bfs) else ("bfs", bfs)
