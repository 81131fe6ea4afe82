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
    op count to ``n_d`` and, if the split reaches one of its dimensions (``match_dim``: the one
    :func:`propagate` finds) with an extent divisible by ``f_d``, records ``(split_d, n_d, f_d, d)``
    (lines 7-11). The output itself is recorded too (a single-op SG has no intermediates). Tuples
    whose split recomputes more than ``max_recompute`` times the SG's FLOPs are dropped (section
    3.1's cost model, :func:`recompute_ratio`).
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
        state = propagate(graph, members, d, f_d)
        for t in members:
            if t == out:
                continue
            n_d += graph.ops[t].num_ops
            t_dim = state[t][1]
            if t_dim is not None and graph.ops[t].shape[t_dim] % f_d == 0:
                result.add(Split(split_d, n_d, f_d, d))
    return result


def best_split(info: Iterable[Split]) -> Split | None:
    """Eq. (1): the tuple maximising ``(n_d, -f_d, -d)``; None if SplitInfo is empty."""
    info = list(info)
    return max(info, key=Split.key) if info else None


def propagate(graph: TurboGraph, sg: Iterable[int], dim: int, factor: int
              ) -> dict[int, tuple[float, int | None]]:
    """For the SG's output split along ``dim`` into ``factor`` instances: per member, the fraction
    of its output one instance needs and the dimension it is split along (None: needed whole).

    Walking back from the output (fraction ``1/factor``), a consumer's split reaches a producer
    along the dimension its TIR maps it to (``TurboOp.split_maps``; hand-built ops: the same
    dimension of a same-rank input it does not contract), widened by the halo of a window; a
    producer whose consumers need it whole, or split along different dimensions, is needed whole.
    """
    members = sorted(sg, reverse=True)
    inside = set(members)
    out = members[0]
    state: dict[int, tuple[float, int | None]] = {out: (1.0 / factor, dim)}
    for m in members[1:]:
        inner = [c for c in graph.consumers[m] if c in inside]
        shape = graph.ops[m].shape
        if not inner:  # a second output of the SG: split like the first
            same = len(shape) == len(graph.ops[out].shape)
            state[m] = (1.0 / factor, dim) if same else (1.0, None)
            continue
        need, m_dim = 0.0, -1
        for c in inner:
            c_frac, c_dim = state[c]
            mapped = None if c_dim is None else _split_map(graph, c, m, c_dim)
            if mapped is None or m_dim not in (-1, mapped[0]):
                need, m_dim = 1.0, None
                break
            m_dim, halo = mapped
            extent = max(shape[m_dim], 1)
            need = max(need, min(1.0, c_frac + halo / extent))
        state[m] = (need, m_dim)
    return state


def _split_map(graph: TurboGraph, consumer: int, producer: int, dim: int) -> tuple[int, int] | None:
    op = graph.ops[consumer]
    if op.split_maps is not None:
        return op.split_maps.get(producer, {}).get(dim)
    same_rank = len(graph.ops[producer].shape) == len(op.shape)
    if not same_rank or dim in op.contracted:
        return None
    return dim, op.window.get(dim, 0)


def recompute_ratio(graph: TurboGraph, sg: Iterable[int], dim: int, factor: int) -> float:
    """FLOPs all ``factor`` instances execute over the SG's FLOPs when its output is split along
    ``dim`` (section 3.1's recomputation cost model): each member runs :func:`propagate`'s
    fraction of its work in every instance."""
    members = list(sg)
    state = propagate(graph, members, dim, factor)
    total = sum(graph.ops[m].flops for m in members) or 1
    executed = sum(graph.ops[m].flops * state[m][0] * factor for m in members)
    return executed / total
