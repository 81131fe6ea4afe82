"""SplitInfo (Algorithm 1), BestSplit (Eq. (1)) and the recomputation guard (section 3.1).

A sub-graph (SG) is a set of op ids of a :class:`~.ops.TurboGraph`. Its output is the tensor of its
last op in topological order (section 3.6: one output; the others are produced alongside it).

``peak`` is the largest working set of one op of the SG: its output plus its activation inputs.
With buffer stitching (section 4.2) the layers of an instance exchange data in LB one after the
other, so an op's working set is what must fit at once. Weights are not counted: they go through
the small fixed promotion buffers of section 2.2 / Fig. 11. Since the peak of a union is then the
largest peak of its parts, rules (i) and (ii) are decided by the splitting factors' order along the
graph (down-sampling lowers them), and by the recomputation guard, which depends on the grouping.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from .ops import TurboGraph

# Section 3.1's "simple cost model": a split is refused when the instances together execute more
# than this multiple of the SG's FLOPs (recomputed producers of conv / matmul ops, halos).
MAX_RECOMPUTE_RATIO = 1.25


@dataclass(frozen=True)
class Split:
    """One SplitInfo tuple ``(split_d, n_d, f_d, d)``."""

    split: int
    n: int
    factor: int
    dim: int

    def key(self) -> tuple[int, int, int]:
        """Eq. (1): lexicographic maximum of ``(n_d, -f_d, -d)``."""
        return (self.n, -self.factor, -self.dim)


def output_op(graph: TurboGraph, sg: Iterable[int]) -> int:
    return max(sg)


def peak_bytes(graph: TurboGraph, sg: Iterable[int]) -> int:
    """``peak`` of Algorithm 1: the largest working set of one op of ``sg`` (module docstring)."""
    return max(graph.ops[m].out_bytes + graph.ops[m].external_input_bytes
               + sum(graph.ops[p].out_bytes for p in graph.ops[m].inputs) for m in sg)


def candidate_factors(extent: int) -> list[int]:
    """Algorithm 1 line 4: ``v`` in ``[1, 2, 4, 8, 9, ..., size(d)]`` (up to the extent)."""
    return [v for v in (1, 2, 4) if v <= extent] + list(range(8, extent + 1))


def split_info(graph: TurboGraph, sg: Iterable[int], lb_bytes: int,
               max_recompute: float = MAX_RECOMPUTE_RATIO) -> set[Split]:
    """Algorithm 1: SplitInfo of ``sg`` for a local buffer of ``lb_bytes``.

    For each output dimension ``d`` (outermost first) the smallest ``v`` whose piece
    ``ceil(peak / v)`` fits LB becomes ``f_d`` (lines 3-6); then every intermediate tensor adds its
    op count to ``n_d`` and, if it has dimension ``d`` (same rank as the output) with an extent
    divisible by ``f_d``, records ``(split_d, n_d, f_d, d)`` (lines 7-11). The output itself is
    recorded too (a single-op SG has no intermediates). Tuples whose split recomputes more than
    ``max_recompute`` times the SG's FLOPs are dropped (section 3.1's cost model,
    :func:`recompute_ratio`).
    """
    members = sorted(sg)
    out = output_op(graph, members)
    shape = graph.ops[out].shape
    peak = peak_bytes(graph, members)
    result: set[Split] = set()
    for d in range(len(shape)):
        n_d, split_d, f_d = 0, 0, None
        for v in candidate_factors(shape[d]):
            if math.ceil(peak / v) <= lb_bytes:
                n_d, split_d, f_d = n_d + graph.ops[out].num_ops, 1, v
                break
        if not split_d:
            continue
        if recompute_ratio(graph, members, d, f_d) > max_recompute:
            continue
        result.add(Split(split_d, n_d, f_d, d))
        for t in members:
            if t == out:
                continue
            n_d += graph.ops[t].num_ops
            t_shape = graph.ops[t].shape
            if len(t_shape) == len(shape) and t_shape[d] % f_d == 0:
                result.add(Split(split_d, n_d, f_d, d))
    return result


def best_split(info: Iterable[Split]) -> Split | None:
    """Eq. (1): the tuple maximising ``(n_d, -f_d, -d)``; None if SplitInfo is empty."""
    info = list(info)
    return max(info, key=Split.key) if info else None


def recompute_ratio(graph: TurboGraph, sg: Iterable[int], dim: int, factor: int) -> float:
    """FLOPs all ``factor`` instances execute over the SG's FLOPs when its output is split along
    ``dim`` (section 3.1's recomputation cost model).

    Walking back from the output (fraction ``1/factor``), a producer needs the whole tensor when a
    consumer contracts ``dim`` (a conv's input channels, a matmul's K) or when the ranks differ, and
    ``window`` extra rows (a conv's halo) when the consumer windows ``dim``; it needs the union of
    what its consumers need.
    """
    members = sorted(sg, reverse=True)
    inside = set(members)
    out = members[0]
    extent = graph.ops[out].shape[dim] if dim < len(graph.ops[out].shape) else 1
    fraction = {out: 1.0 / factor}
    for m in members[1:]:
        need = 0.0
        inner = [c for c in graph.consumers[m] if c in inside]
        if not inner:  # a second output of the SG: split like the first
            need = 1.0 / factor
        for c in inner:
            consumer = graph.ops[c]
            if len(graph.ops[m].shape) != len(consumer.shape) or dim in consumer.contracted:
                need = 1.0
            elif dim in consumer.window:
                need = max(need, min(1.0, fraction[c] + consumer.window[dim] / max(extent, 1)))
            else:
                need = max(need, fraction[c])
        fraction[m] = need
    total = sum(graph.ops[m].flops for m in members) or 1
    executed = sum(graph.ops[m].flops * fraction[m] * factor for m in members)
    return executed / total
