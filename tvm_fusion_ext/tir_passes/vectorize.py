"""Vectorising one loop of a CPU schedule, with a scalar tail when no lane multiple divides it."""

from __future__ import annotations

from tvm import s_tir, tirx

from .analysis import REDUCE, realize_of, try_primitive, uses_any, vector_factor

# Annotation read by TVM's LoopPartition (src/s_tir/transform/loop_partition.cc): the loop is
# partitioned where its body's ``likely`` condition is constant, so the predicate of a split
# with a tail leaves the full vector iterations and guards only the last one.
PARTITION_HINT = "pragma_loop_partition_hint"


def vectorize_loop(sch: s_tir.Schedule, loop, extent: int, lanes: int):
    """Vectorise ``loop`` (``extent`` iterations); returns the vectorised loop or ``None``.

    The width is :func:`.analysis.vector_factor`'s divisor of ``extent`` when there is one.
    Otherwise (a prime extent) a loop of at least two vectors is split into ``ceil(extent / lanes)`` vectors of
    ``lanes`` whose last one is predicated; the outer loop carries :data:`PARTITION_HINT`, so
    lowering peels that last vector off and the others run unpredicated (ViT's 197 tokens: 12
    vectors of 16 and a scalar tail of 5).
    """
    width = vector_factor(extent, lanes)
    if width is not None:
        if width == extent:
            sch.vectorize(loop)
            return loop
        _, lane = sch.split(loop, [extent // width, width])
        sch.vectorize(lane)
        return lane
    if extent < 2 * lanes:
        return None
    vectors, lane = sch.split(loop, [None, lanes])
    sch.annotate(vectors, PARTITION_HINT, 1)
    sch.vectorize(lane)
    return lane



def factor_reduction_lanes(sch: s_tir.Schedule, block, lanes: int) -> str | None:
    """Factor a row reduction into per-lane partial results; returns the partial block's name.

    A block whose innermost loop is its only reduction loop, read contiguously (the reduced
    index is the last one of every operand that uses it: softmax's max and sum, layer norm's
    sums), reduces one scalar per row through a chain of dependent scalar operations. The loop
    is split into vectors (:func:`.analysis.vector_factor`'s width, one or two vectors) and the
    vector part factored out with ``rfactor`` (TVM ``src/s_tir/schedule/primitive/reduction.cc``):
    the partial block keeps one result per lane and a short write-back block (the original name)
    combines the lanes. ``rfactor`` needs the block in a loop nest of its own, so this runs
    before blocks are moved; :func:`vectorize_partial` vectorises the partial block afterwards.

    Only extents with a lane-multiple divisor are factored: a predicated tail would be needed
    otherwise, and ``compute_at`` regenerates the partial block's loops without the predicate.
    Reductions TVM has no reducer for, or that read along another axis, are left as they are.
    """
    loops = sch.get_loops(block)
    if not loops:
        return None
    loop = sch.get(loops[-1])
    if not isinstance(loop.extent, tirx.IntImm) or loop.kind != tirx.ForKind.SERIAL:
        return None
    extent = int(loop.extent)
    realize = realize_of(sch, sch.get(block).name_hint)
    reduced = [(iv.var, value) for iv, value in zip(realize.block.iter_vars, realize.iter_values)
               if iv.iter_type == REDUCE]
    if len(reduced) != 1 or not reduced[0][1].same_as(loop.loop_var) or extent < 2 * lanes:
        return None
    for read in realize.block.reads:
        if any(uses_any(dim.min, [reduced[0][0]]) for dim in read.region[:-1]):
            return None
    width = vector_factor(extent, lanes)
    if width is None or width % lanes:
        return None
    factors = [extent // width, width]
    trial = sch.copy()  # rfactor refuses reducers it does not know: try it on a copy first
    _, lane = trial.split(trial.get_loops(trial.get_sblock(sch.get(block).name_hint))[-1], factors)
    if not try_primitive(trial.rfactor, lane, factor_axis=0):
        return None
    _, lane = sch.split(loops[-1], factors)
    return sch.get(sch.rfactor(lane, factor_axis=0)).name_hint

def vectorize_partial(sch: s_tir.Schedule, name: str) -> bool:
    """Vectorise the lane loop of a partial block made by :func:`factor_reduction_lanes`
    (its first block variable), moving it inside the reduction loop, and hoist its init."""
    block = sch.get_sblock(name)
    realize = realize_of(sch, name)
    loops = sch.get_loops(block)
    lane_var = realize.iter_values[0]
    reduce_value = next(value for iv, value in zip(realize.block.iter_vars, realize.iter_values)
                        if iv.iter_type == REDUCE)
    lane = next((rv for rv in loops if sch.get(rv).loop_var.same_as(lane_var)), None)
    reduce = next((rv for rv in loops if sch.get(rv).loop_var.same_as(reduce_value)), None)
    if lane is None or reduce is None:
        return False
    if not try_primitive(sch.reorder, reduce, lane):
        return False
    if not try_primitive(sch.vectorize, lane):
        return False
    init = sch.decompose_reduction(block, reduce)
    try_primitive(sch.vectorize, sch.get_loops(init)[-1])
    return True
