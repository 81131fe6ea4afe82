"""Two chained contractions of a fused PrimFunc as one loop nest (GraphTurbo section 4.1, Fig. 11;
APOLLO section 4.2).

:class:`~.loop_fusion.AnchorLoopFusion` register-tiles one anchor per kernel and leaves any other
contraction a whole-tensor loop nest. A group whose anchor (its last contraction) reads, through
element-wise ops only, the output of another contraction - the MLP of a transformer (matmul, bias,
GELU, matmul) or the tail of an inverted residual (3x3 depthwise conv, bias, ReLU6, 1x1 conv) - or
reads it through the zero padding of a conv - the head of an inverted residual (1x1 expansion conv,
bias, ReLU6, padded 3x3 depthwise conv) - can instead be fused along the chain, as GraphTurbo
section 4.1 fuses the loops of consecutive layers ("Loop Fusion within Layers" and across them,
Fig. 11) and APOLLO section 4.2 stitches a producer into its consumer's tile:

1. the element-wise blocks between the two contractions are inlined into the last of them (the
   *epilogue*, which writes the intermediate the anchor reads); the rest is inlined as
   :func:`.loop_fusion.inline_injective` does;
2. the anchor's outer spatial axis that indexes the intermediate (token rows of a matmul, output
   rows of a conv) is split into blocks; every other anchor loop stays inside the block loop, so
   the producer's tile is computed once per block. The block is the largest whose producer tile,
   intermediate rows and anchor output rows fit the fast memory (L2) beside one micro-kernel's
   panels (:meth:`~tvm_fusion_ext.hardware.HardwareSpec.panel_bytes`), with a block for every
   core (preferring counts that are a multiple of the cores, or at least
   :data:`.analysis.BALANCED_TILES` per core); blocks whose halos would recompute more than
   :data:`MAX_HALO_RECOMPUTE` times the producer's rows decline the chain. When no block of the
   outermost such axis fits (a batch of images whose one image's intermediate exceeds the fast
   memory), the next axis is blocked, the ones before it run outside the block loop a single
   iteration per block, and all of them are fused into one parallel loop;
3. the anchor gets its register tile inside the block (:func:`.loop_fusion.split_contraction`);
   the producer, its epilogue and its own producers (padding) are ``compute_at`` the block loop
   (TVM ``src/s_tir/schedule/primitive/compute_at.cc`` gives a moved block the region its
   consumers under the loop read: the block's rows, plus a conv's halo), so the intermediate becomes a ``[block, full width]`` tile with ``local`` scope that lowering
   (``CompactBufferAllocation``) shrinks; the producer then gets its own register tile inside the
   block (a depthwise conv: vectors along the output row, the 3x3 window unrolled), or, without
   one, its output row (or, NHWC, a block of channels) innermost and vectorised, and the
   epilogue runs per producer tile. Through a padding, the block reads ``(rows - 1) * stride +
   window`` rows of the intermediate (its halo, recomputed by the neighbouring block), clipped
   at the image's edges; the padding block is computed at the block loop and the producer a row
   at a time under the padding's row loop, so every producer region is one row and the padded
   tile compacts to the block's rows (a region clipped at both edges would not);
4. the block loop (fused with the loops outside it) is parallel.

Weights stay layout-free and are packed once, at compile time, as the single-anchor schedule packs
them (:func:`.loop_fusion.pack_contraction`, before anything moves).

The rule passes over functions with fewer than two contractions (no remark) and declines, with a
``reason``, three or more contractions and a chain it cannot block: the intermediate reached
through an op that is neither element-wise nor a padding (a transpose), read elsewhere too, no
anchor axis indexing it, no block fitting the fast memory, or weights too large to be read again by
every block (when the blocks would read more weight bytes again than the intermediate they keep on
chip, and the weights do not fit the fast memory). :class:`.loop_fusion.AnchorLoopFusion` then
takes the function.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass, replace

import tvm
from tvm import s_tir, tirx

from ..hardware import HardwareSpec
from .analysis import (
    BALANCED_TILES,
    REDUCE,
    BlockInfo,
    analyze_blocks,
    divisors,
    is_const_one,
    regions_exact,
    try_primitive,
    uses_any,
)
from .loop_fusion import (
    MAX_UNROLLED_WINDOW,
    finish_contraction,
    inline_injective,
    intermediate_buffers,
    layout_free_buffers,
    localize_intermediates,
    narrower_register_tile,
    pack_contraction,
    reverse_compute_at_covering,
    split_contraction,
    vectorize_innermost,
)
from .register_tile import plan_register_tile
from .rule_base import SpecScheduleRule
from .vectorize import vectorize_loop


@dataclass
class _Chain:
    """Names of the producer, its epilogue blocks (the last one writes what the anchor reads)
    and the anchor, with the anchor's block axis and the producer's loop position for it; the
    anchor reads the intermediate along that axis at ``stride`` times its index plus a window
    of ``window`` rows (1 and 1: row for row); ``padded``: an epilogue block reads the chain's
    values shifted (a conv's zero padding); ``outer``: ``(anchor position, producer position)`` of
    the axes that run outside the block loop, one iteration per block (the batch, when one
    image's intermediate does not fit the fast memory)."""

    producer: str
    epilogue: list[str]
    anchor: str
    anchor_axis: int
    producer_axis: int
    stride: int = 1
    window: int = 1
    padded: bool = False
    outer: tuple[tuple[int, int], ...] = ()

    def producer_rows(self, rows: int) -> int:
        """Producer rows a block of ``rows`` anchor rows reads (a conv's halo included)."""
        return (rows - 1) * self.stride + self.window

    def in_block(self, info: BlockInfo, rows: int, producer: bool) -> BlockInfo:
        """``info`` (the producer, or the anchor) as one block sees it: ``rows`` iterations of the
        block axis, one of each ``outer`` axis."""
        axis = self.producer_axis if producer else self.anchor_axis
        ones = {p if producer else a: 1 for a, p in self.outer}
        return replace(info, extents=[rows if pos == axis else ones.get(pos, extent)
                                      for pos, extent in enumerate(info.extents)])


class ContractionChain(SpecScheduleRule):
    """GraphTurbo section 4.1 loop fusion along a producer -> anchor contraction chain (see the
    module docstring)."""

    def decline_unanalysable(self, reason: str) -> None:
        return self.pass_over()

    def schedule(self, sch: s_tir.Schedule, analyzed: list, spec: HardwareSpec):
        infos = [info for _, info in analyzed]
        contractions = sum(1 for info in infos if info.is_contraction)
        if contractions < 2:
            return self.pass_over()
        if contractions > 2:
            return self.decline(f"{contractions} contractions: only a chain of two is blocked")
        if not regions_exact(sch):
            return self.decline("a block declares other regions than it accesses")
        chains = _find_chain(sch, infos)
        if isinstance(chains, str):
            return self.decline(chains)
        epilogue = _inline_epilogue(sch, chains[0])
        infos = [info for _, info in analyze_blocks(sch)]
        inline_injective(sch, infos, chains[0].anchor, keep=(epilogue,) if epilogue else ())
        analyzed = analyze_blocks(sch)
        if not analyzed:
            return self.decline("after inlining, a block is left that the rule cannot analyse")
        infos = [info for _, info in analyzed]
        by_name = {info.name: info for info in infos}
        anchor, producer = by_name[chains[0].anchor], by_name[chains[0].producer]
        lanes = spec.vector_lanes(str(anchor.block.writes[0].source.dtype))
        weights = layout_free_buffers(sch.mod["main"])
        blocks = [_choose_block(producer, anchor, chain, spec, lanes, weights) for chain in chains]
        chosen = next((i for i, block in enumerate(blocks) if not isinstance(block, str)), None)
        if chosen is None:
            return self.decline(blocks[0])
        chain, (rows, anchor_plan) = chains[chosen], blocks[chosen]
        # A padded intermediate is computed a row at a time under the padding's row loop: over
        # the block's rows (halo included) the producer would be clipped at the image's edges,
        # and a predicated region keeps lowering from shrinking the buffer to the tile.
        producer_rows = 1 if chain.padded else chain.producer_rows(rows)
        producer_in_block = chain.in_block(producer, producer_rows, producer=True)
        producer_plan = plan_register_tile(producer_in_block, spec, prepacked=weights) or narrower_register_tile(
            producer_in_block, spec, lanes, weights)
        if producer_plan is not None:  # the block's rows in one tile: each row's region stays affine
            producer_plan = replace(producer_plan, tile={
                **producer_plan.tile, chain.producer_axis: producer_rows, **{p: 1 for _, p in chain.outer}})

        anchor_packed = pack_contraction(sch, anchor, anchor_plan)
        producer_packed = pack_contraction(sch, producer_in_block, producer_plan) if producer_plan else None
        outside = tuple(a for a, _ in chain.outer)
        loops = split_contraction(sch, anchor, anchor_plan, lanes, anchor_packed, block=chain.anchor_axis,
                                  outside=outside)
        names = [info.name for info in infos]
        consumers = names[names.index(chain.anchor) + 1:] + loops.added_consumers
        for name in consumers:
            reverse_compute_at_covering(sch, name, loops.tile)
        moved = [name for name in names if name in _upstream_names(infos, producer)] + [chain.producer]
        at, depth = loops.block, 1 + len(outside)
        if epilogue:
            if not try_primitive(sch.compute_at, sch.get_sblock(epilogue), loops.block, preserve_unit_loops=True):
                return self.decline(f"{epilogue} cannot be computed inside the anchor's block loop")
            if chain.padded:
                depth += 1 + chain.producer_axis
                at = sch.get_loops(sch.get_sblock(epilogue))[depth - 1]
        for name in reversed(moved):
            if not try_primitive(sch.compute_at, sch.get_sblock(name), at, preserve_unit_loops=True) \
                    and name == chain.producer:
                return self.decline(f"{name} cannot be computed inside the anchor's block loop")
        if epilogue:
            moved.append(epilogue)
        if not _one_loop_per_variable(sch, chain.producer, producer_in_block, depth):
            return self.decline("inside the block, the producer's region is not its rows of the block")
        if producer_plan is not None:
            producer_loops = split_contraction(sch, producer_in_block, producer_plan, lanes,
                                               producer_packed, depth=depth)
            if epilogue and not chain.padded:
                reverse_compute_at_covering(sch, epilogue, producer_loops.tile)
        else:
            producer_reduce = _vectorize_rows(sch, producer_in_block, lanes, depth)
            if epilogue and not chain.padded and producer_reduce is not None:  # on the accumulators
                reverse_compute_at_covering(sch, epilogue, _loop_above(sch, chain.producer, producer_reduce))
        block_loop = sch.fuse(*sch.get_loops(sch.get_sblock(chain.anchor))[:len(outside)], loops.block) \
            if outside else loops.block
        if spec.num_cores > 1:
            sch.parallel(block_loop)
        for name in [*moved, *consumers]:
            if name != chain.producer:
                vectorize_innermost(sch, sch.get_sblock(name), lanes)
        localize_intermediates(sch, block_loop)
        if producer_plan is not None:
            finish_contraction(sch, chain.producer, producer_loops, lanes)
        elif producer_reduce is not None:
            init = sch.decompose_reduction(sch.get_sblock(chain.producer), producer_reduce)
            vectorize_innermost(sch, init, lanes)
        finish_contraction(sch, chain.anchor, loops, lanes)
        return sch


def _find_chain(sch: s_tir.Schedule, infos: list[BlockInfo]) -> list[_Chain] | str:
    """The chain ending at the last contraction, one candidate per axis it may be blocked along
    (outermost first, the axes before it outside the block loop), or why there is none."""
    anchor = next(info for info in reversed(infos) if info.is_contraction)
    intermediates = intermediate_buffers(sch)
    writer = {}
    for info in infos:
        out = info.block.writes[0].source
        if any(out.same_as(b) for b in intermediates):
            writer[out] = info
    reasons = []
    for read in anchor.operand_reads:
        found = _upstream(read.source, writer)
        if found is None:
            continue
        producer, epilogue = found
        reason = _blockable(sch, infos, producer, epilogue, anchor)
        if reason is None:
            axes = _block_axes(read, producer, epilogue, anchor)
            if not axes:
                reasons.append(f"no spatial axis of {anchor.name} indexes the intermediate it reads "
                               f"from {producer.name}")
                continue
            order = [info.name for info in infos]
            names = (producer.name, sorted((e.name for e in epilogue), key=order.index), anchor.name)
            padded = _shifted(producer, epilogue)
            chains = []
            for index, axis in enumerate(axes):
                outer = tuple((a, p) for a, p, _, _ in axes[:index])
                chains.append(_Chain(*names, *axis, padded=padded, outer=outer))
                if axis[2:] != (1, 1):  # an axis with a window cannot run outside the block loop
                    break
            return chains
        reasons.append(reason)
    if not reasons:
        return f"{anchor.name} reads no other contraction's output"
    return "; ".join(reasons)


def _upstream(buffer, writer: dict) -> tuple[BlockInfo, list[BlockInfo]] | None:
    """The contraction ``buffer`` derives from and the blocks between (walking back through
    intermediates, stopping at contractions); ``None`` unless exactly one contraction is met."""
    seen, stack, producers = [], [buffer], []
    while stack:
        buf = stack.pop()
        info = next((w for b, w in writer.items() if b.same_as(buf)), None)
        if info is None or any(info is s for s in seen) or any(info is p for p in producers):
            continue
        if info.is_contraction:
            producers.append(info)
            continue
        seen.append(info)
        stack.extend(read.source for read in info.block.reads)
    if len(producers) != 1:
        return None
    return producers[0], seen


def _blockable(sch: s_tir.Schedule, infos: list[BlockInfo], producer: BlockInfo,
               epilogue: list[BlockInfo], anchor: BlockInfo) -> str | None:
    """Why the intermediate from ``producer`` through ``epilogue`` cannot be blocked along the
    anchor's rows, or ``None``: every epilogue block is element-wise in the chain's values (reads
    them at its own output index, or shifted by constants: the zero padding of a conv), and
    nothing but the chain and the anchor reads them."""
    chain = [producer, *epilogue]
    chain_buffers = [info.block.writes[0].source for info in chain]
    for info in epilogue:
        if info.is_reduction:
            return f"{info.name}, between {producer.name} and {anchor.name}, is a reduction"
        write = [rg.min for rg in info.block.writes[0].region]
        for read in info.block.reads:
            if not any(read.source.same_as(b) for b in chain_buffers):
                continue
            if _shifts(read.region, write) is None:
                return (f"{info.name} reads {read.source.name} in another layout than it writes "
                        f"(not element-wise): {producer.name}'s output cannot be blocked by rows")
    members = {info.name for info in chain} | {anchor.name}
    for info in infos:
        if info.name in members:
            continue
        if any(read.source.same_as(b) for read in info.block.reads for b in chain_buffers):
            return f"{info.name} also reads the intermediate between {producer.name} and {anchor.name}"
    return None


def _shifts(region, write: list) -> list[int] | None:
    """Per dimension, the constant that a read at ``region`` is shifted by from the write index
    ``write`` (one element per dimension), or ``None`` when the read is no such shift."""
    if len(region) != len(write) or not all(is_const_one(rg.extent) for rg in region):
        return None
    shifts = []
    for rg, index in zip(region, write):
        delta = tvm.sym.Analyzer().simplify(rg.min - index)
        if not isinstance(delta, tirx.IntImm):
            return None
        shifts.append(int(delta))
    return shifts


def _shifted(producer: BlockInfo, epilogue: list[BlockInfo]) -> bool:
    """Whether an epilogue block reads a value of the chain shifted from its own index."""
    chain_buffers = [info.block.writes[0].source for info in [producer, *epilogue]]
    for info in epilogue:
        write = [rg.min for rg in info.block.writes[0].region]
        for read in info.block.reads:
            if any(read.source.same_as(b) for b in chain_buffers) and any(_shifts(read.region, write) or ()):
                return True
    return False


def _block_axes(read, producer: BlockInfo, epilogue: list[BlockInfo],
                anchor: BlockInfo) -> list[tuple[int, int, int, int]]:
    """``(anchor position, producer position, stride, window)`` of each axis the chain may be
    blocked along, outermost first: an anchor's non-unit spatial loop whose variable indexes a
    dimension of the intermediate as ``stride * var + window offset`` (a conv's rows), and the
    producer loop writing that dimension (element-wise epilogues and paddings keep dimensions in
    place)."""
    written = producer.block.writes[0].region
    reduce_vars = {iv.var: iv.dom for iv in anchor.block.iter_vars if iv.iter_type == REDUCE}
    analyzer = tvm.sym.Analyzer()
    for var, dom in reduce_vars.items():
        analyzer.bind(var, dom)
    axes = []
    for pos in anchor.spatial_positions:
        if anchor.extents[pos] == 1:
            continue
        var = anchor.loop_iters[pos].var
        for dim, rg in enumerate(read.region):
            if dim >= len(written):
                continue
            coefficients = tvm.sym.detect_linear_equation(rg.min, [var])
            if len(coefficients) != 2 or not isinstance(coefficients[0], tirx.IntImm) \
                    or int(coefficients[0]) < 1:
                continue
            offset = coefficients[1]
            if any(uses_any(offset, [v]) for v in (iv.var for iv in anchor.loop_iters)
                   if v not in reduce_vars):
                continue
            bound = analyzer.const_int_bound(offset)
            window = int(bound.max_value) - int(bound.min_value) + int(rg.extent)
            stride = int(coefficients[0])
            read_rows = (anchor.extents[pos] - 1) * stride + window
            index = written[dim].min
            for ppos, iv in enumerate(producer.loop_iters):
                if index.same_as(iv.var) and (producer.extents[ppos] == anchor.extents[pos] or (
                        epilogue and producer.extents[ppos] <= read_rows)):
                    axes.append((pos, ppos, stride, window))
    return list(dict.fromkeys(axes))


def _upstream_names(infos: list[BlockInfo], info: BlockInfo) -> set[str]:
    """Names of the blocks whose outputs ``info`` reads, directly or through others (the
    producer's padding): the blocks computed, with it, inside the block loop."""
    names, stack = set(), [read.source for read in info.block.reads]
    while stack:
        buffer = stack.pop()
        for other in infos:
            if other.block.writes[0].source.same_as(buffer) and other.name not in names:
                names.add(other.name)
                stack.extend(read.source for read in other.block.reads)
    return names


def _inline_epilogue(sch: s_tir.Schedule, chain: _Chain) -> str | None:
    """Inline the chain's epilogue into its last block, and that block into the anchor when it
    only copies (the zero padding of a 1x1 conv); returns the last block left (``None``: the
    anchor reads the producer's output)."""
    epilogue = list(chain.epilogue)
    while epilogue and _is_copy(sch, epilogue[-1]) and try_primitive(
            sch.compute_inline, sch.get_sblock(epilogue[-1])):
        epilogue.pop()
    for name in reversed(epilogue[:-1]):
        try_primitive(sch.compute_inline, sch.get_sblock(name))
    return epilogue[-1] if epilogue else None


def _is_copy(sch: s_tir.Schedule, name: str) -> bool:
    info = next(info for _, info in analyze_blocks(sch) if info.name == name)
    return info.is_copy


def _bytes_using(info: BlockInfo, position: int, extents: list[int], using: bool) -> int:
    """Bytes of the regions of ``info`` that use (``using``) or do not use loop ``position``."""
    var = info.loop_iters[position].var
    regions = [*info.operand_reads, *info.block.writes]
    return sum(access.bytes(extents) for access, region in zip(info.accesses, regions)
               if any(uses_any(rg.min, [var]) for rg in region.region) == using)


# The most a chain's blocks may compute of the producer's rows, halos included. A 5x5 stride-2
# depthwise conv over an expansion (EfficientNet-B0, 56 x 56 x 144) in blocks of 2 rows reads 7
# expansion rows per 4: 1.75x the expansion's work, and its chain kernel ran 1.31x slower than
# the two kernels apart. MobileNetV2's 3x3 chains stay under the bound (NeoFlow forms the same
# kernels for it, batch 1 and 8, with and without it).
MAX_HALO_RECOMPUTE = 1.5


def _choose_block(producer: BlockInfo, anchor: BlockInfo, chain: _Chain, spec: HardwareSpec,
                  lanes: int, prepacked: Collection = ()):
    """``(rows, anchor register tile inside the block)``, or why no block fits (module docstring);
    ``prepacked`` as for :func:`~.register_tile.plan_register_tile`."""
    producer_axis, anchor_axis = chain.producer_axis, chain.anchor_axis
    extent = anchor.extents[anchor_axis]
    outside = math.prod(anchor.extents[a] for a, _ in chain.outer)  # blocks of the outer axes
    weights = (_bytes_using(producer, producer_axis, producer.extents, False)
               + _bytes_using(anchor, anchor_axis, anchor.extents, False))
    intermediate = producer.accesses[-1].bytes(producer.extents)  # the producer's output
    fitting = []
    for rows in divisors(extent):
        blocks = outside * extent // rows
        if blocks < spec.num_cores and spec.num_cores > 1:
            continue
        producer_rows = chain.in_block(producer, chain.producer_rows(rows), producer=True)
        tile = (_bytes_using(producer, producer_axis, producer_rows.extents, True)
                + _bytes_using(anchor, anchor_axis, chain.in_block(anchor, rows, producer=False).extents, True))
        if tile + spec.panel_bytes() > spec.fast_memory_bytes:
            continue
        fitting.append(rows)
    if not fitting:
        return (f"no block of {anchor.name}'s {extent} rows keeps the intermediate in the fast memory "
                f"({spec.fast_memory_bytes} bytes) with a block for each of {spec.num_cores} cores")

    def balanced(rows):
        blocks = outside * extent // rows
        return blocks % spec.num_cores == 0 or blocks >= BALANCED_TILES * spec.num_cores

    rows = max(fitting, key=lambda r: (balanced(r), r))
    blocks = outside * extent // rows
    recomputed = blocks * chain.producer_rows(rows) / (outside * producer.extents[producer_axis])
    if recomputed > MAX_HALO_RECOMPUTE:
        return (f"blocks of {rows} rows recompute {recomputed:.2f}x {producer.name}'s rows (their halos): "
                f"more than the {MAX_HALO_RECOMPUTE}x the intermediate's traffic can pay for")
    if weights > spec.fast_memory_bytes and (blocks - 1) * weights > 2 * intermediate:
        return (f"each of {blocks} blocks would read the weights ({weights} bytes, more than the fast "
                f"memory) again: more traffic than the intermediate ({intermediate} bytes) saves")
    in_block = chain.in_block(anchor, rows, producer=False)
    plan = (plan_register_tile(in_block, spec, prepacked=prepacked)
            or narrower_register_tile(in_block, spec, lanes, prepacked))
    if plan is None:
        return f"{anchor.name} has no register tile inside a block of {rows} rows"
    return rows, replace(plan, tile={**plan.tile, anchor_axis: rows, **{a: 1 for a, _ in chain.outer}})


def _one_loop_per_variable(sch: s_tir.Schedule, name: str, info: BlockInfo, depth: int) -> bool:
    """Whether block ``name`` sits under ``depth`` loops (the block loop, and the padding's loops
    down to its row loop) and then one loop per block variable with ``info.extents`` (what
    ``compute_at`` gives a block whose region there is its rows and everything else)."""
    loops = sch.get_loops(sch.get_sblock(name))[depth:]
    return len(loops) == len(info.extents) and all(
        int(sch.get(loop).extent) == extent for loop, extent in zip(loops, info.extents))


def _loop_above(sch: s_tir.Schedule, name: str, loop):
    """The loop of block ``name`` directly around ``loop``."""
    loops = sch.get_loops(sch.get_sblock(name))
    position = next(i for i, rv in enumerate(loops) if sch.get(rv).same_as(sch.get(loop)))
    return loops[position - 1]


def _vectorize_rows(sch: s_tir.Schedule, info: BlockInfo, lanes: int, depth: int):
    """A producer without a register tile: an output row no vector divides (7 or 14 columns of
    an NCHW depthwise conv) goes whole below the reduction window, vectorised; a wider axis that
    whole vectors divide (the channels of an NHWC depthwise conv, where every operand is
    contiguous and nothing is broadcast) is split into blocks of up to two vectors with the window
    between the two loops, as :class:`.loop_fusion.AnchorLoopFusion` tiles such a conv alone: a
    block's accumulators stay in registers for the whole window. A small window is unrolled.
    Returns the outermost reduction loop, where the init is to be separated once the block stops
    moving (``None``: nothing to separate)."""
    rv = sch.get_sblock(info.name)
    loops = sch.get_loops(rv)[depth:]  # below the block loop (and a padding's row loop)
    vector = info.vector_position()
    reduce = [loops[p] for p in info.reduce_positions]
    if vector is None or not reduce:
        vectorize_innermost(sch, rv, lanes)
        return None
    extent = info.extents[vector]
    width = next((w for w in (2 * lanes, lanes) if extent % w == 0 and extent > w), None)
    if width is None:
        row, width = loops[vector], extent
        sch.reorder(*reduce, row)
    else:
        outer, row = sch.split(loops[vector], [extent // width, width])
        sch.reorder(outer, *reduce, row)
    if math.prod(info.extents[p] for p in info.reduce_positions) <= MAX_UNROLLED_WINDOW:
        for loop in reduce:
            sch.unroll(loop)
    vectorize_loop(sch, row, width, lanes)
    return reduce[0]
