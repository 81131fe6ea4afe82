"""Anchor-based loop fusion for fused PrimFuncs (GraphTurbo section 4.1, APOLLO section 4.2).

``FuseTIR`` only concatenates the blocks of a fusion group: every intermediate stays a full-size
buffer written by one loop nest and read by the next. Following GraphTurbo section 4.1 ("Loop
Fusion within Layers", Fig. 11), :class:`AnchorLoopFusion`

1. picks the anchor block: the conv / matmul if there is one, else the last block; a pooling
   that is the last block first accumulates into a local buffer (``cache_write``), so that the
   copy writing the output is the anchor and the pooling runs a row at a time under it with its
   padded input, as under an element-wise epilogue (:attr:`.analysis.BlockInfo.is_windowed`);
2. inlines injective producers (single-consumer or pure data movement) and the element-wise /
   broadcast chain after the anchor (``compute_inline``), so few blocks remain; a contraction
   that will be padded to whole vectors keeps a producer it reads through anything but plain
   iterators (a slice, a reshape, a channel shuffle) as a block, so that it stays an einsum
   (:func:`inline_injective`);
3. tiles the anchor's outer spatial loops with the largest divisors whose tile working set fits
   the spec's fast memory (:func:`.analysis.choose_tile`). A contraction instead gets a register
   tile (:mod:`.register_tile`): a micro-kernel of vector accumulators kept in registers over a
   reduction block that fits L1, inside spatial tiles that fit the fast memory with the least
   operand traffic; operands walked along the vector loop in the wrong layout are packed per tile.
   A contraction whose full-width micro-kernels starve (no axis of whole vectors, one row) takes
   narrower vectors that divide an axis (a 1x1 conv to 24 channels: 3 vectors of 8 lanes on
   AVX-512) before padding an axis to whole vectors (ViT's 197 tokens);
4. ``compute_at``s the remaining producers (padding, reductions) into the tile loop (a blocked
   contraction: its reduction-block loop) and ``reverse_compute_at``s the consumers into the
   innermost spatial tile loop (a contraction: the loop over its micro-kernels when the whole
   reduction runs inside one, so that the epilogue is applied in the micro-kernel's write-back
   to accumulators still in registers; else the tile loop, after the whole reduction) where
   the moved consumer still runs each of its iterations once (a concat with another operand, a
   reshape whose index fuses a tiled axis with others stay loop nests of their own), then
   gives every intermediate that now lives inside one tile the ``local`` scope, so lowering
   (``CompactBufferAllocation``) shrinks it to the tile;
5. parallelises the fused outermost tile loop across cores (and the leading spatial loops of a
   block left with a loop nest of its own) and vectorises innermost loops.

When the anchor is element-wise and reads reduction results (softmax, layer norm, the
reduction -> element-wise stitching of APOLLO section 4.2), only the *row* loops (the anchor loops
that index every reduction-derived input) are tiled, and producers go to the innermost row loop:
each row becomes one loop nest whose per-row intermediates are local scalars or row vectors. Its
row reductions are first factored into per-lane partial results (``rfactor``), so the reduced axis
is vectorised like the element-wise work around it (:func:`.vectorize.factor_reduction_lanes`).

The rule declines (returns ``None``) on functions outside that shape, and on functions whose
blocks declare other regions than they access (:func:`.analysis.regions_exact`: TE's concat), since
moving blocks trusts those declarations; see ``default_schedule``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Collection

import tvm
import tvm_ffi
from tvm import s_tir, sym, tirx

from ..hardware import HardwareSpec
from .analysis import (
    REDUCE,
    BlockInfo,
    analyze_blocks,
    choose_tile,
    indexes_trailing,
    pick_anchor,
    realize_of,
    regions_exact,
    try_primitive,
    uses_any,
    vector_factor,
)
from .plain_schedule import CHUNKS_PER_CORE
from .register_tile import RegisterTile, plan_register_tile
from .rule_base import SpecScheduleRule
from .vectorize import (
    factor_reduction_lanes,
    reduces_along_rows,
    vectorize_column_reduction,
    vectorize_loop,
    vectorize_partial,
    vectorize_row_reduction,
)

# Block annotation that relax.transform.SplitLayoutRewritePreproc looks for
# (src/relax/transform/split_layout_rewrite_preproc.cc), as MetaSchedule's RewriteLayout sets it.
LAYOUT_REWRITE_PREPROC = "meta_schedule.layout_rewrite_preproc"
# Inner reduction loops (after the block's first) are unrolled when their extents multiply to at
# most this: the 3 x 3 window of a conv, so that the long channel loop carries the accumulators.
MAX_UNROLLED_WINDOW = 16
# The narrowest vectors a register tile falls back to (SSE's 4 float32 lanes).
_MIN_LANES = 4
# A contraction is padded to vector-lane multiples only while that adds at most this fraction of
# work (ViT's 197 x 197 scores padded to 208 x 208 add 11%).
_MAX_PADDING_WASTE = 0.25
# Intrinsics that cost tens of instructions per element once lowered (``tir_passes.vector_exp`` and
# its siblings expand them into polynomials).
_MATH_OPS = frozenset(f"tirx.{name}" for name in ("exp", "exp2", "exp10", "log", "log2", "log10", "tanh",
                                                   "sigmoid", "erf", "sqrt", "rsqrt", "pow", "sin", "cos"))


class AnchorLoopFusion(SpecScheduleRule):
    """GraphTurbo section 4.1 loop fusion around an anchor block (see the module docstring)."""

    def schedule(self, sch: s_tir.Schedule, analyzed: list, spec: HardwareSpec):
        if not regions_exact(sch):
            return self.decline("a block declares other regions than it accesses (TE's concat): "
                                "moving it would trust the declaration")
        infos = [info for _, info in analyzed]
        anchor = infos[pick_anchor(infos)]
        if anchor is infos[-1] and anchor.is_windowed:
            # A pooling that writes the kernel's output accumulates in a local buffer, written
            # back by a copy that becomes the anchor: the pooling then runs a row at a time under
            # it with its padded input, as under an element-wise epilogue, and the vectorised
            # write-back replaces vector loads along the strided window.
            sch.cache_write(sch.get_sblock(anchor.name), 0, "local")
            analyzed = analyze_blocks(sch)
            if not analyzed:
                return self.decline("after caching the pooling's output, a block is left that the "
                                    "rule cannot analyse")
            infos = [info for _, info in analyzed]
            anchor = infos[-1]
        anchor_name = anchor.name
        weights = layout_free_buffers(sch.mod["main"])
        lanes = spec.vector_lanes(str(anchor.block.writes[0].source.dtype))
        inline_injective(sch, infos, anchor_name, einsum_anchor=functools.cache(
            lambda: anchor.is_contraction and _lane_padding(anchor, lanes, weights) is not None
            and _starved(_unpadded_register_tile(anchor, spec, lanes, weights), spec)))

        analyzed = analyze_blocks(sch)
        if not analyzed:
            return self.decline("after inlining, a block is left that the rule cannot analyse")
        infos = [info for _, info in analyzed]
        names = [info.name for info in infos]
        anchor = infos[names.index(anchor_name)]
        producers, consumers = names[: names.index(anchor_name)], names[names.index(anchor_name) + 1:]
        register_tile = _unpadded_register_tile(anchor, spec, lanes, weights) if anchor.is_contraction else None
        if (anchor.is_contraction and _starved(register_tile, spec)
                and _pad_spatial_to_lanes(sch, anchor, lanes)):
            infos, anchor_name = _analyze_padded(sch, anchor_name)
            names = [info.name for info in infos]
            anchor = infos[names.index(anchor_name)]
            producers = names[: names.index(anchor_name)]
            consumers = names[names.index(anchor_name) + 1:]
            register_tile = plan_register_tile(anchor, spec, prepacked=weights)
        if register_tile is None and anchor.is_contraction:
            register_tile = narrower_register_tile(anchor, spec, lanes, weights)
        write_back_points = {}  # micro-kernel loop -> the most iterations a consumer may run under it
        if register_tile is not None:
            loops = tile_contraction(sch, anchor, register_tile, lanes)
            tile_loop, consumer_attach = loops.tile, [loops.tile]
            if not loops.reduce_outer and loops.intra:
                # The whole reduction runs inside one micro-kernel: the epilogue goes into its
                # write-back, applied to the accumulators while they are still in registers
                # (an epilogue broadcasting each accumulator, SE's scale of a feature map, would
                # be unrolled over the whole map: it stays at the tile loop).
                consumer_attach.insert(0, loops.intra[-1])
                write_back_points[loops.intra[-1]] = math.prod(register_tile.micro.values())
            producer_attach = loops.reduce_outer[0] if loops.reduce_outer else loops.tile
            consumers += loops.added_consumers
        else:
            plan = _plan_tiles(anchor, infos[: names.index(anchor_name)], spec, lanes)
            if plan is None:
                return self.decline(f"the anchor {anchor_name} has no loop to tile (no rows shared "
                                    "with the reductions it reads)")
            tile_loop, row_loop = _tile_anchor(sch, anchor, plan)
            producer_attach, consumer_attach = row_loop if not anchor.is_reduction else tile_loop, [row_loop]

        partials = _factor_row_reductions(sch, anchor, infos[: names.index(anchor_name)], lanes)
        producers = [block for name in producers for block in (partials.get(name), name) if block]
        for name in reversed(producers):
            rv = sch.get_sblock(name)
            if not try_primitive(sch.compute_at, rv, producer_attach, preserve_unit_loops=True):
                try_primitive(sch.compute_at, rv, tile_loop, preserve_unit_loops=True)
        reductions = {info.name for info in infos if info.is_reduction}
        write_back = {}  # consumer -> the micro-kernel loop it was moved under
        for name in consumers:
            # A reduction after the anchor would reduce only the tile's part of its axis (TVM
            # allows the move); it stays a loop nest of its own, and so do the blocks reading it.
            if name not in reductions:
                attached = next((loop for loop in consumer_attach if reverse_compute_at_covering(
                    sch, name, loop, write_back_points.get(loop))), None)
                if attached is not None and attached is not tile_loop:
                    write_back[name] = attached

        if spec.num_cores > 1 and _extent(sch, tile_loop) > 1:
            sch.parallel(tile_loop)
        for name in producers + consumers:
            if spec.num_cores > 1 and not _inside(sch, sch.get_sblock(name), tile_loop):
                _parallelize_own_nest(sch, name, spec.num_cores)
            if name in partials.values():
                vectorize_partial(sch, name)
            else:
                vectorize_innermost(sch, sch.get_sblock(name), lanes)
            if name in write_back:
                _unroll_below(sch, name, write_back[name])
        localize_intermediates(sch, tile_loop)
        self.notes = [f"{info.name}: a contraction besides the anchor {anchor_name}, kept as a plain loop nest "
                      "(one register tile per kernel)" for info in infos if info.is_contraction
                      and info.name != anchor_name]
        if register_tile is not None:
            finish_contraction(sch, anchor_name, loops, lanes)
        else:
            _finish_anchor(sch, anchor_name, plan, lanes)
        return sch


def _factor_row_reductions(sch: s_tir.Schedule, anchor: BlockInfo, producers: list[BlockInfo],
                           lanes: int) -> dict[str, str]:
    """Vector partial results for the row reductions an element-wise anchor is stitched to
    (:func:`.vectorize.factor_reduction_lanes`), made while they still have loop nests of their
    own; returns ``{reduction: its partial block}``."""
    if anchor.is_contraction or anchor.is_reduction:
        return {}
    partials = {}
    for info in producers:
        if info.is_reduction:
            partial = factor_reduction_lanes(sch, sch.get_sblock(info.name), lanes)
            if partial is not None:
                partials[info.name] = partial
    return partials


def narrower_register_tile(anchor: BlockInfo, spec: HardwareSpec, lanes: int,
                           prepacked: Collection = ()) -> RegisterTile | None:
    """A register tile on half-width (or narrower, down to :data:`_MIN_LANES`) vectors, for a
    contraction no full vector divides and padding cannot reshape (a depthwise conv over 56
    columns on AVX-512: 7 vectors of 8 lanes instead of an unrolled-nothing 28-wide loop)."""
    narrower = lanes // 2
    while narrower >= _MIN_LANES:
        register_tile = plan_register_tile(anchor, spec, narrower, prepacked)
        if register_tile is not None:
            return register_tile
        narrower //= 2
    return None


def _unpadded_register_tile(anchor: BlockInfo, spec: HardwareSpec, lanes: int,
                            prepacked: Collection = ()) -> RegisterTile | None:
    """The full-width register tile of a contraction, or, where that one starves, a register tile
    on narrower vectors that divide an axis when it does not starve: what the contraction gets
    before :func:`_pad_spatial_to_lanes` pads an axis to whole vectors."""
    full = plan_register_tile(anchor, spec, prepacked=prepacked)
    if not _starved(full, spec):
        return full
    narrower = narrower_register_tile(anchor, spec, lanes, prepacked)
    return full if _starved(narrower, spec) else narrower


def _starved(register_tile: RegisterTile | None, spec: HardwareSpec) -> bool:
    """Whether a contraction has no register tile, or a micro-kernel of one row (each streamed
    vector used by one FMA, and the streamed panel read again for every output row), or fewer
    independent accumulators than the FMA units need to hide their latency (``fma_units *
    fma_latency``): what a prime extent such as ViT's 197 tokens leaves."""
    if register_tile is None or register_tile.rows == 1:
        return True
    return register_tile.rows * register_tile.vectors < spec.fma_units * spec.fma_latency


def _pad_spatial_to_lanes(sch: s_tir.Schedule, anchor: BlockInfo, lanes: int) -> bool:
    """Pad a contraction whose extents are no multiple of the vector lanes (ViT's 197 tokens) to
    the next multiple (``sch.pad_einsum``: the operands are copied into zero-padded buffers, and
    the result copied back), so that it gets a register tile with several rows and reduction
    blocks that fit the panel budget; zeros add nothing to a sum of products. The loops padded
    are :func:`_lane_padding`'s; returns whether it padded."""
    padding = _lane_padding(anchor, lanes, layout_free_buffers(sch.mod["main"]))
    return padding is not None and try_primitive(sch.pad_einsum, sch.get_sblock(anchor.name), padding)


def _lane_padding(anchor: BlockInfo, lanes: int, weights: Collection) -> list[int] | None:
    """Per anchor loop, the multiple :func:`_pad_spatial_to_lanes` pads it to (1: unpadded), or
    ``None`` when no loop is worth padding.

    Only loops of at least ``lanes`` iterations are padded, those that waste least first, while
    the padded iteration space does at most :data:`_MAX_PADDING_WASTE` more work (a 1x1 conv to 24
    channels at 56 x 56 pads the image columns to 64, not the channels), and never a loop that
    indexes a weight (a padded weight would be copied on every call: MobileNetV2's classifier,
    1280 x 1000, keeps its 1000 columns).
    """
    weight_vars = [anchor.loop_iters[pos].var for pos in range(len(anchor.extents))
                   if any(read.source.same_as(w) and any(uses_any(rg.min, [anchor.loop_iters[pos].var])
                                                         for rg in read.region)
                          for read in anchor.block.reads for w in weights)]
    candidates = sorted((-(-extent // lanes) * lanes / extent, -pos)   # inner loops first on ties
                        for pos, extent in enumerate(anchor.extents)
                        if extent >= lanes and extent % lanes
                        and not any(anchor.loop_iters[pos].var.same_as(v) for v in weight_vars))
    padding, growth = [1] * len(anchor.extents), 1.0
    for ratio, minus_pos in candidates:
        pos = -minus_pos
        if growth * ratio <= 1 + _MAX_PADDING_WASTE:
            padding[pos], growth = lanes, growth * ratio
    return None if all(m == 1 for m in padding) else padding


def _analyze_padded(sch: s_tir.Schedule, anchor_name: str) -> tuple[list[BlockInfo], str]:
    """Blocks after :func:`_pad_spatial_to_lanes`, with the copy of the padded result back into the
    original buffer inlined into its reader when it has one (the reader then reads the padded
    buffer, and the copy disappears)."""
    analyzed = analyze_blocks(sch)
    infos = [info for _, info in analyzed]
    anchor = next(info for info in infos if info.name == anchor_name)
    padded_result = anchor.block.writes[0].source
    for info in infos:
        reads_result = any(read.source.same_as(padded_result) for read in info.block.reads)
        if reads_result and info.is_copy and sch.get_consumers(sch.get_sblock(info.name)):
            try_primitive(sch.compute_inline, sch.get_sblock(info.name))
    return [info for _, info in analyze_blocks(sch)], anchor_name


class _Plan:
    """Loop positions of an anchor without a register tile, and their tile sizes."""

    def __init__(self, tiled, tile, vector, vector_width):
        self.tiled, self.tile = tiled, tile
        self.vector, self.vector_width = vector, vector_width
        self.first_reduce_loop = None  # set by _tile_anchor
        self.vector_loop = None


class ContractionLoops:
    """Loop handles of a register-tiled contraction (see :func:`split_contraction`)."""

    def __init__(self, tile, intra, reduce_outer, reduce_inner, rows, vectors, lanes, added_consumers,
                 block=None):
        self.tile, self.reduce_outer, self.reduce_inner = tile, reduce_outer, reduce_inner
        self.intra = intra  # the loops over the micro-kernels of one tile
        self.rows, self.vectors, self.lanes = rows, vectors, lanes
        self.added_consumers = added_consumers
        self.block = block  # the tile loop kept apart by split_contraction's ``block``


def inline_injective(sch: s_tir.Schedule, infos: list[BlockInfo], anchor_name: str,
                     keep: tuple[str, ...] = (), einsum_anchor: Callable[[], bool] | None = None) -> None:
    """Inline the element-wise chain after the anchor and cheap injective producers before it
    (not the blocks named in ``keep``).

    When ``einsum_anchor()`` holds (asked only once a producer would need it: the anchor is a
    contraction to be padded to whole vectors, whose ``pad_einsum`` needs every operand indexed
    by plain iterators), a producer the anchor reads is inlined into it only when it loads with
    plain indices (a copy or transpose): a slice, a reshape or a channel shuffle stays a block of
    its own, which the other producers are inlined into and the anchor reads as a plain
    operand."""
    intermediates = intermediate_buffers(sch)
    names = [info.name for info in infos]
    anchor_at = names.index(anchor_name)
    for info in reversed(infos):
        if info.name == anchor_name or info.is_reduction or info.name in keep:
            continue
        if not any(info.block.writes[0].source.same_as(b) for b in intermediates):
            continue
        rv = sch.get_sblock(info.name)
        before_anchor = names.index(info.name) < anchor_at
        if before_anchor and (info.is_padding or (len(sch.get_consumers(rv)) != 1 and not info.is_copy)):
            continue
        if (before_anchor and einsum_anchor is not None and not info.is_plain_copy
                and any(sch.get(c).name_hint == anchor_name for c in sch.get_consumers(rv))
                and einsum_anchor()):
            continue
        if not before_anchor and _recomputed_per_broadcast(sch, rv):
            continue
        try_primitive(sch.compute_inline, rv)


def _recomputed_per_broadcast(sch: s_tir.Schedule, rv) -> bool:
    """Whether inlining block ``rv`` would evaluate a transcendental function or a division once
    per element of a consumer that reads each of its results many times: squeeze-excite's
    ``sigmoid`` of ``C`` channel weights, read by the scale of a ``H x W x C`` feature map, would run
    ``H x W`` times per channel (EfficientNet-B0's 56 x 56 x 144 scale: 3136 sigmoids per
    channel). Such a block stays, and is computed once per result in the anchor's write-back."""
    block = sch.get(rv)
    if not _has_costly_op(block.body):
        return False
    points = math.prod(int(iv.dom.extent) for iv in block.iter_vars)
    return any(math.prod(int(iv.dom.extent) for iv in sch.get(c).iter_vars) >= 2 * points
               for c in sch.get_consumers(rv))


def _has_costly_op(stmt) -> bool:
    """Whether ``stmt`` calls a math function (``exp``, ``tanh``, ``sigmoid``, ...) or divides floats."""
    calls, divisions = [], []
    tvm_ffi.structural_walk(stmt, [(tvm.ir.Call, calls.append), (tirx.Div, divisions.append)])
    return (any(isinstance(c.op, tvm.ir.Op) and c.op.name in _MATH_OPS for c in calls)
            or any(str(d.ty).startswith("float") for d in divisions))


def _plan_tiles(anchor: BlockInfo, producers: list[BlockInfo], spec: HardwareSpec,
                lanes: int) -> _Plan | None:
    vector = anchor.vector_position()
    width = vector_factor(anchor.extents[vector], lanes) if vector is not None else None
    if width is None or reduces_along_rows(anchor, lanes):
        vector = None  # a row reduction is vectorised along its rows by _finish_anchor
    if anchor.is_reduction:
        tiled = anchor.spatial_positions
    else:
        tiled = [p for p in _row_positions(anchor, producers) if p != vector]
    if not tiled:
        return None
    minimum = {vector: width} if vector is not None and vector in tiled else {}
    return _Plan(tiled, choose_tile(anchor, tiled, minimum, spec), vector, width)


def _row_positions(anchor: BlockInfo, producers: list[BlockInfo]) -> list[int]:
    """Leading spatial loops of an element-wise anchor that index every reduction-derived input
    (APOLLO section 4.2: the rows along which reduction and element-wise work can be stitched)."""
    derived = []
    for info in producers:
        reads_derived = any(any(r.source.same_as(d) for d in derived) for r in info.block.reads)
        if info.is_reduction or reads_derived:
            derived.append(info.block.writes[0].source)
    rows = []
    for pos, iv in enumerate(anchor.loop_iters):
        if anchor.extents[pos] == 1:
            rows.append(pos)  # a unit loop indexes nothing (its index may be simplified to 0)
            continue
        indexes_all = all(
            any(uses_any(rg.min, [iv.var]) for rg in read.region)
            for read in anchor.operand_reads if any(read.source.same_as(d) for d in derived))
        if not indexes_all:
            break
        rows.append(pos)
    return rows


def _tile_anchor(sch: s_tir.Schedule, anchor: BlockInfo, plan: _Plan):
    """Split and reorder the anchor loops; return (fused tile loop, innermost spatial tile loop)."""
    rv = sch.get_sblock(anchor.name)
    loops = sch.get_loops(rv)
    outer, intra, untiled, reduce, lanes = [], [], [], [], []
    for pos, loop in enumerate(loops):
        extent = anchor.extents[pos]
        if anchor.loop_iters[pos].iter_type == REDUCE:
            reduce.append(loop)
        elif pos in plan.tiled:
            inner = plan.tile[pos]
            if pos == plan.vector:
                tile_outer, tile_intra, lane = sch.split(loop, [extent // inner, inner // plan.vector_width,
                                                                plan.vector_width])
                lanes.append(lane)
            else:
                tile_outer, tile_intra = sch.split(loop, [extent // inner, inner])
            outer.append(tile_outer)
            intra.append(tile_intra)
        elif pos == plan.vector:
            rest, lane = sch.split(loop, [extent // plan.vector_width, plan.vector_width])
            untiled.append(rest)
            lanes.append(lane)
        else:
            untiled.append(loop)
    if anchor.is_reduction:
        order = outer + intra + untiled + reduce + lanes
        inner_attach = (intra + untiled)[-1]
    else:
        order = outer + intra + untiled + lanes
        inner_attach = intra[-1]
    sch.reorder(*order)
    tile_loop = sch.fuse(*outer) if len(outer) > 1 else outer[0]
    plan.first_reduce_loop = reduce[0] if reduce else None
    plan.vector_loop = lanes[0] if lanes else None
    return tile_loop, inner_attach


def tile_contraction(sch: s_tir.Schedule, anchor: BlockInfo, plan: RegisterTile, lanes: int) -> ContractionLoops:
    """Apply a :class:`.register_tile.RegisterTile` to the anchor: :func:`pack_contraction`, then
    :func:`split_contraction` with the spatial tile loops fused into one."""
    packed = pack_contraction(sch, anchor, plan)
    return split_contraction(sch, anchor, plan, lanes, packed)


class PackedOperands:
    """What :func:`pack_contraction` added: per-tile operand packs still to be placed, and the
    copy-out block of a local accumulator (a consumer of the contraction)."""

    def __init__(self, packs, added_consumers):
        self.packs, self.added_consumers = packs, added_consumers


def pack_contraction(sch: s_tir.Schedule, anchor: BlockInfo, plan: RegisterTile) -> PackedOperands:
    """The layout steps of a register tile, made while the contraction is a child of the root:
    accumulate a function output in a local tile, give a transposed accumulator its layout,
    pack layout-free weights once (:func:`_pack_once`) and other packed operands per tile."""
    rv = sch.get_sblock(anchor.name)
    added_consumers = []
    if not any(anchor.block.writes[0].source.same_as(b) for b in intermediate_buffers(sch)):
        # The accumulators go to a local tile, copied out after the reduction: accumulating in a
        # function output, LLVM cannot keep them in registers (the parallel closure that holds
        # the loop drops the parameters' noalias), and reloads them every reduction step.
        added_consumers.append(sch.get(sch.cache_write(rv, 0, "local")).name_hint)
    if plan.transposed:
        sch.transform_layout(rv, ("write", 0), _blocked(anchor.block.writes[0], anchor, plan))
    packs = []
    layout_free = layout_free_buffers(sch.mod["main"])
    for index in plan.packed + _weight_panels(anchor, plan, layout_free):
        read = anchor.operand_reads[index]
        position = next(i for i, r in enumerate(anchor.block.reads) if r.source.same_as(read.source))
        if any(read.source.same_as(buffer) for buffer in layout_free):
            _pack_once(sch, rv, position, _blocked(read, anchor, plan))
            continue
        pack = sch.cache_read(rv, position, "local")
        sch.transform_layout(pack, ("write", 0), _blocked(read, anchor, plan))
        packs.append(pack)
    return PackedOperands(packs, added_consumers)


def split_contraction(sch: s_tir.Schedule, anchor: BlockInfo, plan: RegisterTile, lanes: int,
                      packed: PackedOperands, depth: int = 0, block: int | None = None,
                      outside: tuple[int, ...] = ()) -> ContractionLoops:
    """Split and order the contraction's loops (those below the first ``depth`` loops enclosing
    it, one per block variable, with ``anchor.extents``) as ``[tiles] [reduction blocks]
    [micro-kernels] [reduction in a block] [rows] [vectors, lanes]``, and place the per-tile
    packs. The spatial tile loops are fused into one; with ``block`` (a spatial position), that
    position's tile loop is put outermost and kept apart (``ContractionLoops.block``), the others
    fused below it, and the tile loops of the ``outside`` positions are put above it, in order."""
    rv = sch.get_sblock(anchor.name)
    above, outer, reduce_outer, intra, reduce_inner = [], [], [], [], []
    rows = vectors = lane = block_loop = None
    for pos, loop in enumerate(sch.get_loops(rv)[depth:]):
        extent = anchor.extents[pos]
        if anchor.loop_iters[pos].iter_type == REDUCE:
            inner = plan.reduce_block[pos]
            if inner == extent:
                reduce_inner.append(loop)
            elif inner == 1:
                reduce_outer.append(loop)
            else:
                block_outer, block_inner = sch.split(loop, [extent // inner, inner])
                reduce_outer.append(block_outer)
                reduce_inner.append(block_inner)
            continue
        tile = plan.tile[pos]
        if pos == plan.vector:
            width = plan.vectors * plan.lanes
            tile_outer, tile_intra, vectors, lane = sch.split(loop, [extent // tile, tile // width,
                                                                     plan.vectors, plan.lanes])
        elif pos == plan.register:
            tile_outer, tile_intra, rows = sch.split(loop, [extent // tile, tile // plan.rows, plan.rows])
        else:
            tile_outer, tile_intra = sch.split(loop, [extent // tile, tile])
        if pos == block:
            block_loop = tile_outer
        elif pos in outside:
            above.append(tile_outer)
        else:
            outer.append(tile_outer)
        intra.append(tile_intra)
    micro = [loop for loop in (rows, vectors, lane) if loop is not None]
    sch.reorder(*above, *([block_loop] if block_loop is not None else []), *outer, *reduce_outer, *intra,
                *reduce_inner, *micro)
    tile_loop = sch.fuse(*outer) if len(outer) > 1 else (outer[0] if outer else block_loop)
    for pack in packed.packs:
        sch.compute_at(pack, reduce_outer[0] if reduce_outer else tile_loop, preserve_unit_loops=True)
        vectorize_innermost(sch, pack, lanes)
    return ContractionLoops(tile_loop, intra, reduce_outer, reduce_inner, rows, vectors, lane,
                            packed.added_consumers, block_loop)


def _weight_panels(anchor: BlockInfo, plan: RegisterTile, layout_free: list) -> tuple[int, ...]:
    """Operands to pack at compile time although they are contiguous along the vector loop:
    layout-free weights indexed by it in their last dimension, wider than one micro-kernel
    (``[K, N]`` -> ``[N / w, K, w]``, GotoBLAS's packed B panels). Unpacked, each reduction step
    of a micro-kernel reads a row of its own (12 KiB apart in BERT's ``768 x 3072`` weight), one
    cache line and one page per step; packed, a micro-kernel's whole panel is one contiguous run."""
    var = anchor.loop_iters[plan.vector].var
    width = plan.vectors * plan.lanes
    panels = []
    for index, read in enumerate(anchor.operand_reads):
        if index in plan.packed or not any(read.source.same_as(b) for b in layout_free):
            continue
        last = read.region[-1]
        if (len(read.region) > 1 and last.min.same_as(var) and int(read.source.shape[-1]) > width
                and not any(uses_any(rg.min, [var]) for rg in read.region[:-1])):
            panels.append(index)
    return tuple(panels)


def layout_free_buffers(func: tirx.PrimFunc) -> list:
    """The parameter buffers ``relax.transform.AttachAttrLayoutFreeBuffers`` marked layout-free:
    weights bound to constants (or model parameters), whose layout the schedule may choose."""
    indices = func.attrs.get("layout_free_buffers", []) if func.attrs is not None else []
    return [func.params[int(i)] for i in indices]


def _pack_once(sch: s_tir.Schedule, rv, position: int, layout: tirx.IndexMap) -> None:
    """Pack a layout-free operand in a block of its own at the root, marked as MetaSchedule's
    ``RewriteLayout`` postprocessor marks it (``meta_schedule.layout_rewrite_preproc``), so that
    ``relax.transform.SplitLayoutRewritePreproc`` moves it out of the kernel and ``FoldConstant``
    runs it once at compile time: the kernel reads the packed weight, and never packs it."""
    pack = sch.cache_read(rv, position, "global")
    sch.annotate(pack, LAYOUT_REWRITE_PREPROC, True)
    sch.transform_layout(pack, ("write", 0), layout)


def finish_contraction(sch: s_tir.Schedule, anchor_name: str, loops: ContractionLoops, lanes: int) -> None:
    """Unroll the micro-kernel and the small reduction window, vectorise, separate the init. The
    outermost reduction loop that iterates carries the micro-kernel's steps and stays a loop (an
    NHWC 1x1 conv's unit R x S loops come before its channels, which are no window)."""
    window = [loop for loop in loops.reduce_inner if _extent(sch, loop) > 1][1:]
    if window and math.prod(_extent(sch, loop) for loop in window) <= MAX_UNROLLED_WINDOW:
        for loop in window:
            sch.unroll(loop)
    if loops.rows is not None:
        sch.unroll(loops.rows)
    sch.unroll(loops.vectors)
    sch.vectorize(loops.lanes)
    first_reduce = (loops.reduce_outer + loops.reduce_inner)[:1]
    if first_reduce:
        init = sch.decompose_reduction(sch.get_sblock(anchor_name), first_reduce[0])
        vectorize_innermost(sch, init, lanes)


def _blocked(region, anchor: BlockInfo, plan: RegisterTile) -> tirx.IndexMap:
    """Layout of a packed operand or transposed accumulator: the dimension indexed by the vector
    loop is split into micro-kernel widths, blocks outermost and the width innermost (``[F, C, R,
    S]`` -> ``[F / w, C, R, S, w]``), so one micro-kernel's panel is contiguous."""
    var = anchor.loop_iters[plan.vector].var
    dim = next(d for d, rg in enumerate(region.region) if rg.min.same_as(var))
    width = plan.vectors * plan.lanes
    return tirx.IndexMap.from_func(
        lambda *idx: [idx[dim] // width, *idx[:dim], *idx[dim + 1:], idx[dim] % width], ndim=len(region.region))


def _finish_anchor(sch: s_tir.Schedule, anchor_name: str, plan: _Plan, lanes: int) -> None:
    """Vectorise the vector loop and separate the reduction init; a row reduction without a
    vector loop is vectorised along its reduced axis instead (:func:`.vectorize.vectorize_row_reduction`)."""
    rv = sch.get_sblock(anchor_name)
    if plan.vector_loop is not None:
        sch.vectorize(plan.vector_loop)
    elif plan.first_reduce_loop is None:
        vectorize_innermost(sch, rv, lanes)  # with a scalar tail: no divisor fits the lanes
    else:
        vectorize_row_reduction(sch, rv, lanes)
    if plan.first_reduce_loop is not None and plan.vector_loop is not None:
        init = sch.decompose_reduction(rv, plan.first_reduce_loop)
        vectorize_innermost(sch, init, lanes)


def _unroll_below(sch: s_tir.Schedule, name: str, loop) -> None:
    """Unroll block ``name``'s serial loops under ``loop`` (a micro-kernel's write-back, one
    register tile of iterations): its loads of the accumulators then have constant offsets, which
    LLVM forwards from the registers the reduction left them in."""
    loops = sch.get_loops(sch.get_sblock(name))
    target = sch.get(loop)
    depth = next((i for i, rv in enumerate(loops) if sch.get(rv).same_as(target)), None)
    if depth is None:
        return
    for rv in loops[depth + 1:]:
        if sch.get(rv).kind == tirx.ForKind.SERIAL:
            sch.unroll(rv)


def reverse_compute_at_covering(sch: s_tir.Schedule, name: str, loop, max_points: int | None = None) -> bool:
    """``reverse_compute_at`` block ``name`` under ``loop`` if the moved block still runs each of
    its iterations exactly once (and at most ``max_points`` of them per iteration of ``loop``);
    returns whether it moved.

    TVM gives the moved block the iterations whose reads the blocks under ``loop`` provide, as a
    box per block variable. That box misses iterations when they read a guarded operand (TE's
    concat: ``if_then_else(i < n, a[i], b[i - n])`` with only ``a`` produced in the tile) or when
    one buffer index fuses several block variables (a reshape reading ``m[.., 2 * i + j]`` of a
    tile of 3 columns); TVM does not reject either move. So the move is tried on a copy and kept
    only when the block's bindings are a bijective affine map from its loops
    (``detect_iter_map``) and the loops have as many points as the block's domain.
    """
    trial = sch.copy()
    if not try_primitive(trial.reverse_compute_at, trial.get_sblock(name), loop,
                         preserve_unit_loops=True):
        return False
    if not _runs_domain_once(trial, name):
        return False
    if max_points is not None and _points_under(trial, name, loop) > max_points:
        return False
    sch.reverse_compute_at(sch.get_sblock(name), loop, preserve_unit_loops=True)
    return True


def _points_under(sch: s_tir.Schedule, name: str, loop) -> int:
    """Iterations block ``name`` runs per iteration of ``loop`` (one of its loops)."""
    loops = [sch.get(rv) for rv in sch.get_loops(sch.get_sblock(name))]
    target = sch.get(loop).loop_var
    depth = next(i for i, rv in enumerate(loops) if rv.loop_var.same_as(target))
    return math.prod(int(rv.extent) if isinstance(rv.extent, tirx.IntImm) else 1 << 30 for rv in loops[depth + 1:])


def _runs_domain_once(sch: s_tir.Schedule, name: str) -> bool:
    """Whether block ``name`` (no predicate) runs every point of its domain exactly once."""
    realize = realize_of(sch, name)
    if not (isinstance(realize.predicate, tirx.IntImm) and int(realize.predicate) == 1):
        return False
    loops = [sch.get(rv) for rv in sch.get_loops(sch.get_sblock(name))]
    if not all(isinstance(loop.extent, tirx.IntImm) for loop in loops):
        return False
    domain = realize.block.iter_vars
    if not all(isinstance(iv.dom.extent, tirx.IntImm) for iv in domain):
        return False
    if math.prod(int(loop.extent) for loop in loops) != math.prod(int(iv.dom.extent) for iv in domain):
        return False
    iters = {loop.loop_var: tvm.ir.Range.from_min_extent(loop.min, loop.extent) for loop in loops}
    mapped = sym.detect_iter_map(list(realize.iter_values), iters, check_level="bijective")
    return len(mapped.indices) > 0


def vectorize_innermost(sch: s_tir.Schedule, rv, lanes: int) -> None:
    """Vectorise a block's innermost loop when it is spatial (split to a vector-sized chunk); a
    reduction over outer axes, along its innermost spatial loop
    (:func:`.vectorize.vectorize_column_reduction`)."""
    loops = sch.get_loops(rv)
    if not loops:
        return
    loop = sch.get(loops[-1])
    if not isinstance(loop.extent, tirx.IntImm) or loop.kind != tirx.ForKind.SERIAL:
        return
    realize = realize_of(sch, sch.get(rv).name_hint)
    block = realize.block
    for iv, value in zip(block.iter_vars, realize.iter_values):
        if iv.iter_type != 0 and uses_any(value, [loop.loop_var]):
            vectorize_column_reduction(sch, rv, lanes)
            return
    extent = int(loop.extent)
    width = vector_factor(extent, lanes)
    if (width is None or width % lanes) and len(loops) > 1 and _rows_contiguous(sch, rv, loops[-2:]):
        extent *= int(sch.get(loops[-2]).extent)  # 14 x 14 pixels: 12 vectors and a tail of 4
        vectorize_loop(sch, sch.fuse(*loops[-2:]), extent, lanes)
        return
    vectorize_loop(sch, loops[-1], extent, lanes)


def _rows_contiguous(sch: s_tir.Schedule, rv, pair) -> bool:
    """Whether the two spatial loops ``pair`` walk every buffer the block touches contiguously:
    each is bound to a whole block variable directly, and every access using them indexes them in
    its last two dimensions, the last one whole (a feature map's rows and columns)."""
    realize = realize_of(sch, sch.get(rv).name_hint)
    loops = [sch.get(loop) for loop in pair]
    if loops[0].kind != tirx.ForKind.SERIAL or not isinstance(loops[0].extent, tirx.IntImm):
        return False
    variables = []
    for loop in loops:
        bound = [iv for iv, value in zip(realize.block.iter_vars, realize.iter_values)
                 if value.same_as(loop.loop_var)]
        if len(bound) != 1 or bound[0].iter_type != 0 or int(bound[0].dom.extent) != int(loop.extent):
            return False
        variables.append(bound[0].var)
    return indexes_trailing([*realize.block.reads, *realize.block.writes], variables,
                            [int(loop.extent) for loop in loops])


def _parallelize_own_nest(sch: s_tir.Schedule, name: str, num_cores: int) -> None:
    """A block left outside the tile loop (a consumer that cannot move, a reduction after the
    anchor, a producer ``compute_at`` refused) keeps a loop nest of its own, which would run on
    one core: fuse its leading serial spatial loops until they give every core work
    (:data:`.plain_schedule.CHUNKS_PER_CORE`, as the plain schedule does) and parallelise them."""
    realize = realize_of(sch, name)
    reduce_values = [value for iv, value in zip(realize.block.iter_vars, realize.iter_values)
                     if iv.iter_type != 0]
    leading, work = [], 1
    for rv in sch.get_loops(sch.get_sblock(name)):
        loop = sch.get(rv)
        if (work >= CHUNKS_PER_CORE * num_cores or loop.kind != tirx.ForKind.SERIAL
                or not isinstance(loop.extent, tirx.IntImm)
                or any(uses_any(value, [loop.loop_var]) for value in reduce_values)):
            break
        leading.append(rv)
        work *= int(loop.extent)
    if work > 1 and leading and (len(leading) == 1 or try_primitive(sch.fuse, *leading)):
        try_primitive(sch.parallel, sch.get_loops(sch.get_sblock(name))[0])


def localize_intermediates(sch: s_tir.Schedule, tile_loop) -> None:
    """Give ``local`` scope to intermediates whose writer and readers all sit in the tile loop."""
    root = sch.get_sblock("root")
    for rv in sch.get_child_blocks(root):
        block = sch.get(rv)
        if not any(block.writes[0].source.same_as(b) for b in intermediate_buffers(sch)):
            continue
        users = [rv, *sch.get_consumers(rv)]
        if all(_inside(sch, user, tile_loop) for user in users):
            try_primitive(sch.set_scope, rv, 0, "local")


def _inside(sch: s_tir.Schedule, rv, loop) -> bool:
    loops = sch.get_loops(rv)
    return bool(loops) and sch.get_sref(loops[0]).same_as(sch.get_sref(loop))


def intermediate_buffers(sch: s_tir.Schedule) -> list:
    return list(sch.get(sch.get_sblock("root")).alloc_buffers)


def _extent(sch: s_tir.Schedule, loop) -> int:
    extent = sch.get(loop).extent
    return int(extent) if isinstance(extent, tirx.IntImm) else 0
