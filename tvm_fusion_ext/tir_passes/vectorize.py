"""Vectorising one loop of a CPU schedule, with a scalar tail when no lane multiple divides it."""

from __future__ import annotations

import math

import tvm_ffi
from tvm import s_tir, tirx
from tvm.s_tir.stmt import SBlock

from .analysis import REDUCE, BlockInfo, indexes_trailing, realize_of, try_primitive, uses_any, vector_factor

# Annotation marking the loop of whole vectors of a split with a predicated tail: once a rule's
# schedule is complete, :func:`peel_vector_tails` partitions it into the unpredicated vectors and
# the last, predicated one. TVM's own LoopPartition (src/s_tir/transform/loop_partition.cc) would
# need both this hint and ``likely`` predicates under the ``partition_const_loop`` option, which
# the schedule cannot set; without the partition, VectorizeLoop scalarises the whole predicated loop.
PARTITION_HINT = "pragma_loop_partition_hint"


def vectorize_loop(sch: s_tir.Schedule, loop, extent: int, lanes: int):
    """Vectorise ``loop`` (``extent`` iterations); returns the vectorised loop or ``None``.

    The width is :func:`.analysis.vector_factor`'s divisor of ``extent`` when there is one.
    Otherwise (a prime extent) a loop of at least two vectors is split into ``ceil(extent / lanes)`` vectors of
    ``lanes`` whose last one is predicated; the outer loop carries :data:`PARTITION_HINT`, so
    :func:`peel_vector_tails` peels that last vector off and the others run unpredicated (ViT's
    197 tokens: 24 vectors of 8 and a scalar tail of 5).

    A loop that holds another block besides the one it is vectorised for (a concat's copy into a
    local element, computed at the consumer's innermost loop) is left serial: TVM's
    ``VectorizeLoop`` widens neither that block's compacted buffer nor its loops, and the lanes
    overwrite each other's element.
    """
    if len(sch.get_child_blocks(loop)) > 1:
        return None
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


def peel_vector_tails(sch: s_tir.Schedule) -> int:
    """Partition every loop carrying :data:`PARTITION_HINT` into its whole vectors and its last,
    predicated one (``sch.loop_partition``, ``src/s_tir/schedule/primitive/loop_partition.cc``);
    returns how many were peeled. Lowering then proves the predicate of the whole vectors true and
    drops it, so ``VectorizeLoop`` vectorises them, and only the last vector runs lane by lane.
    ``loop_partition`` renames the blocks it copies, so this runs once a schedule is complete. A
    loop the primitive refuses keeps its predicated form (correct, unvectorised)."""
    peeled = 0
    for loop in _hinted_loops(sch):
        extent = sch.get(loop).extent
        if not isinstance(extent, tirx.IntImm) or int(extent) < 2:
            continue
        sch.unannotate(loop, PARTITION_HINT)  # loop_partition refuses annotated loops
        if try_primitive(sch.loop_partition, loop, [int(extent) - 1, None]):
            peeled += 1
        else:
            sch.annotate(loop, PARTITION_HINT, 1)
    return peeled


def _hinted_loops(sch: s_tir.Schedule) -> list:
    """LoopRVs of the loops carrying :data:`PARTITION_HINT`, outermost first, each once."""
    found, seen = [], set()
    for block in _leaf_block_names(sch.mod["main"]):
        for loop in sch.get_loops(sch.get_sblock(block)):
            stmt = sch.get(loop)
            if PARTITION_HINT in stmt.annotations and stmt not in seen:
                seen.add(stmt)
                found.append(loop)
    return found


def _leaf_block_names(func: tirx.PrimFunc) -> list[str]:
    names = []
    tvm_ffi.structural_walk(func.body, [(SBlock, lambda block: names.append(block.name_hint))], order="pre")
    return [name for name in names if name != "root"]


def factor_reduction_lanes(sch: s_tir.Schedule, block, lanes: int) -> str | None:
    """Factor a row reduction into per-lane partial results; returns the partial block's name.

    A block whose innermost loops are its reduction loops, read contiguously (the reduced
    indices are the last ones of every operand that uses them: softmax's max and sum, layer
    norm's sums, a global pool), reduces one scalar per row through a chain of dependent scalar
    operations. The reduced loops are fused and split into vectors (:func:`.analysis.vector_factor`'s
    width, one or two vectors) and the vector part factored out with ``rfactor`` (TVM
    ``src/s_tir/schedule/primitive/reduction.cc``): the partial block keeps one result per lane
    and a short write-back block (the original name) combines the lanes. ``rfactor`` needs the
    block in a loop nest of its own, so this runs before blocks are moved;
    :func:`vectorize_partial` vectorises the partial block afterwards.

    Only extents with a lane-multiple divisor are factored here: a predicated tail would be
    needed otherwise, and ``compute_at`` regenerates the partial block's loops without the
    predicate (:func:`vectorize_row_reduction` factors a block that stays where it is with a
    tail). Reductions TVM has no reducer for, or that read along another axis, are left alone.
    """
    factors = _lane_factors(sch, block, lanes, tail=False)
    name = sch.get(block).name_hint
    if factors is None or not try_primitive(_rfactor_lanes, sch.copy(), name, factors):
        return None  # rfactor refuses reducers it does not know: tried on a copy first
    return sch.get(_rfactor_lanes(sch, name, factors)).name_hint


def vectorize_row_reduction(sch: s_tir.Schedule, block, lanes: int) -> bool:
    """:func:`factor_reduction_lanes` and :func:`vectorize_partial` for a reduction that keeps
    its loops (the anchor of its function): the reduced extent needs no lane-multiple divisor,
    as the last vector is predicated and peeled off by :func:`peel_vector_tails`.
    Returns whether it applied; on failure the schedule is unchanged."""
    factors = _lane_factors(sch, block, lanes, tail=True)
    name = sch.get(block).name_hint
    if factors is None or not try_primitive(_vectorize_factored, sch.copy(), name, factors):
        return False
    _vectorize_factored(sch, name, factors)
    return True


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
    if lane is None or reduce is None or not try_primitive(sch.reorder, reduce, lane):
        return False
    return try_primitive(_vectorize_lanes, sch, block, reduce, lane)


def reduces_along_rows(info: BlockInfo, lanes: int) -> bool:
    """Whether reduction block ``info`` reduces along its operands' contiguous axis, at least two
    vectors long (softmax's sum, a mean over the last axis: APOLLO's y-reduce, section 4.1):
    vectorised along its output instead, every lane would load from another row, a gather of
    stride one row; :func:`vectorize_row_reduction` vectorises it along the rows."""
    if not info.is_reduction:
        return False
    positions = info.reduce_positions
    reduce_vars = [info.loop_iters[p].var for p in positions]
    extents = [info.extents[p] for p in positions]
    reads = [r for r in info.operand_reads if any(uses_any(rg.min, reduce_vars) for rg in r.region)]
    return bool(reads) and math.prod(extents) >= 2 * lanes and indexes_trailing(reads, reduce_vars, extents)


def _lane_factors(sch: s_tir.Schedule, block, lanes: int, tail: bool) -> list | None:
    """``[vectors, width]`` splitting the block's fused reduced loops into whole vectors (one or
    two, :func:`.analysis.vector_factor`), else ``[None, lanes]`` with a predicated tail when
    ``tail``; ``None`` when the block is no contiguous row reduction of at least two vectors."""
    loops = _contiguous_reduce_loops(sch, block)
    if not loops:
        return None
    extent = math.prod(int(sch.get(rv).extent) for rv in loops)
    if extent < 2 * lanes:
        return None
    width = vector_factor(extent, lanes)
    if width is not None and width % lanes == 0:
        return [extent // width, width]
    return [None, lanes] if tail else None


def _rfactor_lanes(sch: s_tir.Schedule, name: str, factors: list):
    """Fuse block ``name``'s reduced loops, split them by ``factors`` and rfactor the lane loop;
    returns the partial block."""
    loops = _contiguous_reduce_loops(sch, sch.get_sblock(name))
    outer, lane = sch.split(sch.fuse(*loops) if len(loops) > 1 else loops[0], factors)
    if factors[0] is None:
        sch.annotate(outer, PARTITION_HINT, 1)
    # the lanes last: a row's partial results are contiguous even where the rows are not compacted
    return sch.rfactor(lane, factor_axis=len(sch.get(sch.get_sblock(name)).writes[0].source.shape))


def _vectorize_factored(sch: s_tir.Schedule, name: str, factors: list) -> None:
    partial = _rfactor_lanes(sch, name, factors)
    *_, reduce, lane = sch.get_loops(partial)
    _vectorize_lanes(sch, partial, reduce, lane)


def _vectorize_lanes(sch: s_tir.Schedule, partial, reduce, lane) -> None:
    """Vectorise a partial block along ``lane`` and hoist its init out of ``reduce``."""
    sch.vectorize(lane)
    init = sch.decompose_reduction(partial, reduce)
    try_primitive(sch.vectorize, sch.get_loops(init)[-1])


def _contiguous_reduce_loops(sch: s_tir.Schedule, block) -> list | None:
    """The block's innermost loops when they are exactly its reduction loops, each bound to one
    reduction variable, and every operand reading them indexes them, in order, in its last
    dimensions with the loops' full extents (so the fused loop walks memory contiguously)."""
    loops = sch.get_loops(block)
    realize = realize_of(sch, sch.get(block).name_hint)
    reduce_vars = [iv.var for iv in realize.block.iter_vars if iv.iter_type == REDUCE]
    bound = [value for iv, value in zip(realize.block.iter_vars, realize.iter_values)
             if iv.iter_type == REDUCE]
    count = len(reduce_vars)
    if not count or len(loops) < count:
        return None
    inner = loops[-count:]
    for rv, value in zip(inner, bound):
        loop = sch.get(rv)
        if (not loop.loop_var.same_as(value) or not isinstance(loop.extent, tirx.IntImm)
                or loop.kind != tirx.ForKind.SERIAL):
            return None
    extents = [int(sch.get(rv).extent) for rv in inner]
    return inner if indexes_trailing(realize.block.reads, reduce_vars, extents) else None


def vectorize_column_reduction(sch: s_tir.Schedule, block, lanes: int) -> bool:
    """Vectorise a reduction over the *outer* axes of its input along its innermost spatial axis.

    A global pool of a channels-last map (``sum over h, w of x[0, h, w, c]``) has its reduced
    loops innermost, walking the input with a stride of a whole row of channels, while the
    channel axis is contiguous in the input and the output. The channel loop is moved inside the
    reduction loops (``reorder``) and vectorised, the initialisation staying in the block (it runs
    at the first reduction step): each step adds a vector of channels to a vector of partial
    sums, with no cross-lane combination. Applies when the loop just outside
    the block's innermost reduction loops is bound to one spatial variable that every access
    using it indexes whole in its last dimension, and no read has a reduced variable there.
    Returns whether it applied; otherwise the schedule is unchanged."""
    realize = realize_of(sch, sch.get(block).name_hint)
    iter_vars = list(zip(realize.block.iter_vars, realize.iter_values))
    loops = sch.get_loops(block)
    bound = [[iv for iv, value in iter_vars if uses_any(value, [sch.get(loop).loop_var])] for loop in loops]
    reduced = 0
    while reduced < len(loops) and bound[-1 - reduced] and all(iv.iter_type == REDUCE for iv in bound[-1 - reduced]):
        reduced += 1
    position = len(loops) - 1 - reduced
    if reduced == 0 or position < 0 or len(bound[position]) != 1 or bound[position][0].iter_type == REDUCE:
        return False
    extent = sch.get(loops[position]).extent
    if not isinstance(extent, tirx.IntImm) or vector_factor(int(extent), lanes) is None:
        return False
    reduced_vars = [iv.var for iv in realize.block.iter_vars if iv.iter_type == REDUCE]
    if not indexes_trailing([*realize.block.reads, *realize.block.writes], [bound[position][0].var], [int(extent)]) \
            or any(region.region and uses_any(region.region[-1].min, reduced_vars) for region in realize.block.reads):
        return False
    if not try_primitive(_vectorize_column, sch.copy(), loops, position, lanes):
        return False
    _vectorize_column(sch, loops, position, lanes)
    return True


def _vectorize_column(sch: s_tir.Schedule, loops: list, position: int, lanes: int) -> None:
    column = loops[position]
    sch.reorder(*loops[position + 1:], column)
    vectorize_loop(sch, column, int(sch.get(column).extent), lanes)
